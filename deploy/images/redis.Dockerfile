# Redis from Debian bookworm's packages, shaped like the official image where docker-compose.yml
# relies on it: docker-entrypoint.sh drops to the redis user, the working directory /data holds
# the append-only file, redis-cli is there for the health check.
ARG BASE_IMAGE=online-ctr/debian:bookworm-minbase
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o redis -g redis -m 0750 /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 0755 /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
