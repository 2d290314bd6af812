#!/usr/bin/env bash
# What floodgate's ASGI middleware costs a FastAPI app per request, in process, with the
# limit not binding: builds of the module compared side by side in one run. Serves
# scripts/lib/bench_python_app.py under uvicorn (1 worker) once with no limiter, once
# with a pure-Python middleware adding two fixed header fields (headers-only: the floor
# of any middleware that adds headers) and once per build given, then runs wrk (one
# thread, CONN connections) for SECS seconds on each server in turn, ROUNDS times.
# Per slice: requests/s, and the server process's CPU time (user + system, from
# /proc/PID/stat) divided by the requests it served: CPU microseconds per request, the
# figure that other load on the machine disturbs least. Prints the medians, and for each
# server the median of its per-round difference from the server with no limiter.
#
#   bash scripts/ab-python-asgi.sh                       # the floodgate in target/pyenv
#   bash scripts/ab-python-asgi.sh before=/tmp/a.whl after=/tmp/b.whl
#   ROUNDS=12 SECS=2 CONN=32 (defaults)
#
# A build is a wheel (unpacked into a temporary directory) or a directory holding the
# `floodgate` package, put first on PYTHONPATH; `installed` is target/pyenv's own.
# Servers and wrk run on CPUs of their own where there are two (scripts/lib/python-bench.sh).
# Needs wrk and target/pyenv with fastapi and uvicorn (bash scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-12}
SECS=${SECS:-2}
CONN=${CONN:-32}
py=$PWD/target/pyenv/bin/python
command -v wrk >/dev/null || { echo "needs wrk: apt-get install -y wrk" >&2; exit 1; }
"$py" -c 'import fastapi, uvicorn' 2>/dev/null \
    || { echo "needs fastapi and uvicorn in $py: bash scripts/test-python.sh installs them" >&2; exit 1; }
source scripts/lib/python-bench.sh
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(floodgate=installed)

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

labels=() ports=()
serve() { # label limiter pythonpath
    local p; p=$(free_port)
    BENCH_LIMITER=$2 BENCH_RATE=100000000/minute PYTHONPATH=$3 \
        "${server[@]}" "$py" -m uvicorn bench_python_app:app --app-dir scripts/lib --host 127.0.0.1 --port "$p" \
        --workers 1 --no-access-log --log-level warning &
    pids+=($!) labels+=("$1") ports+=("$p")
}
serve none none ""
serve headers-only headers-only ""
for b in "${builds[@]}"; do
    label=${b%%=*} where=${b#*=}
    case $where in
        installed) dir="" ;;
        *.whl) dir="$work/$label"; mkdir -p "$dir"; "$py" -m zipfile -e "$where" "$dir" ;;
        *) [ -d "$where/floodgate" ] || { echo "$where: no floodgate package there" >&2; exit 1; }
           dir=$where ;;
    esac
    serve "$label" floodgate-memory "$dir"
done
for i in "${!ports[@]}"; do
    warm_up "${ports[$i]}"
done

tck=$(getconf CLK_TCK)
rows=$work/rows
for r in $(seq "$ROUNDS"); do
    line="round $r:"
    for i in "${!ports[@]}"; do
        stat=/proc/${pids[$i]}/stat
        c0=$(awk '{print $14 + $15}' "$stat")
        out=$("${load[@]}" wrk -t1 -c"$CONN" -d"${SECS}s" "http://127.0.0.1:${ports[$i]}/item")
        c1=$(awk '{print $14 + $15}' "$stat")
        rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
        n=$(awk '/requests in/ {print $1}' <<<"$out")
        us=$(awk -v a="$c0" -v b="$c1" -v t="$tck" -v n="$n" 'BEGIN {printf "%.1f", (b - a) / t * 1e6 / n}')
        echo "$r ${labels[$i]} $rps $us" >>"$rows"
        line+=" ${labels[$i]} $rps/s ${us}us"
    done
    echo "$line (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
"$py" - "$rows" "${labels[@]}" <<'PY'
import statistics as st
import sys

rows = [line.split() for line in open(sys.argv[1])]
labels = sys.argv[2:]
rps = {l: [float(r[2]) for r in rows if r[1] == l] for l in labels}
cpu = {l: [float(r[3]) for r in rows if r[1] == l] for l in labels}
base = labels[0]
print(f"{'server':14s} {'req/s':>8s} {'CPU us/req':>11s} {'+us vs none':>12s} {'none/this':>10s}")
for l in labels:
    diff = st.median(a - b for a, b in zip(cpu[l], cpu[base]))
    print(f"{l:14s} {st.median(rps[l]):8.0f} {st.median(cpu[l]):11.1f} {diff:+12.1f}"
          f" {st.median(cpu[base]) / st.median(cpu[l]):9.3f}x")
PY
echo "wrk -t1 -c$CONN, $ROUNDS rounds of $SECS s per server, uvicorn 1 worker; ${server[*]:-unpinned} server, ${load[*]:-unpinned} wrk; $(date -u '+%F %H:%M UTC') $(git rev-parse --short HEAD)"
