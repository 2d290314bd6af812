#!/usr/bin/env bash
# The Redis benchmark with the native peer: builds redis-cell 0.2.2 (the CL.THROTTLE
# module) from crates.io once, caches libredis_cell.so under the target dir, and runs the
# floodgate-redis bench example with it loaded into the bench's own redis-server, so the
# scripts, the seed INCR+EXPIRE baseline and native CL.THROTTLE are measured in one run
# on one server. Needs the network only for the first build of the module.
#
#   scripts/bench-redis.sh [bench options, e.g. --seconds 3]
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
CELL=$TARGET/redis-cell-0.2.2
SO=$CELL/libredis_cell.so
if [ ! -f "$SO" ]; then
  mkdir -p "$CELL"
  TMP=$(mktemp -d /tmp/fg-rcell.XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  # fetch the crate through cargo (a throwaway package outside this workspace)
  mkdir -p "$TMP/fetch/src"
  printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nredis-cell = "=0.2.2"\n[workspace]\n' \
    >"$TMP/fetch/Cargo.toml"
  touch "$TMP/fetch/src/lib.rs"
  cargo fetch -q --manifest-path "$TMP/fetch/Cargo.toml"
  SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/redis-cell-0.2.2 | head -1)
  cp -r "$SRC" "$TMP/redis-cell"
  echo "building redis-cell 0.2.2 into $CELL (log: $CELL/build.log)"
  cargo build --release -j 2 --manifest-path "$TMP/redis-cell/Cargo.toml" --target-dir "$CELL/target" \
    >"$CELL/build.log" 2>&1 || { tail -30 "$CELL/build.log"; exit 1; }
  cp "$CELL/target/release/libredis_cell.so" "$SO"
fi
echo "redis-cell module: $SO"
echo "load before: $(uptime)"
cargo run -q --release -j 2 -p floodgate-redis --example bench -- --cell-module "$SO" "$@"
echo "load after: $(uptime)"
