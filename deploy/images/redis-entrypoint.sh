#!/bin/sh
# What the official Redis image's entrypoint does that docker-compose.yml relies on: run as
# root, hand /data to the redis user and start the server as that user, with files private.
set -e
# `docker run IMAGE --appendonly yes` means the server with those options.
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
    set -- redis-server "$@"
fi
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
    find . \! -user redis -exec chown redis '{}' +
    exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
umask 0077
exec "$@"
