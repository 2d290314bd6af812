#!/usr/bin/env bash
# Benchmark: requests/s through `floodgate proxy` (in-process store) vs the same backend
# directly vs nginx limit_req, same load tool (wrk), same run, loopback only.
# Needs: nginx and wrk (apt-get install -y nginx wrk). nginx runs in the foreground with
# its own prefix in a temp dir; the system service is never touched.
#
#   scripts/bench-proxy.sh [SECONDS] [CONNECTIONS] [SLICES]      (defaults: 10 64 5)
#
# Each target gets SECONDS of load (wrk -t2 -cCONNECTIONS), cut into SLICES slices run IN
# TURN with the other targets' slices (the order rotating per round), so a slow spell of
# the machine falls on every target alike rather than on whichever ran at the time.
#   requests/s   all the slices' requests over all their time
#   p50, p99     the median over the slices of each slice's percentile (wrk's)
#   cpu us/req   user + system CPU time the proxy spent per request, from /proc/PID/stat
#                (floodgate's process, all threads; nginx's workers)
# Two scenarios: a limit far above the load (every request proxied), and a limit of
# 100/s (nearly every request denied). For the latency a proxy adds, one request at a
# time, see scripts/bench-latency.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/nginx-limit-req.sh
DUR=${1:-10}
CONN=${2:-64}
SLICES=${3:-5}
SLICE=$((DUR / SLICES))
[ "$SLICE" -ge 1 ] || { echo "SECONDS ($DUR) must be at least SLICES ($SLICES): slices are whole seconds" >&2; exit 1; }
BACKEND=127.0.0.1:28000
FG=127.0.0.1:28080
NGX=127.0.0.1:28081
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  echo "needs nginx and wrk: apt-get install -y nginx wrk" >&2; exit 1; }
for p in 28000 28080 28081; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
cargo build --profile dist -q --bin floodgate
cargo build --profile dist -q -p floodgate-proxy --example bench_backend
BIN=$CARGO_TARGET_DIR/dist
TMP=$(mktemp -d /tmp/fg-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

start_targets() { # $1 = rate/s, $2 = burst
  "$BIN/floodgate" proxy --listen $FG --upstream http://$BACKEND --rate "$1/s" --burst "$2" --nodelay --threads 2 2>"$TMP/fg.log" &
  PIDS+=($!); FGPID=$!
  nginx_limit_req_conf "$TMP/nginx" $NGX $BACKEND "$1" "$2" 2
  nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
  PIDS+=($!); NGPID=$!
  wait_port $FG; wait_port $NGX
  sleep 0.5
}
stop_targets() { kill $FGPID $NGPID 2>/dev/null || true; wait $FGPID $NGPID 2>/dev/null || true; }

# user and system CPU ticks of processes (all their threads), summed: "utime stime"
ticks() { for p in "$@"; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{u+=$1; s+=$2} END {print u+0, s+0}'; }

# a wrk latency (e.g. 812.00us, 1.20ms, 2.00s) in microseconds
to_us() { awk '{v=$1; if (v ~ /us$/) m=1; else if (v ~ /ms$/) m=1000; else if (v ~ /s$/) m=1000000; else m=1; sub(/[a-z]+$/, "", v); print v*m}'; }

slice() { # key url [pids to charge CPU to]: one slice, appended to $TMP/key
  local key=$1 url=$2
  shift 2
  local out u0 s0 u1 s1
  read -r u0 s0 < <(ticks "$@")
  out=$(wrk -t2 -c"$CONN" -d"${SLICE}s" --latency "$url")
  read -r u1 s1 < <(ticks "$@")
  local n secs p50 p99 non
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  secs=$(awk '/requests in/ {sub(/s,$/, "", $4); print $4}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out" | to_us)
  p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_us)
  non=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "$n $secs $p50 $p99 ${non:-0} $((u1 - u0)) $((s1 - s0)) $#" >>"$TMP/$key"
}

report() { # label key
  python3 - "$1" "$TMP/$2" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
label, path, hz = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(path)]
n, secs = sum(r[0] for r in rows), sum(r[1] for r in rows)
u, s = sum(r[5] for r in rows), sum(r[6] for r in rows)
cpu = f"{u / hz / n * 1e6:.2f}+{s / hz / n * 1e6:.2f}" if rows[0][7] else "-"
p50 = statistics.median(r[2] for r in rows)
p99 = statistics.median(r[3] for r in rows)
print(f"{label:<30} {n / secs:12.0f} {p50:10.0f} {p99:10.0f} {sum(r[4] for r in rows):10.0f} {cpu:>12}")
PY
}

"$BIN/examples/bench_backend" $BACKEND 1 2>/dev/null & PIDS+=($!)
wait_port $BACKEND
echo "machine: $(nproc) cores, $(uname -r); nginx $(nginx -v 2>&1 | cut -d/ -f2); wrk, $SLICES slices of $SLICE s per target, c=$CONN"
printf "%-30s %12s %10s %10s %10s %12s\n" "target" "requests/s" "p50 us" "p99 us" "non-2xx" "cpu us/req"

# 1) limit far above the load: every request proxied
start_targets 100000000 100000000
for r in $(seq 0 $((SLICES - 1))); do
  case $((r % 3)) in
    0) order="direct fg ngx" ;; 1) order="fg ngx direct" ;; *) order="ngx direct fg" ;;
  esac
  for t in $order; do
    case $t in
      direct) slice direct "http://$BACKEND/" ;;
      fg) slice fg "http://$FG/" $FGPID ;;
      ngx) slice ngx "http://$NGX/" $(pgrep -P $NGPID) ;;
    esac
  done
done
stop_targets
report "direct (backend)" direct
report "floodgate proxy" fg
report "nginx limit_req" ngx

# 2) limit 100/s: nearly every request is denied by the limiter
start_targets 100 10
for r in $(seq 0 $((SLICES - 1))); do
  if [ $((r % 2)) = 0 ]; then order="fg ngx"; else order="ngx fg"; fi
  for t in $order; do
    case $t in
      fg) slice fg-denied "http://$FG/" $FGPID ;;
      ngx) slice ngx-denied "http://$NGX/" $(pgrep -P $NGPID) ;;
    esac
  done
done
stop_targets
report "floodgate, mostly denied" fg-denied
report "nginx, mostly denied" ngx-denied
python3 - "$TMP" <<'PY'
import sys
d = sys.argv[1]
rps = lambda k: (lambda rows: sum(r[0] for r in rows) / sum(r[1] for r in rows))(
    [tuple(map(float, l.split()[:2])) for l in open(f"{d}/{k}")])
print("floodgate / nginx: %.0f%% of the requests/s proxying, %.0f%% denying"
      % (100 * rps("fg") / rps("ngx"), 100 * rps("fg-denied") / rps("ngx-denied")))
PY
