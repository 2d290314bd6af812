#!/usr/bin/env bash
# The reliability suite, one command, one table.
#   scripts/reliability.sh            fast part (seconds + 30 s per fuzz target)
#   scripts/reliability.sh --long     full sizes: 10M rotating keys, 120 s per fuzz target
# Extra flags go to floodgate-reliability (see --help). Needs cargo-fuzz for the fuzz rows
# (installed on first use) and the Redis on 127.0.0.1:6379 for the clock-skew row.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
cargo run --quiet --release -p floodgate-reliability -- "$@"
