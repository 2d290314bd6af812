#!/usr/bin/env bash
# Where a GCRA decision's server time goes: Redis's own `usec_per_call` for EVALSHA
# (INFO commandstats) under redis-benchmark -c 16, for scripts that each do one piece of
# the work, for the seed INCR+EXPIRE script, for the GCRA script as it is now, and for
# earlier versions from git history: before it was written flat (commit 11f40dc), and
# flat with the decimal stored TAT and the seven-value reply (commit 18a1bbc). Starts its
# own redis-server on a free loopback port and stops it at the end. Rates are noisy on a
# shared machine; server time per call is the figure to compare (run it twice).
#
#   scripts/redis-script-costs.sh [REQUESTS]     (default 60000 per script)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-60000}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
TMP=$(mktemp -d /tmp/fg-rcost.XXXXXX)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --logfile "$TMP/redis.log" --pidfile "$TMP/redis.pid"
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

L=crates/floodgate-redis/lua
# KEYS[1], now from Redis TIME, cost 1, pad 0, T, tau, cap (the current script ignores cap)
ARGS=(1 gkey redis 0 1 0 1000 1000000 1000)
cost() { # label script-text [evalsha args...]
  local label=$1 body=$2
  shift 2
  local sha
  sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$body")
  redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
  redis-benchmark -p "$PORT" -c 16 -n "$N" -q evalsha "$sha" "$@" >/dev/null 2>&1
  local us
  us=$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
  printf '%-46s %6s us/call\n' "$label" "$us"
}
echo "redis-server on 127.0.0.1:$PORT, redis-benchmark -c 16 -n $N, server time per EVALSHA:"
cost "empty script (return 1)" "return 1" "${ARGS[@]}"
cost "return a seven-value reply" "return {1, 1000, 999, -1, 1000000, 0, 0}" "${ARGS[@]}"
cost "return one integer" "return 1000000" "${ARGS[@]}"
cost "five tonumber (2 strtod each) + one integer" "local a = tonumber(ARGV[3]) + tonumber(ARGV[5]) + tonumber(ARGV[6]) + tonumber(ARGV[7]) + tonumber(ARGV[4]) return 1" "${ARGS[@]}"
cost "five coercions (1 strtod each) + one integer" "local a = (ARGV[3] + 0) + (ARGV[5] + 0) + (ARGV[6] + 0) + (ARGV[7] + 0) + (ARGV[4] + 0) return 1" "${ARGS[@]}"
cost "decimal TAT: 2 sub + 2 tonumber + format" "local v = '1764741600123456789' local a = tonumber(string.sub(v, 1, 10)) + tonumber(string.sub(v, 11)) local w = string.format('%d%09d', 1764741600, 123456789) return 1" "${ARGS[@]}"
cost "binary TAT: struct unpack + pack" "local v = struct.pack('>I5I7', 1764741600, 123456789) local a, b = struct.unpack('>I5I7', v) return 1" "${ARGS[@]}"
cost "TIME + reply" "local t = redis.call('TIME') return {1, 1000, 999, -1, 1000000, 0, 0}" "${ARGS[@]}"
cost "GET + reply" "local v = redis.call('GET', KEYS[1]) return {1, 1000, 999, -1, 1000000, 0, 0}" "${ARGS[@]}"
cost "SET PX + reply" "redis.call('SET', KEYS[1], '1764741600123456789', 'PX', 1000) return {1, 1000, 999, -1, 1000000, 0, 0}" "${ARGS[@]}"
cost "TIME + GET + SET PX + reply" "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1764741600123456789', 'PX', 1000) return {1, 1000, 999, -1, 1000000, 0, 0}" "${ARGS[@]}"
cost "TIME + GET + SET PX + one integer" "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1764741600123456789', 'PX', 1000) return 1000000" "${ARGS[@]}"
cost "seed INCR+EXPIRE" "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c" 1 key 60
cost "GCRA before (time.lua prelude, commit 11f40dc)" "$(git show 11f40dc:$L/time.lua; git show 11f40dc:$L/gcra.lua)" "${ARGS[@]}"
cost "GCRA flat, decimal TAT, 7 values (18a1bbc)" "$(git show 18a1bbc:$L/gcra.lua)" "${ARGS[@]}"
cost "GCRA now ($L/gcra.lua)" "$(cat $L/gcra.lua)" "${ARGS[@]}"
