#!/usr/bin/env bash
# Server time per call of floodgate's Redis module against redis-cell 0.2.2, in one run:
# each module in a redis-server of its own (both answer CL.THROTTLE, so they cannot share
# one) on a free port, the same redis-benchmark load on each (16 clients, 1000 random keys,
# max_burst 999, 10^6 per second: nearly all admitted), and the server's own accounting
# from INFO commandstats (usec_per_call); then reserve + settle and acquire + release
# through the module against the store's scripts. Builds the module with the dist profile and
# redis-cell with scripts/lib/redis-cell.sh (cached). Run by scripts/bench-redis.sh too.
#
#   scripts/bench-redis-module.sh [REQUESTS per row, default 200000]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
CELL=$(bash scripts/lib/redis-cell.sh)
cargo build -q --profile dist -j 2 -p floodgate-redis-module
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
FG=$TARGET/dist/libfloodgate_redis_module.so
TMP=$(mktemp -d /tmp/fg-bench-module.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start() { # start MODULE: sets PORT (not in a subshell, so PIDS keeps the server for cleanup)
  PORT=$(free_port)
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --loadmodule "$1" --logfile "$TMP/redis-$PORT.log" --dir "$TMP" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
}
# usec_per_call of COMMAND on PORT
per_call() { redis-cli -p "$1" info commandstats | tr -d '\r' | grep "^cmdstat_$2:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/'; }
# row LABEL PORT STATNAME ARGS...: requests per second (redis-benchmark) and µs per call
row() {
  local label=$1 port=$2 stat=$3; shift 3
  redis-cli -p "$port" config resetstat >/dev/null
  local rps
  rps=$(redis-benchmark -p "$port" -c 16 -n "$N" -r 1000 -q "$@" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
  printf '%s\t%s\t%s\n' "$label" "$(per_call "$port" "$stat")" "$rps"
}
start "$CELL"; CP=$PORT
start "$FG"; FP=$PORT
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(redis-server --version | cut -d' ' -f3)"
echo "load before: $(uptime)"
{
  row "redis-cell 0.2.2 CL.THROTTLE" "$CP" cl.throttle CL.THROTTLE 'k:__rand_int__' 999 1000000 1 1
  row "floodgate module CL.THROTTLE" "$FP" cl.throttle CL.THROTTLE 'k:__rand_int__' 999 1000000 1 1
  row "floodgate module FG.THROTTLE gcra" "$FP" fg.throttle FG.THROTTLE gcra 'g:__rand_int__' 1000000/s 1
  row "floodgate module FG.THROTTLE token-bucket" "$FP" fg.throttle FG.THROTTLE token-bucket 't:__rand_int__' 1000000/s 1
  row "floodgate module FG.THROTTLE fixed-window" "$FP" fg.throttle FG.THROTTLE fixed-window 'w:__rand_int__' 1000000/s 1
  row "floodgate module FG.THROTTLE sliding-counter" "$FP" fg.throttle FG.THROTTLE sliding-counter 'c:__rand_int__' 1000000/s 1
  # a sliding log keeps an entry per admitted call in its window (limit at most 10 000)
  row "floodgate module FG.THROTTLE sliding-log" "$FP" fg.throttle FG.THROTTLE sliding-log 'o:__rand_int__' 10000/s 1
  row "floodgate module FG.THROTTLE leaky-meter" "$FP" fg.throttle FG.THROTTLE leaky-meter 'm:__rand_int__' 1000000/s 1
  row "floodgate module FG.THROTTLE leaky-queue" "$FP" fg.throttle FG.THROTTLE leaky-queue 'q:__rand_int__' 1000000/s 1
  row "floodgate module FG.MULTI 2 gcra" "$FP" fg.multi FG.MULTI 2 gcra 'u:__rand_int__' 1000000/s 1 gcra global 1000000000/s 1
  # the Redis store's call (floodgate-redis with the module): GCRA T = 1 us, tau = 1 ms
  row "floodgate module FG.DECIDE gcra (the store's call)" "$FP" fg.decide FG.DECIDE 'd:__rand_int__' 1 1 0 1000 1000000 0 0 one redis 0
  row "floodgate module FG.DECIDE token-bucket (the store's call)" "$FP" fg.decide FG.DECIDE 'e:__rand_int__' 5 1 0 1000 1000000 1000000000 0 one redis 0
  row "floodgate module FG.DECIDE fixed window" "$FP" fg.decide FG.DECIDE 'f:__rand_int__' 2 1 0 1000000 1000000000 0 0 one redis 0
  row "floodgate module FG.DECIDE sliding log" "$FP" fg.decide FG.DECIDE 'h:__rand_int__' 3 1 0 10000 1000000000 0 0 one redis 0
  row "floodgate module FG.DECIDE sliding counter" "$FP" fg.decide FG.DECIDE 'i:__rand_int__' 4 1 0 1000000 1000000000 0 0 one redis 0
  row "floodgate module FG.DECIDE leaky bucket" "$FP" fg.decide FG.DECIDE 'j:__rand_int__' 6 1 0 1000 1000000 1000000000 -1 one redis 0
  # the same calls as the store's scripts (no module), on the same server
  GCRA_SHA=$(redis-cli -p "$FP" script load "$(cat crates/floodgate-redis/lua/gcra.lua)")
  row "floodgate-redis GCRA script (EVALSHA, the store without the module)" "$FP" evalsha EVALSHA "$GCRA_SHA" 1 'l:__rand_int__' redis 0 1 0 1000 1000000
  row "SET (the server's floor)" "$FP" set SET 's:__rand_int__' 123456789
} >"$TMP/rows"
# reserve + settle and acquire + release as the store sends them, pipelined, through the
# module and through the store's scripts on the same server (scripts/lib/redis-pairs.py)
L=crates/floodgate-redis/lua
with_algs() { # the store's driver script over every algorithm (scripts.rs with_algs!)
  cat $L/time.lua $L/muldiv.lua
  printf 'local ALG = {}\nALG[1] = function(KEYS, ARGV)\n'; cat $L/gcra.lua
  printf '\nend\nALG[2] = function(KEYS, ARGV)\n'; cat $L/fixed_window.lua
  printf '\nend\nALG[3] = function(KEYS, ARGV)\n'; cat $L/sliding_log.lua
  printf '\nend\nALG[4] = function(KEYS, ARGV)\n'; cat $L/sliding_counter.lua
  printf '\nend\nALG[5] = function(KEYS, ARGV)\n'; cat $L/token_bucket.lua
  printf '\nend\nALG[6] = function(KEYS, ARGV)\n'; cat $L/leaky_bucket.lua
  printf '\nend\n'; cat "$L/$1"
}
SETTLE_SHA=$(redis-cli -p "$FP" -x script load < <(with_algs settle.lua))
INFLIGHT_SHA=$(redis-cli -p "$FP" -x script load <$L/inflight.lua)
python3 scripts/lib/redis-pairs.py "$FP" "$((N / 4))" "$SETTLE_SHA" "$INFLIGHT_SHA" >"$TMP/pairs"
echo "load after: $(uptime)"
CELL_US=$(head -1 "$TMP/rows" | cut -f2)
CELL_RPS=$(head -1 "$TMP/rows" | cut -f3)
printf '%-60s %14s %8s %12s %8s\n' "command ($N requests, 16 clients)" "server µs/call" "vs cell" "requests/s" "vs cell"
while IFS=$'\t' read -r label us rps; do
  printf '%-60s %14s %8s %12s %8s\n' "$label" "$us" "$(python3 -c "print(f'{$us / $CELL_US:.2f}x')")" "$rps" "$(python3 -c "print(f'{$rps / $CELL_RPS:.2f}x')")"
done <"$TMP/rows"
echo "$((N / 4)) pairs each, pipelined (server time of both calls of a pair):"
cat "$TMP/pairs"
