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
cargo nextest run --workspace --no-fail-fast "$@"
cargo test --workspace --doc
bash scripts/test-python.sh
bash scripts/test-server-python.sh
