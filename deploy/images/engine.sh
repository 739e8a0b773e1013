#!/usr/bin/env bash
# A Docker engine for the compose stack (deploy/images/build.sh, tests/deploy/test_compose_stack.py),
# only what is missing: Debian's docker.io (dockerd) and debootstrap (the base image) installed,
# and dockerd started in the background when none answers.
#   bash deploy/images/engine.sh          # install what is missing, then start dockerd
#   bash deploy/images/engine.sh --start  # only start dockerd (installs nothing)
# Root only. Where the engine cannot be had it says why in one line and exits 0: the stack's test
# then skips, saying the same. Idempotent: with an engine answering it does nothing.
set -euo pipefail

LOG=${DOCKERD_LOG:-/var/log/online-ctr-dockerd.log}
MODE=${1:-}

answers() {
    docker info >/dev/null 2>&1
}

say() {
    echo "engine: $*" >&2
}

if command -v docker >/dev/null && answers && { [ "$MODE" = --start ] || command -v debootstrap >/dev/null; }; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    say "not root: installs and starts nothing (the compose stack's test skips); as root: bash $0"
    exit 0
fi
if [ "$MODE" != --start ]; then
    missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if ((${#missing[@]})); then
        say "installing Debian packages ${missing[*]}"
        apt-get update -qq
        # No recommends: the engine runs without them (overlay2, iptables come as dependencies).
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
fi
if answers; then
    exit 0
fi
if ! command -v dockerd >/dev/null; then
    say "no dockerd (Debian package docker.io): bash $0 installs it"
    exit 0
fi
say "starting dockerd (log: $LOG)"
# Its own session, no terminal and no inherited output: it outlives this script and never holds
# the pipe of whoever ran it (make, pytest).
setsid dockerd >"$LOG" 2>&1 </dev/null &
for _ in $(seq 60); do
    if answers; then
        exit 0
    fi
    if ! kill -0 $! 2>/dev/null; then
        break
    fi
    sleep 0.5
done
say "dockerd did not start: $(grep -m1 -iE 'level=(fatal|error)' "$LOG" || tail -n 1 "$LOG")"
exit 0
