#!/usr/bin/env bash
# The project's test command (the README's second command; .ci/run calls it).
# Runs every crate's unit, integration and property tests with nextest, then the doc
# examples (nextest does not run doctests), then the Python module's pytest suite
# (scripts/test-python.sh builds and installs it into a venv under target/). Needs a
# Redis on 127.0.0.1:6379 for the Redis tests; tests that kill or pause Redis start their
# own redis-server. Then `floodgate server` against independent Python clients (grpcio
# with Envoy's xds-protos, redis-py, curl: scripts/test-server-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
# the Redis module (crates/floodgate-redis-module) builds with bindgen, which needs libclang
if ! dpkg -s libclang-dev >/dev/null 2>&1 && ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
    else
        echo "scripts/test.sh: the Redis module's build needs libclang (Debian: apt-get install libclang-dev)" >&2
        exit 1
    fi
fi
cargo nextest run --workspace --no-fail-fast "$@"
cargo test --workspace --doc
bash scripts/test-python.sh
bash scripts/test-server-python.sh
