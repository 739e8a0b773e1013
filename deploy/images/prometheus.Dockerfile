# Prometheus from Debian bookworm's packages, shaped like prom/prometheus where
# docker-compose.yml relies on it: runs as nobody, data in /prometheus, wget for the health check.
ARG BASE_IMAGE=online-ctr/debian:bookworm-minbase
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o nobody -g nogroup -m 0755 /prometheus
USER nobody
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
