#!/usr/bin/env bash
# Benchmark: requests/s and latency through `floodgate proxy` (in-process store) vs the
# same backend directly vs nginx limit_req, same load tool (wrk), same run, loopback only.
# Needs: nginx and wrk (apt-get install -y nginx wrk). nginx runs in the foreground with
# its own prefix in a temp dir; the system service is never touched.
#
#   scripts/bench-proxy.sh [DURATION_S] [CONNECTIONS]      (defaults: 10 64)
#
# Runs per target: throughput (wrk -t2 -cCONNECTIONS), unloaded latency (wrk -t1 -c1: one
# request at a time, so the difference to "direct" is the latency the proxy adds), and a
# "mostly denied" throughput run (limit 100/s: nearly every request is rejected).
# "cpu us/req" (throughput runs): user + system CPU time the proxy spent per request, from
# /proc/PID/stat over the run (floodgate's process, all threads; nginx's workers).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
CONN=${2:-64}
BACKEND=127.0.0.1:28000
FG=127.0.0.1:28080
NGX=127.0.0.1:28081
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  echo "needs nginx and wrk: apt-get install -y nginx wrk" >&2; exit 1; }
for p in 28000 28080 28081; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
cargo build --release -q --bin floodgate
cargo build --release -q -p floodgate-http --example bench_backend
BIN=$CARGO_TARGET_DIR/release
TMP=$(mktemp -d /tmp/fg-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 200); do (echo >/dev/tcp/${1%:*}/${1#*:}) 2>/dev/null && return 0; sleep 0.05; done; echo "no listener on $1" >&2; exit 1; }

nginx_conf() { # $1 = rate (r/s), $2 = burst
  mkdir -p "$TMP/nginx/logs"
  cat > "$TMP/nginx/nginx.conf" <<NGX
worker_processes 2;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body; proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fcgi; uwsgi_temp_path $TMP/nginx/uwsgi; scgi_temp_path $TMP/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=${1}r/s;
  limit_req_status 429;
  upstream backend { server $BACKEND; keepalive 128; }
  server {
    listen $NGX;
    location / {
      limit_req zone=perip burst=$2 nodelay;
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGX
}

start_targets() { # $1 = rate/s, $2 = burst
  "$BIN/floodgate" proxy --listen $FG --upstream http://$BACKEND --rate "$1/s" --burst "$2" --nodelay --threads 2 2>"$TMP/fg.log" &
  PIDS+=($!); FGPID=$!
  nginx_conf "$1" "$2"
  nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
  PIDS+=($!); NGPID=$!
  wait_port $FG; wait_port $NGX
}
stop_targets() { kill $FGPID $NGPID 2>/dev/null || true; wait $FGPID $NGPID 2>/dev/null || true; }

# user and system CPU ticks of processes (all their threads), summed: "utime stime"
ticks() { for p in "$@"; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{u+=$1; s+=$2} END {print u+0, s+0}'; }

run() { # label url threads conns [pids to charge CPU to] -> "label rps p50 p99 non2xx cpu"
  local label=$1 url=$2 threads=$3 conns=$4
  shift 4
  local out u0 s0 u1 s1 cpu="-"
  read -r u0 s0 < <(ticks "$@")
  out=$(wrk -t"$threads" -c"$conns" -d"${DUR}s" --latency "$url")
  read -r u1 s1 < <(ticks "$@")
  local rps p50 p99 non n
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non=$(awk '/Non-2xx/ {print $5}' <<<"$out"); non=${non:-0}
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  if [ $# -gt 0 ] && [ "${n:-0}" -gt 0 ]; then
    # CPU time the target spent per request, user + system, in microseconds
    cpu=$(awk -v du=$((u1 - u0)) -v ds=$((s1 - s0)) -v n="$n" -v hz="$(getconf CLK_TCK)" \
      'BEGIN {printf "%.2f+%.2f", du / hz / n * 1e6, ds / hz / n * 1e6}')
  fi
  printf "%-30s %12s %10s %10s %10s %12s\n" "$label" "$rps" "$p50" "$p99" "$non" "$cpu"
}

"$BIN/examples/bench_backend" $BACKEND 1 2>/dev/null & PIDS+=($!)
wait_port $BACKEND
echo "machine: $(nproc) cores, $(uname -r); nginx $(nginx -v 2>&1 | cut -d/ -f2); wrk $DUR s per run"
printf "%-30s %12s %10s %10s %10s %12s\n" "target" "requests/s" "p50" "p99" "non-2xx" "cpu us/req"

# 1) limit far above the load: measures throughput and added latency
start_targets 100000000 100000000
sleep 0.5
run "direct (backend)   c=$CONN" "http://$BACKEND/" 2 "$CONN"
run "floodgate proxy    c=$CONN" "http://$FG/" 2 "$CONN" $FGPID
run "nginx limit_req    c=$CONN" "http://$NGX/" 2 "$CONN" $(pgrep -P $NGPID)
run "direct (backend)   c=1" "http://$BACKEND/" 1 1
run "floodgate proxy    c=1" "http://$FG/" 1 1
run "nginx limit_req    c=1" "http://$NGX/" 1 1
stop_targets

# 2) limit 100/s: nearly every request is denied by the limiter
start_targets 100 10
sleep 0.5
run "floodgate, mostly denied c=$CONN" "http://$FG/" 2 "$CONN" $FGPID
run "nginx, mostly denied c=$CONN" "http://$NGX/" 2 "$CONN" $(pgrep -P $NGPID)
stop_targets
