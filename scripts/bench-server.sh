#!/usr/bin/env bash
# Benchmark of `floodgate server` on one core (loopback only, bounded runs):
#   1. ShouldRateLimit (Envoy RLS v3, gRPC) calls/s and latency, in-process store and
#      Redis store, with the project's own load client (crates/floodgate-server/examples/
#      rls_load.rs; ghz is not installable here).
#   2. CL.THROTTLE over RESP with redis-benchmark, against floodgate (in-process and
#      Redis store) and, in the same run, the Redis on 127.0.0.1:6379 answering the seed's
#      INCR+EXPIRE script through EVALSHA.
# The server is pinned to core 0 (`taskset -c 0`, one worker thread); the load tools to
# core 1. Server CPU seconds are read from /proc so "calls per server CPU second" is
# reported next to wall-clock calls/s. Keys on 6379 use a unique prefix and are deleted.
#   3. With LIMITADOR_BIN=/path/to/limitador-server: Kuadrant's Limitador, the closest
#      peer, under the same pinning and the same load client in the same run, with the
#      same limit (namespace bench, one counter per `user` value, 1000000/s; in memory,
#      then on the Redis at 127.0.0.1:6379, logical database 1, keys expiring after 1 s).
#      Without it those rows are skipped. Build it from its own repository; nothing of
#      it is in this one.
#
#   3b. With h2load (Debian's nghttp2-client) installed: each gRPC server also under h2load,
#      nghttp2's HTTP/2 load generator in C, which costs less per call than rls_load and so
#      saturates the server's core: 4 connections x 16 streams, one descriptor value, the
#      same request body for every call, SECONDS long (rows labelled ".../h2load"; without
#      h2load they are skipped).
#
#   4. With ROWS=grpc-memory: only the gRPC in-process rows (no Redis, no RESP, no
#      Limitador). With FLOODGATE_BIN_B=/path/to/another/floodgate: A/B of two builds of
#      floodgate, the gRPC in-process rows only, ROUNDS rounds (default 3), the two servers
#      alternating (A then B in odd rounds, B then A in even ones), with one load client;
#      each line gives the server CPU per call (under rls_load at 16 and 64 callers and,
#      when installed, under h2load), and a summary the medians and ranges (and h2load's
#      calls/s).
#      FLOODGATE_BIN and RLS_LOAD_BIN take prebuilt binaries instead of building them (keep
#      private copies: a build in the same target directory replaces them).
#
#   scripts/bench-server.sh [REQUESTS] [SECONDS]     (defaults: 300000 10)
#   LIMITADOR_BIN=/tmp/limitador-server scripts/bench-server.sh
#   FLOODGATE_BIN=/tmp/fg-a FLOODGATE_BIN_B=/tmp/fg-b RLS_LOAD_BIN=/tmp/rls_load ROUNDS=5 \
#     scripts/bench-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300000}
SECS=${2:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v redis-benchmark >/dev/null && command -v taskset >/dev/null || {
  echo "needs redis-benchmark and taskset" >&2; exit 1; }
for p in 28179 28180 28181 28182 28183; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
TMP=$(mktemp -d /tmp/fg-bench-server.XXXXXX)
PREFIX="fgbench:$$:"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  redis-cli --scan --pattern "${PREFIX}*" | xargs -r -n 500 redis-cli del >/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# Private copies: other builds sharing the target directory may replace the binaries.
if [ -n "${FLOODGATE_BIN:-}" ]; then
  cp "$FLOODGATE_BIN" "$TMP/floodgate"
else
  cargo build --profile dist -q --bin floodgate
  cp "$CARGO_TARGET_DIR/dist/floodgate" "$TMP/floodgate"
fi
if [ -n "${RLS_LOAD_BIN:-}" ]; then
  cp "$RLS_LOAD_BIN" "$TMP/rls_load"
else
  cargo build --profile dist -q -p floodgate-server --example rls_load
  cp "$CARGO_TARGET_DIR/dist/examples/rls_load" "$TMP/rls_load"
fi

config() { # $1 = store block
  cat > "$TMP/bench.yaml" <<EOF
listen: {grpc: 127.0.0.1:28181, http: 127.0.0.1:28180, resp: 127.0.0.1:28179}
$1
domain: bench
descriptors:
  - key: user
    rate_limit: {rate: 1000000/s}
EOF
}

wait_port() { for _ in $(seq 200); do (echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "no listener on $1" >&2; exit 1; }

cpu_secs() { # utime + stime of pid $1, in seconds
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

start_server() { # $1 = the binary (default: the floodgate built or given)
  taskset -c 0 "${1:-$TMP/floodgate}" server --config "$TMP/bench.yaml" --threads 1 --no-watch \
    >"$TMP/out.log" 2>"$TMP/err.log" &
  SERVER=$!
  PIDS+=("$SERVER")
  wait_port 28181
}

stop_server() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; }

grpc_run() { # $1 = label, $2 = concurrency, $3 = gRPC port (default 28181)
  local before after line
  before=$(cpu_secs "$SERVER")
  line=$(taskset -c 1 "$TMP/rls_load" "http://127.0.0.1:${3:-28181}" bench user "$2" 4 "$N" "$SECS")
  after=$(cpu_secs "$SERVER")
  local cpu calls
  cpu=$(awk -v a="$after" -v b="$before" 'BEGIN{printf "%.2f", a-b}')
  calls=$(sed -n 's/.* calls=\([0-9]*\).*/\1/p' <<<"$line")
  echo "$1 c=$2 $line server_cpu_s=$cpu cpu_us_per_call=$(awk -v c="$cpu" -v n="$calls" 'BEGIN{printf "%.2f", (n > 0 ? c * 1e6 / n : 0)}')" | tee -a "$TMP/results"
}

# One ShouldRateLimit call as h2load sends it: a length-prefixed RateLimitRequest for
# domain "bench", one descriptor {user: u1}, hits_addend 1.
printf '\x00\x00\x00\x00\x17\x0a\x05bench\x12\x0c\x0a\x0a\x0a\x04user\x12\x02u1\x18\x01' >"$TMP/call.bin"
h2load_run() { # $1 = label, $2 = gRPC port (default 28181)
  command -v h2load >/dev/null || { echo "$1 skipped: no h2load (apt-get install nghttp2-client)"; return 0; }
  local before after out cpu calls rate
  before=$(cpu_secs "$SERVER")
  out=$(taskset -c 1 h2load -D "$SECS" -c 4 -m 16 -t 1 -H 'content-type: application/grpc' \
    -H 'te: trailers' -d "$TMP/call.bin" \
    "http://127.0.0.1:${2:-28181}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
  after=$(cpu_secs "$SERVER")
  cpu=$(awk -v a="$after" -v b="$before" 'BEGIN{printf "%.2f", a-b}')
  calls=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' <<<"$out")
  rate=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")
  echo "$1 c=4x16 calls_per_s=${rate%.*} calls=$calls secs=$SECS server_cpu_s=$cpu cpu_us_per_call=$(awk -v c="$cpu" -v n="$calls" 'BEGIN{printf "%.2f", (n > 0 ? c * 1e6 / n : 0)}')" | tee -a "$TMP/results"
}

if [ -n "${FLOODGATE_BIN_B:-}" ]; then
  cp "$FLOODGATE_BIN_B" "$TMP/floodgate-b"
  echo "== machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "== A/B, gRPC ShouldRateLimit, in-process store: A = ${FLOODGATE_BIN:-the build of this tree}, B = $FLOODGATE_BIN_B"
  config "store: {type: memory}"
  for r in $(seq "${ROUNDS:-3}"); do
    if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for ab in $order; do
      if [ "$ab" = a ]; then start_server "$TMP/floodgate"; else start_server "$TMP/floodgate-b"; fi
      taskset -c 1 "$TMP/rls_load" http://127.0.0.1:28181 bench user 16 4 20000 5 >/dev/null
      for c in 16 64; do grpc_run "round=$r $ab" "$c"; done
      h2load_run "round=$r $ab"
      stop_server
    done
    echo "   load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
  echo
  echo "== summary: server CPU per call (us), median [min-max] over ${ROUNDS:-3} rounds; B/A of the medians"
  for c in 16 64 4x16; do
    for ab in a b; do
      grep " $ab c=$c " "$TMP/results" | sed 's/.*cpu_us_per_call=//' | sort -g |
        awk -v l="$ab c=$c" '{v[NR]=$1} END{m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
          printf "%s  %.2f [%.2f-%.2f]\n", l, m, v[1], v[NR]}'
    done
  done | tee "$TMP/medians"
  for c in 16 64 4x16; do
    awk -v c="c=$c" '$2==c {m[$1]=$3} END{printf "c=%s B/A %.3f\n", substr(c,3), m["b"]/m["a"]}' "$TMP/medians"
  done
  if command -v h2load >/dev/null; then
    echo "== h2load calls/s, median [min-max]; B/A of the medians"
    for ab in a b; do
      grep " $ab c=4x16 " "$TMP/results" | sed 's/.*calls_per_s=\([0-9]*\).*/\1/' | sort -g |
        awk -v l="$ab" '{v[NR]=$1} END{m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
          printf "%s %d [%d-%d]\n", l, m, v[1], v[NR]}'
    done | tee "$TMP/rates"
    awk '{m[$1]=$2} END{printf "h2load calls/s B/A %.3f\n", m["b"]/m["a"]}' "$TMP/rates"
  fi
  exit 0
fi

resp_run() { # $1 = label, $2 = port, then the command
  local label=$1 port=$2; shift 2
  local out
  out=$(taskset -c 1 redis-benchmark -p "$port" -c 16 -n "$N" -r 1000 --csv "$@" 2>/dev/null | tail -1)
  echo "$label $out" | tee -a "$TMP/results"
}

echo "== machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== gRPC ShouldRateLimit, in-process store (server on core 0, 1 thread)"
config "store: {type: memory}"
start_server
taskset -c 1 "$TMP/rls_load" http://127.0.0.1:28181 bench user 16 4 20000 5 >/dev/null # warm-up
for c in 16 64; do grpc_run "grpc/memory" "$c"; done
h2load_run "grpc/memory/h2load"
if [ "${ROWS:-}" = grpc-memory ]; then stop_server; echo; echo "== summary"; cat "$TMP/results"; exit 0; fi
echo "== CL.THROTTLE over RESP, in-process store (redis-benchmark -c 16)"
resp_run "resp/memory" 28179 CL.THROTTLE "k:__rand_int__" 1000000 1000000 1 1
stop_server

echo "== gRPC ShouldRateLimit, Redis store (127.0.0.1:6379, unique prefix)"
config "store: {type: redis, redis: {url: \"redis://127.0.0.1:6379\", prefix: \"$PREFIX\"}}"
start_server
taskset -c 1 "$TMP/rls_load" http://127.0.0.1:28181 bench user 16 4 20000 5 >/dev/null
for c in 16 64; do grpc_run "grpc/redis" "$c"; done
h2load_run "grpc/redis/h2load"
echo "== CL.THROTTLE over RESP, Redis store (GCRA script on 6379)"
resp_run "resp/redis" 28179 CL.THROTTLE "k:__rand_int__" 1000000 1000000 1 1
stop_server

if [ -n "${LIMITADOR_BIN:-}" ]; then
  cat > "$TMP/limits.yaml" <<EOF
- namespace: bench
  max_value: 1000000
  seconds: 1
  conditions: []
  variables:
    - descriptors[0]['user']
EOF
  start_limitador() { # $@ = storage
    taskset -c 0 "$LIMITADOR_BIN" --rls-ip 127.0.0.1 --rls-port 28182 --http-ip 127.0.0.1 \
      --http-port 28183 "$TMP/limits.yaml" "$@" >"$TMP/limitador.log" 2>&1 &
    SERVER=$!
    PIDS+=("$SERVER")
    wait_port 28182
  }
  echo "== Limitador $("$LIMITADOR_BIN" --version 2>/dev/null | head -1): gRPC ShouldRateLimit, in memory (core 0)"
  start_limitador memory
  taskset -c 1 "$TMP/rls_load" http://127.0.0.1:28182 bench user 16 4 20000 5 >/dev/null
  for c in 16 64; do grpc_run "limitador/memory" "$c" 28182; done
  h2load_run "limitador/memory/h2load" 28182
  stop_server
  echo "== Limitador: gRPC ShouldRateLimit, Redis store (127.0.0.1:6379/1)"
  start_limitador redis redis://127.0.0.1:6379/1
  taskset -c 1 "$TMP/rls_load" http://127.0.0.1:28182 bench user 16 4 20000 5 >/dev/null
  for c in 16 64; do grpc_run "limitador/redis" "$c" 28182; done
  h2load_run "limitador/redis/h2load" 28182
  stop_server
else
  echo "== Limitador rows skipped (set LIMITADOR_BIN to a limitador-server binary)"
fi

echo "== baseline: the seed's INCR+EXPIRE script on 127.0.0.1:6379 via EVALSHA"
SHA=$(redis-cli SCRIPT LOAD "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c")
resp_run "redis-6379/evalsha-seed" 6379 evalsha "$SHA" 1 "${PREFIX}seed:__rand_int__" 60
echo
echo "== summary"
cat "$TMP/results"
