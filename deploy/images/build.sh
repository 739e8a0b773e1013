#!/usr/bin/env bash
# Builds every image the compose stack runs, with no image registry: a Debian bookworm root made
# by debootstrap and imported, Python, Redis and Prometheus on it from Debian's packages, and the
# project's image from wheels made here (pip in the build reaches no index: --no-index).
#   bash deploy/images/build.sh          # what is missing or out of date
#   bash deploy/images/build.sh --force  # everything again
# Idempotent: each image carries a hash of what it was built from (label org.online-ctr.source)
# and is rebuilt only when that changed; the base root is made once. Needs root (debootstrap), a
# Docker engine (deploy/images/engine.sh), and the project's .venv (its pip). Writes the image
# names, as docker-compose.yml's variables, to deploy/images/images.env.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/deploy/images
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BASE_IMAGE=online-ctr/debian:$SUITE-minbase
PYTHON_IMAGE=online-ctr/python:3.11-$SUITE
REDIS_IMAGE=online-ctr/redis:$SUITE
PROMETHEUS_IMAGE=online-ctr/prometheus:$SUITE
OCTR_IMAGE=online-ctr:$SUITE
WHEELHOUSE=$ROOT/deploy/wheelhouse
# pip evaluates a dependency's environment markers on the interpreter it runs on: on the host's
# Debian Python, the very interpreter of the image (3.11.2: redis needs async-timeout before
# 3.11.3, which the .venv's newer Python would leave out). The .venv's pip, run by it.
VENV_PYTHON=$ROOT/.venv/bin/python
if [ -x /usr/bin/python3 ]; then
    WHEEL_PYTHON=${WHEEL_PYTHON:-/usr/bin/python3}
else
    WHEEL_PYTHON=${WHEEL_PYTHON:-$VENV_PYTHON}
fi
FORCE=${1:-}

# Without the buildx plugin the docker CLI refuses BuildKit; the classic builder does all this.
if ! docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=0
fi

log() {
    echo "images: $*" >&2
}

quiet() {
    # A command's output only if it fails: a build's steps, apt's and pip's chatter.
    local out
    out=$(mktemp)
    if ! "$@" >"$out" 2>&1; then
        tail -n 30 "$out" >&2
        rm -f "$out"
        log "failed: $*"
        return 1
    fi
    rm -f "$out"
}

hash_of() {
    # The files' contents and the words given (a base image's id), as one short hash.
    local files=() words=()
    for item in "$@"; do
        if [ -f "$item" ]; then files+=("$item"); else words+=("$item"); fi
    done
    { cat "${files[@]}"; printf '%s\n' "${words[@]}"; } | sha256sum | cut -c1-16
}

image_id() {
    docker image inspect -f '{{ .Id }}' "$1"
}

current() {
    # True if IMAGE exists and was built from HASH (its label), unless --force.
    local built
    built=$(docker image inspect -f '{{ index .Config.Labels "org.online-ctr.source" }}' "$1" \
        2>/dev/null) || return 1
    [ "$FORCE" != --force ] && [ "$built" = "$2" ]
}

build_base() {
    # Kept once made: `--force` takes a fresh one (Debian's updates of the day).
    if [ "$FORCE" != --force ] && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        return
    fi
    log "debootstrap --variant=minbase $SUITE -> $BASE_IMAGE"
    local root status=0
    root=$(mktemp -d /tmp/octr-rootfs.XXXXXX)
    quiet debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" || status=$?
    if [ "$status" -eq 0 ]; then
        # Security and point-release updates, as Debian's own images have them.
        printf 'deb %s %s main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE-updates" \
            "${MIRROR%/debian}/debian-security" "$SUITE-security" >"$root/etc/apt/sources.list"
        # No service starts while a package installs (there is no init in a build).
        printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
        chmod 0755 "$root/usr/sbin/policy-rc.d"
        # apt keeps no downloaded package and no translation: smaller layers.
        printf 'APT::Keep-Downloaded-Packages "false";\nAcquire::Languages "none";\n' \
            >"$root/etc/apt/apt.conf.d/90octr-slim"
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/*
        tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["bash"]' \
            --change 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null || status=$?
    fi
    rm -rf "$root"
    return "$status"
}

build_from_debian() {
    # Rebuilt when its Dockerfile, what it copies or the base image changed.
    local image=$1 dockerfile=$2 hash
    hash=$(hash_of "$HERE/$dockerfile" "$HERE/redis-entrypoint.sh" "$(image_id "$BASE_IMAGE")")
    if current "$image" "$hash"; then
        return
    fi
    log "$dockerfile -> $image"
    quiet docker build --force-rm --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --label "org.online-ctr.source=$hash" -f "$HERE/$dockerfile" -t "$image" "$HERE"
}

build_project() {
    # Rebuilt when the code, its metadata, how it is built or the Python image changed.
    local hash sources
    mapfile -t sources < <(
        cd "$ROOT"
        find online_ctr service workers -name '*.py' -o -name '*.lua' | LC_ALL=C sort
        printf '%s\n' pyproject.toml README.md LICENSE deploy/Dockerfile deploy/healthcheck.py \
            .dockerignore
    )
    hash=$(cd "$ROOT" && hash_of "${sources[@]}" "${sources[*]}" "$(image_id "$PYTHON_IMAGE")")
    if current "$OCTR_IMAGE" "$hash"; then
        return
    fi
    log "wheels (the project and its dependencies) -> $WHEELHOUSE"
    mkdir -p "$WHEELHOUSE"
    rm -f "$WHEELHOUSE"/online_ctr-*.whl
    local pip_module
    pip_module=$("$VENV_PYTHON" -c 'import os, pip; print(os.path.dirname(pip.__file__))')
    # Wheels already in the wheelhouse are taken from it, not fetched again.
    quiet "$WHEEL_PYTHON" "$pip_module" wheel --disable-pip-version-check \
        --find-links "$WHEELHOUSE" --wheel-dir "$WHEELHOUSE" "$ROOT"
    log "deploy/Dockerfile on $PYTHON_IMAGE -> $OCTR_IMAGE"
    quiet docker build --force-rm --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" \
        --label "org.online-ctr.source=$hash" -f "$ROOT/deploy/Dockerfile" -t "$OCTR_IMAGE" "$ROOT"
}

command -v docker >/dev/null || { log "no docker CLI (Debian: apt-get install docker.io)"; exit 1; }
docker info >/dev/null 2>&1 || { log "no Docker engine answers (start dockerd as root)"; exit 1; }
# Exit status 3: an image made only of Debian's packages failed (the mirror unreachable, say),
# which the test suite takes as a machine that cannot build here, not as a fault of ours.
debian_failed() {
    log "the images from Debian's packages could not be built (is $MIRROR reachable?)"
    exit 3
}
build_base || debian_failed
build_from_debian "$PYTHON_IMAGE" python.Dockerfile || debian_failed
build_from_debian "$REDIS_IMAGE" redis.Dockerfile || debian_failed
build_from_debian "$PROMETHEUS_IMAGE" prometheus.Dockerfile || debian_failed
build_project
# What rebuilding left: earlier versions of these images, and the classic builder's build stage
# (about 600 MB each time the project changes). Only images with our labels, only untagged ones.
docker image prune --force --filter label=org.online-ctr.source >/dev/null
docker image prune --force --filter label=org.online-ctr.stage=build >/dev/null
cat >"$HERE/images.env" <<NAMES
OCTR_IMAGE=$OCTR_IMAGE
REDIS_IMAGE=$REDIS_IMAGE
PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE
NAMES
cat "$HERE/images.env"
