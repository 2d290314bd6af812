#!/usr/bin/env bash
# Benchmark: requests/s through `floodgate proxy` (in-process store) against nginx
# `limit_req` and HAProxy's stick-table limit (`http-request track-sc0 src` /
# `sc_http_req_rate`), each balancing round-robin over the same two backend servers, same
# load tool (wrk), same run, loopback only.
# Needs: nginx, haproxy, wrk and openssl (apt-get install -y nginx haproxy wrk openssl).
# nginx and HAProxy run in the foreground with their own files in a temp dir; no system
# service is touched.
#
#   scripts/bench-proxy.sh [SECONDS] [CONNECTIONS] [SLICES]      (defaults: 10 64 5)
#
# Each target gets SECONDS of load per scenario (wrk -t2 -cCONNECTIONS), cut into SLICES
# slices run IN TURN with the other targets' slices (the order rotating per round), so a
# slow spell of the machine falls on every target alike rather than on whichever ran at
# the time.
#   requests/s   all the slices' requests over all their time
#   p50, p99     the median over the slices of each slice's percentile (wrk's)
#   cpu us/req   user + system CPU time the proxy spent per request, from /proc/PID/stat
#                (floodgate's process, all threads; nginx's workers; HAProxy's process)
# Three scenarios, each proxy with two worker threads or processes:
#   proxied      a limit far above the load: every request forwarded
#   denied       a limit of 100/s per client: nearly every request answered 429
#   proxied-tls  as proxied, the client side over TLS 1.3 (one self-signed ECDSA P-256
#                certificate for all three; wrk keeps its connections, so this is the
#                record layer's cost more than the handshake's)
# The last line prints floodgate's requests/s over each peer's, per scenario.
# For the latency a proxy adds, one request at a time, see scripts/bench-latency.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/nginx-limit-req.sh
source scripts/lib/proxy-pair-conf.sh
DUR=${1:-10}
CONN=${2:-64}
SLICES=${3:-5}
SLICE=$((DUR / SLICES))
[ "$SLICE" -ge 1 ] || { echo "SECONDS ($DUR) must be at least SLICES ($SLICES): slices are whole seconds" >&2; exit 1; }
BACKEND1=127.0.0.1:28000
BACKEND2=127.0.0.1:28001
FG=127.0.0.1:28080
NGX=127.0.0.1:28081
HAP=127.0.0.1:28082
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
for tool in nginx haproxy wrk openssl; do
  command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install -y nginx haproxy wrk openssl" >&2; exit 1; }
done
for p in 28000 28001 28080 28081 28082; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
# PROFILE=release for a quick check of the script itself; figures are taken with dist
PROFILE=${PROFILE:-dist}
cargo build --profile "$PROFILE" -q --bin floodgate
cargo build --profile "$PROFILE" -q -p floodgate-proxy --example bench_backend
BIN=$CARGO_TARGET_DIR/$PROFILE
TMP=$(mktemp -d /tmp/fg-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# one certificate and key for every proxy's TLS listener (HAProxy wants them in one file)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
cat "$TMP/cert.pem" "$TMP/key.pem" >"$TMP/haproxy.pem"

fg_conf() { # $1 = rate/s, $2 = burst, $3 = tls|plain
  floodgate_pair_conf "$TMP/floodgate.toml" "$FG" "$BACKEND1" "$BACKEND2" "$1" "$2"
  if [ "$3" = tls ]; then
    printf '\n[tls]\ncert_file = "%s"\nkey_file = "%s"\nmin_version = "1.3"\n' \
      "$TMP/cert.pem" "$TMP/key.pem" >>"$TMP/floodgate.toml"
  fi
}

hap_conf() { # $1 = rate/s, $2 = burst, $3 = tls|plain
  local bind=$HAP
  [ "$3" = tls ] && bind="$HAP ssl crt $TMP/haproxy.pem ssl-min-ver TLSv1.3"
  haproxy_pair_conf "$TMP/haproxy.cfg" "$bind" "$BACKEND1" "$BACKEND2" "$1" "$2" 2
}

ngx_conf() { # $1 = rate/s, $2 = burst, $3 = tls|plain
  nginx_limit_req_conf "$TMP/nginx" "$NGX" "$BACKEND1" "$1" "$2" 2
  # the second backend server, and TLS on the listener
  sed -i "s|server $BACKEND1;|server $BACKEND1; server $BACKEND2;|" "$TMP/nginx/nginx.conf"
  if [ "$3" = tls ]; then
    sed -i "s|listen $NGX;|listen $NGX ssl; ssl_certificate $TMP/cert.pem; ssl_certificate_key $TMP/key.pem; ssl_protocols TLSv1.3;|" \
      "$TMP/nginx/nginx.conf"
  fi
}

start_targets() { # $1 = rate/s, $2 = burst, $3 = tls|plain
  fg_conf "$@"; hap_conf "$@"; ngx_conf "$@"
  "$BIN/floodgate" proxy --config "$TMP/floodgate.toml" --threads 2 2>"$TMP/fg.log" &
  PIDS+=($!); FGPID=$!
  nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
  PIDS+=($!); NGPID=$!
  haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
  PIDS+=($!); HAPID=$!
  wait_port $FG; wait_port $NGX; wait_port $HAP
  sleep 0.5
}
stop_targets() {
  kill $FGPID $NGPID $HAPID 2>/dev/null || true
  wait $FGPID $NGPID $HAPID 2>/dev/null || true
}

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
print(f"{label:<34} {n / secs:12.0f} {p50:10.0f} {p99:10.0f} {sum(r[4] for r in rows):10.0f} {cpu:>12}")
PY
}

# one scenario: every target's slices in rotating turn; $1 = scenario name, $2 = scheme,
# $3.. = extra targets ("direct": the first backend server alone)
scenario() {
  local name=$1 scheme=$2
  shift 2
  local targets=(fg ngx hap "$@")
  local k=${#targets[@]}
  for r in $(seq 0 $((SLICES - 1))); do
    for i in $(seq 0 $((k - 1))); do
      local t=${targets[$(((i + r) % k))]}
      case $t in
        direct) slice direct "http://$BACKEND1/" ;;
        fg) slice "fg-$name" "$scheme://$FG/" $FGPID ;;
        ngx) slice "ngx-$name" "$scheme://$NGX/" $(pgrep -P $NGPID) ;;
        hap) slice "hap-$name" "$scheme://$HAP/" $HAPID ;;
      esac
    done
  done
}

"$BIN/examples/bench_backend" $BACKEND1 1 2>/dev/null & PIDS+=($!)
"$BIN/examples/bench_backend" $BACKEND2 1 2>/dev/null & PIDS+=($!)
wait_port $BACKEND1; wait_port $BACKEND2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GB, kernel $(uname -r)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "nginx $(nginx -v 2>&1 | cut -d/ -f2), $(haproxy -v | head -1 | cut -d' ' -f1-3); wrk, $SLICES slices of $SLICE s per target, c=$CONN"
printf "%-34s %12s %10s %10s %10s %12s\n" "target" "requests/s" "p50 us" "p99 us" "non-2xx" "cpu us/req"

start_targets 100000000 100000000 plain
scenario proxied http direct
stop_targets
report "backend server alone" direct
report "floodgate proxy" fg-proxied
report "nginx limit_req" ngx-proxied
report "HAProxy stick table" hap-proxied

start_targets 100 10 plain
scenario denied http
stop_targets
report "floodgate, mostly denied" fg-denied
report "nginx, mostly denied" ngx-denied
report "HAProxy, mostly denied" hap-denied

start_targets 100000000 100000000 tls
scenario proxied-tls https
stop_targets
report "floodgate over TLS 1.3" fg-proxied-tls
report "nginx over TLS 1.3" ngx-proxied-tls
report "HAProxy over TLS 1.3" hap-proxied-tls

python3 - "$TMP" <<'PY'
import sys
d = sys.argv[1]
def rps(k):
    rows = [tuple(map(float, l.split()[:2])) for l in open(f"{d}/{k}")]
    return sum(r[0] for r in rows) / sum(r[1] for r in rows)
for s in ("proxied", "denied", "proxied-tls"):
    fg = rps(f"fg-{s}")
    print(f"floodgate / nginx, {s}: {fg / rps(f'ngx-{s}'):.2f}x;  floodgate / HAProxy, {s}: {fg / rps(f'hap-{s}'):.2f}x")
PY
