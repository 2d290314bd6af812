#!/usr/bin/env bash
# User-space instructions per proxied request, floodgate proxy vs nginx limit_req, counted
# by valgrind's callgrind: repeatable whatever else the machine is doing, unlike
# requests/s. Both run one worker (floodgate --threads 1; nginx worker_processes 1,
# master_process off) in front of the same backend, same limit settings as
# scripts/bench-proxy.sh. Loopback only; bounded by -n.
#
#   scripts/proxy-instructions.sh [REQUESTS] [SHAPE]
#       REQUESTS  default 3000
#       SHAPE     single (default): one upstream server, `--upstream` and `--rate` flags;
#                 pair: two upstream servers balanced round robin, the policy, route and
#                 group from a config file, as scripts/bench-proxy.sh runs them (nginx
#                 with both servers in its upstream block)
#   (needs valgrind, and nginx for the comparison: apt-get install -y nginx)
#
# BASE_FLOODGATE=path/to/floodgate (another build, e.g. an earlier commit's
# target/dist/floodgate) is measured too, in the same run, beside this checkout's.
#
# Two scenarios: every request proxied (limit far above the load), and nearly every
# request denied (1 r/s, burst 1). Per target: warm up with 200 requests, zero the counters, send REQUESTS with
# `floodgate load --closed-loop -c 4`, dump, print instructions per request.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/nginx-limit-req.sh
source scripts/lib/proxy-pair-conf.sh
N=${1:-3000}
SHAPE=${2:-single}
case $SHAPE in single | pair) ;; *) echo "SHAPE must be single or pair, not $SHAPE" >&2; exit 1 ;; esac
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
for p in 28100 28101 28180 28181 28182; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --profile dist -q --bin floodgate
cargo build --profile dist -q -p floodgate-proxy --example bench_backend
BIN=$CARGO_TARGET_DIR/dist
TMP=$(mktemp -d /tmp/fg-instr.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
"$BIN/examples/bench_backend" 127.0.0.1:28100 >/dev/null 2>&1 &
PIDS+=($!)
if [ "$SHAPE" = pair ]; then
  "$BIN/examples/bench_backend" 127.0.0.1:28101 >/dev/null 2>&1 &
  PIDS+=($!)
fi

# floodgate's command line for one scenario: BINARY PORT RATE BURST
floodgate_cmd() {
  local bin=$1 port=$2 rate=$3 burst=$4
  if [ "$SHAPE" = single ]; then
    echo "$bin" proxy --listen "127.0.0.1:$port" --upstream http://127.0.0.1:28100 \
      --rate "$rate/s" --burst "$burst" --nodelay --threads 1
    return
  fi
  floodgate_pair_conf "$TMP/floodgate-$port.toml" "127.0.0.1:$port" 127.0.0.1:28100 127.0.0.1:28101 "$rate" "$burst"
  echo "$bin" proxy --config "$TMP/floodgate-$port.toml" --threads 1
}

measure() { # label port command...
  local label=$1 port=$2
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$TMP/$label.out" "$@" 2>"$TMP/$label.log" &
  local vg=$!
  PIDS+=($vg)
  for _ in $(seq 600); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  "$BIN/floodgate" load "http://127.0.0.1:$port/" -n 200 -c 4 --closed-loop >/dev/null
  callgrind_control -z "$vg" >/dev/null 2>&1
  "$BIN/floodgate" load "http://127.0.0.1:$port/" -n "$N" -c 4 --closed-loop --json >"$TMP/$label.json"
  callgrind_control -d "$vg" >/dev/null 2>&1
  sleep 1
  kill "$vg" 2>/dev/null || true
  wait "$vg" 2>/dev/null || true
  local ok ir
  ok=$(python3 -c "import json; print(json.load(open('$TMP/$label.json'))['statuses'].get('200', 0))")
  ir=$(awk '/^totals:/ {print $2}' "$TMP/$label.out.1")
  printf '%-28s %6s requests, %5s x 200   %7d instructions/request\n' "$label" "$N" "$ok" $((ir / N))
  echo $((ir / N)) >"$TMP/$label.per"
}


# $1 = label suffix, $2 = rate (r/s), $3 = burst
scenario() {
  # shellcheck disable=SC2046 # the command's words, no path has a space
  measure "floodgate proxy$1" 28180 $(floodgate_cmd "$BIN/floodgate" 28180 "$2" "$3")
  if [ -n "${BASE_FLOODGATE:-}" ]; then
    # shellcheck disable=SC2046
    measure "floodgate base$1" 28182 $(floodgate_cmd "$BASE_FLOODGATE" 28182 "$2" "$3")
  fi
  if command -v nginx >/dev/null; then
    nginx_limit_req_conf "$TMP/nginx" 127.0.0.1:28181 127.0.0.1:28100 "$2" "$3" 1
    if [ "$SHAPE" = pair ]; then
      sed -i "s|server 127.0.0.1:28100;|server 127.0.0.1:28100; server 127.0.0.1:28101;|" "$TMP/nginx/nginx.conf"
    fi
    measure "nginx limit_req$1" 28181 nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf"
    python3 -c "print('floodgate / nginx$1: %.2fx the instructions' % ($(cat "$TMP/floodgate proxy$1.per") / $(cat "$TMP/nginx limit_req$1.per")))"
    if [ -n "${BASE_FLOODGATE:-}" ]; then
      python3 -c "print('floodgate base / nginx$1: %.2fx the instructions' % ($(cat "$TMP/floodgate base$1.per") / $(cat "$TMP/nginx limit_req$1.per")))"
    fi
  else
    echo "nginx not installed: no comparison (apt-get install -y nginx)"
  fi
}

scenario "" 100000000 100000000   # every request proxied
scenario ", denied" 1 1            # nearly every request denied (429)
