#!/usr/bin/env bash
# Benchmark: goodput and latency under overload. A backend whose latency follows a
# queue (`floodgate demo backend`: WORKERS workers, exponential service of SERVICE_MS
# mean, so a capacity of WORKERS / SERVICE_MS), `floodgate proxy` in front of it with
# each configuration, and `floodgate load` driving the proxy open loop with Poisson
# arrivals at 0.5x, 1x, 2x and 5x the capacity, in three classes sent as x-priority
# (critical 10 %, default 50 %, sheddable 40 %: at 5x critical alone offers half the
# capacity, so the protected class stays within what the backend completes at the
# highest load; with a larger critical share, say 20 %, critical at 5x would offer more
# than the capacity and no limiter could let 99 % of it succeed). Per row: goodput
# (successful responses/s), p50/p99 latency of the successes, the success rate overall
# and per class, and which targets the row meets. Goodput counts every success among
# the requests sent during the DUR of sending, those still in flight when sending
# stops included (each finishes or fails within its TIMEOUT from its intended send
# time), divided by DUR. Loopback only; every run is bounded by -z plus -t.
# Not part of the test suite (tests/bench_overload.rs runs it for a fraction of a
# second to check that it works).
#
#   bash scripts/bench-overload.sh                       # dist build, 10 s rounds
#   DUR=3s PROFILE=release bash scripts/bench-overload.sh
#   CONFIGS="none max_in_flight" LOADS="1 5" FLOODGATE=target/release/floodgate bash scripts/bench-overload.sh
#
# Configurations (CONFIGS): none (the proxy with no route, so nothing limited), max_in_flight (one global
# max_in_flight = MIF, tuned by hand for 1x), and gradient2, vegas, aimd (an adaptive
# concurrency policy with the classes critical, default, sheddable matched by x-priority,
# guaranteed shares 0.5, 0.3 and 0.2 of the limit, MIN_LIMIT..MAX_LIMIT, a queue of
# QUEUE places waited on at most QUEUE_TIMEOUT, where a higher class takes a lower one's
# place when it is full; the other keys at their defaults: one configuration for every
# load, nothing tuned per load level).
# The adaptive rows run only when `floodgate proxy --check-config` accepts their
# configuration; otherwise they are skipped with a note.
#
# Targets per row: 0.5x, nothing shed (every request succeeds); 1x, goodput >= 95 % of the
# capacity; 5x, goodput >= 90 % of the capacity, p99 of the successes within 2x the
# unloaded p99 (measured first, at 0.1x through the proxy with no policy), critical
# >= 99 % successful.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-8}
SERVICE_MS=${SERVICE_MS:-20}
DUR=${DUR:-10s}
LOADS=${LOADS:-0.5 1 2 5}
CONFIGS=${CONFIGS:-none max_in_flight gradient2 vegas aimd}
MIF=${MIF:-10}
MIN_LIMIT=${MIN_LIMIT:-4}
MAX_LIMIT=${MAX_LIMIT:-200}
QUEUE=${QUEUE:-64}
QUEUE_TIMEOUT=${QUEUE_TIMEOUT:-200ms}
TIMEOUT=${TIMEOUT:-2s}
CONN_S=${CONN_S:-0.25}
CMAX=${CMAX:-4000}
MIX=${MIX:-critical=0.1,default=0.5,sheddable=0.4}
SEED=${SEED:-1}
PROFILE=${PROFILE:-dist}
OUT=${OUT:-target/bench-overload}
mkdir -p "$OUT"

if [ -z "${FLOODGATE:-}" ]; then
    cargo build --profile "$PROFILE" --bin floodgate
    dir=$PROFILE
    [ "$PROFILE" = dev ] && dir=debug
    FLOODGATE=target/$dir/floodgate
fi
[ -x "$FLOODGATE" ] || { echo "bench-overload: no floodgate binary at $FLOODGATE" >&2; exit 2; }

CAPACITY=$(awk -v w="$WORKERS" -v s="$SERVICE_MS" 'BEGIN {printf "%.0f", w * 1000 / s}')

# Two free loopback ports (bound and released at once, so distinct).
read -r BACKEND_PORT PROXY_PORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap cleanup EXIT

# Wait until PORT accepts connections (at most 10 s) while process PID lives.
wait_port() {
    local port=$1 pid=$2
    for _ in $(seq 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        kill -0 "$pid" 2>/dev/null || { echo "bench-overload: process $pid exited before listening on $port" >&2; return 1; }
        sleep 0.05
    done
    echo "bench-overload: nothing listening on $port after 10 s" >&2
    return 1
}

# The proxy's configuration for CONFIG, on stdout.
config() {
    cat <<EOF
listen = "127.0.0.1:$PROXY_PORT"
upstream = "http://127.0.0.1:$BACKEND_PORT"
upstream_timeout = "60s"
max_connections = 20000
max_connections_per_client = 20000
EOF
    case "$1" in
        none)
            # a policy is required; with no route naming it, nothing is limited
            cat <<EOF

[[policy]]
name = "unused"
rate = "1000000/s"
key = "global"
EOF
            ;;
        max_in_flight)
            cat <<EOF

[[policy]]
name = "in-flight"
max_in_flight = $MIF
key = "global"

[[route]]
prefix = "/"
policies = ["in-flight"]
EOF
            ;;
        gradient2 | vegas | aimd)
            cat <<EOF

[[policy]]
name = "adaptive"
adaptive = "$1"
min_limit = $MIN_LIMIT
max_limit = $MAX_LIMIT
queue = $QUEUE
queue_timeout = "$QUEUE_TIMEOUT"

[[policy.class]]
name = "critical"
share = 0.5
match = { header = "x-priority", value = "critical" }

[[policy.class]]
name = "default"
share = 0.3
match = { header = "x-priority", value = "default" }

[[policy.class]]
name = "sheddable"
share = 0.2

[[route]]
prefix = "/"
policies = ["adaptive"]
EOF
            ;;
        *) echo "bench-overload: unknown configuration $1" >&2; return 2 ;;
    esac
}

# One run: CONFIG at RATE req/s; writes $OUT/CONFIG.LOAD.json.
run() {
    local cfg=$1 load=$2 rate=$3 name="$OUT/$1.$2" c
    config "$cfg" >"$name.toml"
    "$FLOODGATE" demo backend --listen "127.0.0.1:$BACKEND_PORT" --workers "$WORKERS" \
        --service "exp:${SERVICE_MS}ms" --time-limit 60s --seed "$SEED" 2>"$name.backend.log" &
    PIDS+=($!)
    wait_port "$BACKEND_PORT" "$!"
    "$FLOODGATE" proxy --config "$name.toml" 2>"$name.proxy.log" &
    PIDS+=($!)
    wait_port "$PROXY_PORT" "$!"
    # connections for CONN_S seconds of arrivals, up to CMAX: each connection opens on its
    # first request, and opening thousands at once makes the generator itself late
    # (requests that wait for a free connection carry the wait in their latency)
    c=$(awk -v q="$rate" -v t="$CONN_S" -v m="$CMAX" 'BEGIN {c = int(q * t) + 16; print (c > m ? m : c)}')
    "$FLOODGATE" load "http://127.0.0.1:$PROXY_PORT/" -z "$DUR" -q "$rate" -c "$c" -t "$TIMEOUT" \
        --arrivals poisson --seed "$SEED" --timeout-from-intended \
        --class-header x-priority --class-mix "$MIX" \
        --no-progress --json >"$name.json" 2>"$name.load.log"
    cleanup
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo) memory, $FLOODGATE"
echo "== backend: $WORKERS workers, exponential service of $SERVICE_MS ms mean: capacity $CAPACITY req/s; Poisson arrivals, classes $MIX, -z $DUR -t $TIMEOUT"
echo "== adaptive: limit $MIN_LIMIT..$MAX_LIMIT, queue $QUEUE, queue_timeout $QUEUE_TIMEOUT"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# The unloaded p99: 0.1x through the proxy with no policy.
run none unloaded "$(awk -v c="$CAPACITY" 'BEGIN {printf "%g", c / 10}')"
UNLOADED_P99=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["goodput"]["success_latency"]["p99_ms"])' "$OUT/none.unloaded.json")
echo "== unloaded p99 (0.1x, no policy): $UNLOADED_P99 ms"

rows=()
for cfg in $CONFIGS; do
    case "$cfg" in
        gradient2 | vegas | aimd)
            config "$cfg" >"$OUT/$cfg.check.toml"
            if ! "$FLOODGATE" proxy --config "$OUT/$cfg.check.toml" --check-config >"$OUT/$cfg.check.log" 2>&1; then
                echo "== $cfg: skipped, this floodgate refuses the adaptive configuration: $(tail -1 "$OUT/$cfg.check.log")"
                continue
            fi
            ;;
    esac
    for load in $LOADS; do
        rate=$(awk -v c="$CAPACITY" -v l="$load" 'BEGIN {printf "%g", c * l}')
        run "$cfg" "$load" "$rate"
        rows+=("$cfg $load $OUT/$cfg.$load.json")
        echo "ran $cfg at ${load}x ($rate req/s)  (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

python3 - "$CAPACITY" "$UNLOADED_P99" "${rows[@]}" <<'PY'
import json, sys
capacity, unloaded = float(sys.argv[1]), float(sys.argv[2])
# goodput: every success among the requests sent in the window (the requests in flight
# when sending stops finish within the client timeout), over the window's length
classes = None
lines = []
for row in sys.argv[3:]:
    cfg, load, path = row.split(" ", 2)
    r = json.load(open(path))
    g = r["goodput"]
    by = {c["name"]: c for c in g["classes"]}
    if classes is None:
        classes = [c["name"] for c in g["classes"]]
    load_f = float(load)
    goodput = g["succeeded"] / g["window_s"] if g["window_s"] > 0 else 0.0
    share = goodput / capacity
    p99 = g["success_latency"]["p99_ms"]
    targets = []
    if load_f <= 0.5:
        targets.append(("nothing shed", g["success_rate"] >= 1.0))
    elif load_f == 1:
        targets.append(("goodput >= 95%", share >= 0.95))
    elif load_f >= 5:
        targets.append(("goodput >= 90%", share >= 0.90))
        targets.append(("p99 <= 2x unloaded", g["succeeded"] > 0 and p99 <= 2 * unloaded))
        if "critical" in by:
            targets.append(("critical >= 99%", by["critical"]["success_rate"] >= 0.99))
    verdict = "-" if not targets else "; ".join(
        ("met: " if ok else "MISSED: ") + name for name, ok in targets)
    timeouts = r["errors"]["timeout"]
    lag = (r.get("send_lag") or {}).get("p99_ms", 0.0)
    lines.append([cfg, f"{load}x", f'{r["rate"]:.0f}', f"{goodput:.0f}",
                  f"{share * 100:.0f}%", f'{g["success_latency"]["p50_ms"]:.1f}',
                  f"{p99:.1f}", f'{g["success_rate"] * 100:.1f}%']
                 + [f'{by[c]["success_rate"] * 100:.1f}%' for c in (classes or [])]
                 + [str(timeouts), f"{lag:.1f}", verdict])
head = ["config", "load", "offered req/s", "goodput req/s", "of capacity", "p50 ms",
        "p99 ms", "success"] + [f"{c} success" for c in (classes or [])] + ["timeouts", "send lag p99 ms", "targets"]
print("| " + " | ".join(head) + " |")
print("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 3) + ["---"]) + "|")
for l in lines:
    print("| " + " | ".join(l) + " |")
print(f"\ncapacity {capacity:.0f} req/s; unloaded p99 {unloaded:.1f} ms (0.1x, no policy); "
      "goodput: the successes among the requests sent in the window, over the window; "
      "send lag: how late the generator sent (large: it fell behind, the row is not valid)")
PY
