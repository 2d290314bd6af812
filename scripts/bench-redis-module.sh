#!/usr/bin/env bash
# Server time per call of floodgate's Redis module against redis-cell 0.2.2, in one run:
# each module in a redis-server of its own (both answer CL.THROTTLE, so they cannot share
# one) on a free port, the same redis-benchmark load on each (16 clients, 1000 random keys,
# max_burst 999, 10^6 per second: nearly all admitted), and the server's own accounting
# from INFO commandstats (usec_per_call). Builds the module with the dist profile and
# redis-cell with scripts/lib/redis-cell.sh (cached). Run by scripts/bench-redis.sh too.
#
# The rows are run in ROUNDS rounds, redis-cell's row first in odd rounds and last in even
# ones; each row's figures are the median over the rounds, and its ratios to redis-cell
# are taken per round (against that round's redis-cell row) and given as the median and
# the lowest and highest. On 2 cores or more both servers run on core 0 and redis-benchmark
# on core 1 (taskset), so that the load generator does not take the server's core; PIN=0
# leaves them to the scheduler. Each redis-benchmark run is stopped after ROW_SECONDS
# (default 300; its row is then left out of that round) and no round is started after
# MAX_SECONDS (default 3600) from the start.
#
#   scripts/bench-redis-module.sh [REQUESTS per row, default 200000] [ROUNDS, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
ROUNDS=${2:-5}
ROW_SECONDS=${ROW_SECONDS:-300}
MAX_SECONDS=${MAX_SECONDS:-3600}
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
SERVER_CPU=() CLIENT_CPU=()
if [ "${PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  SERVER_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start() { # start MODULE: sets PORT (not in a subshell, so PIDS keeps the server for cleanup)
  PORT=$(free_port)
  "${SERVER_CPU[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
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
  rps=$("${CLIENT_CPU[@]}" timeout "$ROW_SECONDS" redis-benchmark -p "$port" -c 16 -n "$N" -r 1000 -q "$@" |
    tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1 || true)
  printf '%s\t%s\t%s\n' "$label" "$(per_call "$port" "$stat")" "$rps"
}
cell_row() { row "redis-cell 0.2.2 CL.THROTTLE" "$CP" cl.throttle CL.THROTTLE 'k:__rand_int__' 999 1000000 1 1; }
module_rows() {
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
  row "floodgate-redis GCRA script (EVALSHA, the store without the module)" "$FP" evalsha EVALSHA "$GCRA_SHA" 1 'l:__rand_int__' redis 0 1 0 1000 1000000
  row "SET (the server's floor)" "$FP" set SET 's:__rand_int__' 123456789
}
start "$CELL"; CP=$PORT
start "$FG"; FP=$PORT
GCRA_SHA=$(redis-cli -p "$FP" script load "$(cat crates/floodgate-redis/lua/gcra.lua)")
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(redis-server --version | cut -d' ' -f3)"
echo "servers on: ${SERVER_CPU[*]:-any core}; redis-benchmark on: ${CLIENT_CPU[*]:-any core}"
echo "load before: $(uptime)"
START=$SECONDS
for r in $(seq "$ROUNDS"); do
  if [ $((SECONDS - START)) -ge "$MAX_SECONDS" ]; then
    echo "stopped after $((r - 1)) rounds: MAX_SECONDS=$MAX_SECONDS reached"
    break
  fi
  if [ $((r % 2)) = 1 ]; then
    { cell_row; module_rows; } >"$TMP/round-$r"
  else
    { module_rows; cell_row; } >"$TMP/round-$r"
  fi
  echo "round $r done ($((SECONDS - START)) s), load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load after: $(uptime)"
python3 - "$TMP" "$N" <<'EOF'
import glob, statistics, sys

tmp, n = sys.argv[1], sys.argv[2]
CELL = "redis-cell 0.2.2 CL.THROTTLE"
rounds, labels = [], []
for path in sorted(glob.glob(f"{tmp}/round-*"), key=lambda p: int(p.rsplit("-", 1)[1])):
    rows = {}
    for line in open(path):
        label, us, rps = (line.rstrip("\n").split("\t") + ["", ""])[:3]
        if label not in labels:
            labels.append(label)
        try:
            rows[label] = (float(us), float(rps))
        except ValueError:
            pass  # a row stopped or failed in this round
    rounds.append(rows)


def spread(values, fmt):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(values))}-{fmt(max(values))})"


x = lambda v: f"{v:.2f}x"
print(f"{len(rounds)} rounds of {n} requests per row, 16 clients; median (lowest-highest) over the rounds,")
print("each ratio taken against the same round's redis-cell row")
head = ("command", "server µs/call", "vs cell", "requests/s", "vs cell")
print(f"{head[0]:<66} {head[1]:>20} {head[2]:>20} {head[3]:>20} {head[4]:>20}")
for label in labels:
    us = [r[label][0] for r in rounds if label in r]
    rps = [r[label][1] for r in rounds if label in r]
    both = [r for r in rounds if label in r and CELL in r]
    us_ratio = [r[label][0] / r[CELL][0] for r in both if r[CELL][0] > 0]
    rps_ratio = [r[label][1] / r[CELL][1] for r in both if r[CELL][1] > 0]
    print(
        f"{label:<66} {spread(us, lambda v: f'{v:.2f}'):>20} {spread(us_ratio, x):>20}"
        f" {spread(rps, lambda v: f'{v:.0f}'):>20} {spread(rps_ratio, x):>20}"
    )
EOF
