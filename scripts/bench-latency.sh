#!/usr/bin/env bash
# Added latency of `floodgate proxy` and of nginx limit_req over the backend alone, one
# request at a time, the three targets probed IN TURN (shuffled per round) within one run,
# so the machine's scheduling hiccups fall on all three alike. Loopback only; bounded by
# ROUNDS (at most ROUNDS x 1.1 x 3 requests).
#
#   scripts/bench-latency.sh [ROUNDS] [INTERVAL_US] [CPUS]   (defaults: 50000 500 LAST)
#
# Each proxy runs one worker. CPUS is a taskset CPU list for every process of the run
# (backend, both proxies, the probe); the default, the machine's last CPU, runs them all
# on one core: no cross-core wake-ups and no idle vCPU to wake (the probe spins between
# rounds), the least noisy setting on a virtual machine. "all" leaves placement to the
# scheduler. Needs nginx (apt-get install -y nginx).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-50000}
INTERVAL=${2:-500}
CPUS=${3:-$(($(nproc) - 1))}
BACKEND=127.0.0.1:28200
FG=127.0.0.1:28280
NGX=127.0.0.1:28281
source scripts/lib/nginx-limit-req.sh
command -v nginx >/dev/null || { echo "needs nginx: apt-get install -y nginx" >&2; exit 1; }
for p in 28200 28280 28281; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --profile dist -q --bin floodgate
cargo build --profile dist -q -p floodgate-proxy --example bench_backend
cargo build --profile dist -q -p floodgate-load --example latency_probe
BIN=$CARGO_TARGET_DIR/dist
PIN=()
[ "$CPUS" != all ] && PIN=(taskset -c "$CPUS")
TMP=$(mktemp -d /tmp/fg-latency.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

"${PIN[@]}" "$BIN/examples/bench_backend" $BACKEND 1 2>/dev/null &
PIDS+=($!)
# a limit far above the load: every request is proxied
"${PIN[@]}" "$BIN/floodgate" proxy --listen $FG --upstream http://$BACKEND \
  --rate 100000000/s --burst 100000000 --nodelay --threads 1 2>"$TMP/fg.log" &
PIDS+=($!)
nginx_limit_req_conf "$TMP/nginx" $NGX $BACKEND 100000000 100000000 1
"${PIN[@]}" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)
wait_port $BACKEND; wait_port $FG; wait_port $NGX
echo "machine: $(nproc) cores, $(uname -r); nginx $(nginx -v 2>&1 | cut -d/ -f2); cpus: $CPUS; one worker each"
"${PIN[@]}" "$BIN/examples/latency_probe" "$ROUNDS" "$INTERVAL" \
  "backend=$BACKEND" "floodgate=$FG" "nginx=$NGX"
