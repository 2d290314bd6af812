#!/usr/bin/env bash
# `floodgate server` against independent Python clients: Envoy's generated API
# (xds-protos) over grpcio, redis-py on the RESP port, curl on HTTP; and the wiring
# operators copy (docs/envoy.md, deploy/): Envoy's Bootstrap parse, kubernetes-validate,
# the Grafana dashboard's and alert rules' metrics against a scrape. Uses the virtualenv
# under target/pyenv (shared with scripts/test-python.sh); installs the client packages
# into it when missing (idempotent, quiet). Builds the floodgate binary (debug) first.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pyenv
py="$venv/bin/python"
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
if ! "$py" -c 'import grpc, redis, pytest, yaml, kubernetes_validate; from envoy.service.ratelimit.v3 import rls_pb2_grpc' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'grpcio>=1.60' 'xds-protos>=1.60' 'redis>=5' 'pytest>=8' \
        'pyyaml>=6' 'kubernetes-validate>=1.37'
fi

cargo build --quiet --bin floodgate
target_dir="${CARGO_TARGET_DIR:-target}"
bin="$target_dir/debug/floodgate"
# Run a private copy: other builds sharing the target directory may replace the binary.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$bin" "$tmp/floodgate"
FLOODGATE_BIN="$tmp/floodgate" "$py" -m pytest -q -p no:cacheprovider tests/python "$@"
