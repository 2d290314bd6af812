#!/usr/bin/env bash
# Server time per call of floodgate's Redis module against redis-cell 0.2.2, in one run:
# each module in a redis-server of its own (both answer CL.THROTTLE, so they cannot share
# one) on a free port, the same redis-benchmark load on each (16 clients, 1000 random keys,
# max_burst 999, 10^6 per second: nearly all admitted), and the server's own accounting
# from INFO commandstats (usec_per_call); then, once, reserve + settle and acquire + release
# through the module against the store's scripts on the module's server
# (scripts/lib/redis-pairs.py). Builds the module with the dist profile and redis-cell with scripts/lib/redis-cell.sh (cached). Run by scripts/bench-redis.sh too.
#
# The rows are run in ROUNDS rounds; in each, every row is measured next to a run of
# redis-cell's CL.THROTTLE (redis-cell first in odd rounds, second in even ones), and its
# ratios are taken against that run, so that a change of the machine's load between rows
# moves both sides of a ratio. Each row's figures are the median over the rounds, its
# ratios the median and the lowest and highest of the per-round ratios. On 2 cores or more both servers run on core 0 and redis-benchmark
# on core 1 (taskset), so that the load generator does not take the server's core; PIN=0
# leaves them to the scheduler. Each redis-benchmark run is stopped after ROW_SECONDS
# (default 300; its row is then left out of that round) and no round is started after
# MAX_SECONDS (default 3600) from the start. PIPELINE=N sends N requests per round trip
# (redis-benchmark -P; default 1): at 16 callers without it the round trips, not the
# server, set the requests per second (SET reaches only about 1.1x redis-cell's).
# ROWS=REGEX runs only the rows whose label matches the extended regular expression
# (grep -E; e.g. ROWS='sliding log'), each still beside its own redis-cell run, and
# skips the reserve/settle and lease pairs at the end. MODULE=PATH measures that build
# of the module instead of building one (to compare two builds in turns).
#
#   scripts/bench-redis-module.sh [REQUESTS per row, default 200000] [ROUNDS, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
ROUNDS=${2:-5}
ROW_SECONDS=${ROW_SECONDS:-300}
MAX_SECONDS=${MAX_SECONDS:-3600}
PIPELINE=${PIPELINE:-1}
ROWS=${ROWS:-}
CELL=$(bash scripts/lib/redis-cell.sh)
if [ -n "${MODULE:-}" ]; then
  FG=$(realpath "$MODULE")
else
  cargo build -q --profile dist -j 2 -p floodgate-redis-module
  TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
  FG=$TARGET/dist/libfloodgate_redis_module.so
fi
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
# measure PORT STATNAME ARGS...: µs per call (INFO commandstats) and requests per second
# (redis-benchmark), tab-separated; empty when the run was stopped or failed
measure() {
  local port=$1 stat=$2; shift 2
  redis-cli -p "$port" config resetstat >/dev/null
  local rps
  rps=$("${CLIENT_CPU[@]}" timeout "$ROW_SECONDS" redis-benchmark -p "$port" -c 16 -P "$PIPELINE" -n "$N" -r 1000 -q "$@" |
    tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1 || true)
  printf '%s\t%s' "$(per_call "$port" "$stat" || true)" "$rps"
}
cell() { measure "$CP" cl.throttle CL.THROTTLE 'k:__rand_int__' 999 1000000 1 1; }
# row LABEL PORT STATNAME ARGS...: the row's figures, then redis-cell's measured right next
# to it (before it in odd rounds, after it in even ones)
row() {
  local label=$1 mine theirs; shift
  if [ -n "$ROWS" ] && ! grep -qE -- "$ROWS" <<<"$label"; then return 0; fi
  if [ $((ROUND % 2)) = 1 ]; then
    theirs=$(cell); mine=$(measure "$@")
  else
    mine=$(measure "$@"); theirs=$(cell)
  fi
  printf '%s\t%s\t%s\n' "$label" "$mine" "$theirs"
}
cell_row() {
  local c; c=$(cell)
  printf '%s\t%s\t%s\n' "redis-cell 0.2.2 CL.THROTTLE" "$c" "$c"
}
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
  ROUND=$r
  { cell_row; module_rows; } >"$TMP/round-$r"
  echo "round $r done ($((SECONDS - START)) s), load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load after: $(uptime)"
python3 - "$TMP" "$N" <<'EOF'
import glob, statistics, sys

tmp, n = sys.argv[1], sys.argv[2]
rounds, labels = [], []
for path in sorted(glob.glob(f"{tmp}/round-*"), key=lambda p: int(p.rsplit("-", 1)[1])):
    rows = {}
    for line in open(path):
        label, *figures = line.rstrip("\n").split("\t")
        if label not in labels:
            labels.append(label)
        try:
            # the row's µs and requests/s, then redis-cell's next to it
            rows[label] = tuple(float(f) for f in figures[:4])
        except ValueError:
            pass  # a run stopped or failed in this round
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
print("each ratio taken against redis-cell's CL.THROTTLE measured right before or after the row")
head = ("command", "server µs/call", "vs cell", "requests/s", "vs cell")
print(f"{head[0]:<66} {head[1]:>20} {head[2]:>20} {head[3]:>20} {head[4]:>20}")
for label in labels:
    us = [r[label][0] for r in rounds if label in r]
    rps = [r[label][1] for r in rounds if label in r]
    pairs = [r[label] for r in rounds if label in r and len(r[label]) == 4]
    us_ratio = [p[0] / p[2] for p in pairs if p[2] > 0]
    rps_ratio = [p[1] / p[3] for p in pairs if p[3] > 0]
    print(
        f"{label:<66} {spread(us, lambda v: f'{v:.2f}'):>20} {spread(us_ratio, x):>20}"
        f" {spread(rps, lambda v: f'{v:.0f}'):>20} {spread(rps_ratio, x):>20}"
    )
EOF
[ -z "$ROWS" ] || exit 0
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
echo "$((N / 4)) pairs each, pipelined (server time of both calls of a pair):"
python3 scripts/lib/redis-pairs.py "$FP" "$((N / 4))" "$SETTLE_SHA" "$INFLIGHT_SHA"
