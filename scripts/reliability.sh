#!/usr/bin/env bash
# The reliability suite, one command, one table.
#   scripts/reliability.sh            fast part (seconds per area + 30 s per fuzz target,
#                                     a 10 s soak)
#   scripts/reliability.sh --long     full sizes: 10M rotating keys, faults held 5 s,
#                                     a 300 s soak, 120 s per fuzz target
# Extra flags go to floodgate-reliability (see --help: --only AREAS, --soak-secs N,
# --fuzz-secs N, --json). Needs cargo-fuzz for the fuzz rows (installed on first use), the
# Redis on 127.0.0.1:6379 for the clock-skew row, and redis-server for the fault matrix
# (it starts its own on free loopback ports). The fault matrix and the soak run the
# release `floodgate` binary, built here.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
cargo build --quiet --release -p floodgate --bin floodgate
cargo build --quiet --release -p floodgate-reliability --bin floodgate-reliability
target="${CARGO_TARGET_DIR:-target}"
FLOODGATE_BIN="${FLOODGATE_BIN:-$target/release/floodgate}" \
    "$target/release/floodgate-reliability" "$@"
