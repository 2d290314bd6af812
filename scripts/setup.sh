#!/usr/bin/env bash
# What the test suite needs beyond Rust, Python 3 and a Redis on 127.0.0.1:6379, installed
# once (idempotent; scripts/test.sh runs it first):
#   - cargo-nextest (crates.io)
#   - libclang-dev: the Redis module's build (redis-module's bindgen)
#   - chromium: the admin page's browser test (tests/admin_cli.rs)
#   - faketime: the network faults' clock step (tests/reliability_net.rs)
#   - iproute2 (`ip`): the network namespaces of the network faults (as root)
#   - curl: the command transcripts, the HTTP/2 checks and the server's TLS tests
#   - redis-tools (`redis-cli`, built with TLS): the server's TLS tests
#   - prometheus (for `promtool`): the alert rules' and the dashboard's PromQL
#     (tests/python/test_dashboards.py)
#   - dpkg-dev, systemd (`systemd-analyze`), podman, buildah, groff-base: the packages'
#     test (scripts/test-packages.sh) and the man pages' check
#   - redis-cell 0.2.2, built from crates.io into target/: the differential test
#     (tests/redis_cell_diff.rs)
#   - a virtualenv under target/pyenv with grpcio, xds-protos, redis, pytest and maturin:
#     the Python module's tests and the Python clients of the server; pyyaml and
#     kubernetes-validate: the checks of docs/envoy.md and deploy/ (tests/python/test_wiring.py)
# Debian packages are installed with apt-get when run as root; otherwise the script names
# the packages to install and fails.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked --quiet cargo-nextest

# Debian package -> a file or command that shows it is there
missing=()
# (libclang itself: libclang-cpp.so, which other packages bring, is not what bindgen loads)
have_libclang() { dpkg -s libclang-dev >/dev/null 2>&1 || ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1; }
have_libclang || missing+=(libclang-dev)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ dpkg -s faketime >/dev/null 2>&1 || ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; } || missing+=(faketime)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v groff >/dev/null 2>&1 || missing+=(groff-base)
{ command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; } || missing+=(nginx)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/setup.sh: installing ${missing[*]} (Debian packages)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "scripts/setup.sh: the tests need these Debian packages: ${missing[*]} (as root: apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi

bash scripts/lib/redis-cell.sh >/dev/null

venv=target/pyenv
py="$venv/bin/python"
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
if ! "$py" -c 'import grpc, redis, pytest, yaml, kubernetes_validate; from envoy.service.ratelimit.v3 import rls_pb2_grpc' 2>/dev/null \
    || ! "$venv/bin/maturin" --version >/dev/null 2>&1; then
    "$py" -m pip install -q --disable-pip-version-check \
        'grpcio>=1.60' 'xds-protos>=1.60' 'redis>=5' 'pytest>=8' 'maturin>=1.9,<2' \
        'pyyaml>=6' 'kubernetes-validate>=1.37'
fi
# The notation of Python's `limits` package, compared with floodgate's rate parser
# (crates/floodgate-py/tests/test_rates.py).
if ! "$py" -c 'import limits' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'limits>=5,<6'
fi
echo "scripts/setup.sh: everything the tests need is installed" >&2
