#!/usr/bin/env bash
# Builds redis-cell 0.2.2 (the CL.THROTTLE module) from crates.io once and caches it as
# $CARGO_TARGET_DIR/redis-cell-0.2.2/libredis_cell.so (default target/). Prints the path
# of the module on stdout (the only line on stdout); progress and errors go to stderr.
# Needs the network only for the first build. Used by scripts/bench-redis.sh, by .ci/run
# (before the tests) and by the differential test tests/redis_cell_diff.rs.
#
#   SO=$(bash scripts/lib/redis-cell.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
CELL=$TARGET/redis-cell-0.2.2
SO=$CELL/libredis_cell.so
mkdir -p "$CELL"
# one build at a time (a test and a benchmark may ask at once)
exec 9>"$CELL/.lock"
flock 9
if [ ! -f "$SO" ]; then
  TMP=$(mktemp -d /tmp/fg-rcell.XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  # fetch the crate through cargo (a throwaway package outside this workspace)
  mkdir -p "$TMP/fetch/src"
  printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nredis-cell = "=0.2.2"\n[workspace]\n' \
    >"$TMP/fetch/Cargo.toml"
  touch "$TMP/fetch/src/lib.rs"
  cargo fetch -q --manifest-path "$TMP/fetch/Cargo.toml" >&2
  SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/redis-cell-0.2.2 | head -1)
  cp -r "$SRC" "$TMP/redis-cell"
  echo "building redis-cell 0.2.2 into $CELL (log: $CELL/build.log)" >&2
  cargo build --release -j 2 --manifest-path "$TMP/redis-cell/Cargo.toml" --target-dir "$CELL/target" \
    >"$CELL/build.log" 2>&1 || { tail -30 "$CELL/build.log" >&2; exit 1; }
  # keep only the module: the build directory is hundreds of MB
  cp "$CELL/target/release/libredis_cell.so" "$SO.tmp"
  mv "$SO.tmp" "$SO"
  rm -rf "$CELL/target"
fi
echo "$SO"
