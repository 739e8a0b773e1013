# Python 3.11 from Debian bookworm's packages, on the minbase root build.sh imports: the base of
# the project's image where no image registry is reachable (deploy/Dockerfile's PYTHON_IMAGE).
# python3-venv: the build stage makes the virtualenv with it; the runtime needs only python3.
ARG BASE_IMAGE=online-ctr/debian:bookworm-minbase
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
CMD ["python3"]
