#!/usr/bin/env bash
# Instructions per call of FG.DECIDE's sliding log (the Redis store's call with the module)
# under callgrind, for one build of the module: a redis-server of its own on a free port
# runs under valgrind --tool=callgrind while redis-benchmark sends the bench row's call
# (16 clients, -P 16, 1000 random keys) with a window of 60 s instead of 1 s, so that the
# slowed server's logs still hold a few hundred entries (a few KB, as at full speed with
# 1 s); after WARM seconds (default 75: the logs fill) the counts are zeroed, and after
# COUNT more (default 20) dumped. Prints the calls counted, the server's instructions per
# call, those of the module's sliding-log decision (decide::one_log, the text read and
# the splice planned) and of RedisModule_Replicate, and three keys' value lengths.
# Two builds are best run side by side (same machine load, so similar log lengths).
#
#   scripts/callgrind-decide-log.sh path/to/libfloodgate_redis_module.so
set -euo pipefail
SO=$(realpath "$1")
WARM=${WARM:-75}
COUNT=${COUNT:-20}
TMP=$(mktemp -d /tmp/fg-callgrind.XXXXXX)
P=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" \
  redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no --loadmodule "$SO" \
  --logfile "$TMP/redis.log" --dir "$TMP" >/dev/null 2>&1 &
PID=$!
BENCH=
cleanup() {
  [ -z "$BENCH" ] || kill "$BENCH" 2>/dev/null || true
  redis-cli -p "$P" shutdown nosave >/dev/null 2>&1 || kill "$PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
for _ in $(seq 150); do redis-cli -p "$P" ping >/dev/null 2>&1 && break; sleep 0.2; done
timeout $((WARM + COUNT + 30)) redis-benchmark -p "$P" -c 16 -P 16 -n 100000000 -r 1000 -q \
  FG.DECIDE 'h:__rand_int__' 3 1 0 1000000 60000000000 0 0 one redis 0 >/dev/null 2>&1 &
BENCH=$!
sleep "$WARM"
redis-cli -p "$P" config resetstat >/dev/null
callgrind_control -z "$PID" >/dev/null 2>&1
sleep "$COUNT"
callgrind_control -d "$PID" >/dev/null 2>&1
calls=$(redis-cli -p "$P" info commandstats | tr -d '\r' | grep '^cmdstat_fg.decide:' |
  sed 's/^[^:]*:calls=\([0-9]*\),.*/\1/')
lens=$(for k in 000000000123 000000000456 000000000789; do redis-cli -p "$P" strlen "h:$k"; done | tr '\n' ' ')
sleep 1
python3 - "$calls" "$lens" "$(ls "$TMP"/cg.out.* | head -1)" <<'PY'
import re, subprocess, sys

calls, lens, dump = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=yes", "--context=0", dump],
                     capture_output=True, text=True).stdout
num = lambda s: int(s.replace(",", ""))
total = num(re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", out).group(1))
def calls_to(name):
    # inclusive cost of the calls to `name` (callgrind_annotate's "=>" lines), largest
    costs = [num(m.group(1)) for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+=> \S*" + re.escape(name) + r" \(", out, re.M)]
    return max(costs, default=0)
print(f"calls {calls}, per call: server {total // calls} instructions, "
      f"sliding-log decision {calls_to('decide::one_log') // calls}, "
      f"RedisModule_Replicate {calls_to('RM_Replicate') // calls}; value lengths {lens}")
PY
