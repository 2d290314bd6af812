#!/usr/bin/env bash
# Requests/s of one FastAPI app (scripts/lib/bench_python_app.py) under uvicorn, 1 worker,
# with each limiter: none, slowapi (on `limits`, in memory and on Redis) and floodgate's
# ASGI middleware (in process and on Redis), in two cases: the limit binding (10/minute per
# client: nearly every request denied) and not binding (100000000/minute). Same load tool
# (wrk, one thread, CONN connections), same run, loopback only: every server is started
# first, then each slice of SECS seconds is run on each in turn, SLICES times; the figure is
# the median slice. Prints the table and the ratios the targets are stated in.
#
#   bash scripts/bench-python.sh            # SECS=5 SLICES=3 CONN=32
#
# On a machine of two or more CPUs every server runs on one CPU and wrk on another
# (scripts/lib/python-bench.sh: SERVER_CPU, LOAD_CPU, PIN=0 for neither); the limiters on
# Redis then use a redis-server of the run's own on wrk's CPU (a free port, nothing on
# disk), so that the server's CPU is the server's alone, as with a Redis on another host.
# Unpinned, they use the Redis on 127.0.0.1:6379.
#
# Needs: wrk (apt-get install -y wrk), redis-server (pinned) or a Redis on 127.0.0.1:6379
# (unpinned: keys under a prefix of the run's own, deleted at the end), and the floodgate
# module installed in target/pyenv
# (bash scripts/test-python.sh builds and installs the release wheel); installs fastapi,
# uvicorn, slowapi and limits into target/pyenv when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
SLICES=${SLICES:-3}
CONN=${CONN:-32}
py=target/pyenv/bin/python
source scripts/lib/python-bench.sh

command -v wrk >/dev/null || { echo "needs wrk: apt-get install -y wrk" >&2; exit 1; }
[ ${#server[@]} -gt 0 ] || redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { echo "needs a Redis on 127.0.0.1:6379 (or two CPUs and redis-server)" >&2; exit 1; }
"$py" -c 'from floodgate import RequestLimiter; from floodgate.asgi import RateLimitMiddleware' 2>/dev/null \
    || { echo "needs floodgate in $py: bash scripts/test-python.sh builds and installs it" >&2; exit 1; }
if ! "$py" -c 'import fastapi, uvicorn, slowapi, limits, redis' 2>/dev/null; then
    "$py" -m pip install -q --disable-pip-version-check 'fastapi>=0.115,<1' 'uvicorn>=0.30,<1' \
        'slowapi>=0.1.9,<0.2' 'limits>=3.13,<6' 'redis>=5'
fi

prefix="fgbench-$$-"
pids=()
redis_port=6379
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$redis_port" = 6379 ]; then
        redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "${prefix}*" | xargs -r redis-cli -h 127.0.0.1 -p 6379 DEL >/dev/null
    fi
}
trap cleanup EXIT

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if [ ${#server[@]} -gt 0 ]; then
    command -v redis-server >/dev/null || { echo "needs redis-server (or PIN=0)" >&2; exit 1; }
    redis_port=$(free_port)
    "${load[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile '' >/dev/null &
    pids+=($!)
    for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

# name limiter rate
configs=(
    "none none 10/minute"
    "binding/slowapi-memory slowapi-memory 10/minute"
    "binding/slowapi-redis slowapi-redis 10/minute"
    "binding/floodgate-memory floodgate-memory 10/minute"
    "binding/floodgate-redis floodgate-redis 10/minute"
    "free/slowapi-memory slowapi-memory 100000000/minute"
    "free/slowapi-redis slowapi-redis 100000000/minute"
    "free/floodgate-memory floodgate-memory 100000000/minute"
    "free/floodgate-redis floodgate-redis 100000000/minute"
)
declare -A port
for c in "${configs[@]}"; do
    read -r name limiter rate <<<"$c"
    p=$(free_port)
    BENCH_LIMITER=$limiter BENCH_RATE=$rate BENCH_REDIS="redis://127.0.0.1:$redis_port" BENCH_PREFIX="${prefix}${name//\//-}:" \
        "${server[@]}" "$py" -m uvicorn bench_python_app:app --app-dir scripts/lib --host 127.0.0.1 --port "$p" \
        --workers 1 --no-access-log --log-level warning &
    pids+=($!)
    port[$name]=$p
done
for c in "${configs[@]}"; do
    read -r name _ <<<"$c"
    warm_up "${port[$name]}"
done

declare -A results
for s in $(seq "$SLICES"); do
    for c in "${configs[@]}"; do
        read -r name _ <<<"$c"
        out=$("${load[@]}" wrk -t1 -c"$CONN" -d"${SECS}s" "http://127.0.0.1:${port[$name]}/item")
        rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
        total=$(awk '/requests in/ {print $1}' <<<"$out")
        non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
        results[$name]="${results[$name]:-} $rps:${total}:${non2xx:-0}"
        echo "slice $s $name: $rps req/s, ${non2xx:-0} of $total not 2xx" >&2
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -t: -k1 -g | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
declare -A med
printf '%-26s %12s %10s\n' "configuration" "req/s" "denied"
for c in "${configs[@]}"; do
    read -r name _ <<<"$c"
    m=$(echo "${results[$name]}" | median)
    IFS=: read -r rps total non2xx <<<"$m"
    med[$name]=$rps
    printf '%-26s %12.0f %9.1f%%\n' "$name" "$rps" "$(awk -v n="$non2xx" -v t="$total" 'BEGIN {print 100*n/t}')"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }
echo
echo "binding, floodgate / slowapi (the target: at least 1.5x):"
echo "  in memory: $(ratio "${med[binding/floodgate-memory]}" "${med[binding/slowapi-memory]}")"
echo "  on Redis:  $(ratio "${med[binding/floodgate-redis]}" "${med[binding/slowapi-redis]}")"
echo "not binding, against no limiter (the target: at least 0.95x):"
echo "  floodgate in memory: $(ratio "${med[free/floodgate-memory]}" "${med[none]}")"
echo "  floodgate on Redis:  $(ratio "${med[free/floodgate-redis]}" "${med[none]}")"
echo "  slowapi in memory:   $(ratio "${med[free/slowapi-memory]}" "${med[none]}")"
echo "  slowapi on Redis:    $(ratio "${med[free/slowapi-redis]}" "${med[none]}")"
# the same ratios slice by slice (each configuration's slice over the no-limiter slice of
# the same round, a minute apart at most), median over the rounds: less moved by the
# machine's drift from round to round than the ratio of medians
paired() {
    awk -v a="${results[$1]}" -v b="${results[none]}" 'BEGIN {
        n = split(a, x, " "); split(b, y, " ");
        for (i = 1; i <= n; i++) { split(x[i], p, ":"); split(y[i], q, ":"); r[i] = p[1] / q[1] }
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
        printf "%.2fx (%.2fx to %.2fx)", r[int((n + 1) / 2)], r[1], r[n] }'
}
echo "not binding, against no limiter, slice by slice (median, least to most):"
echo "  floodgate in memory: $(paired free/floodgate-memory)"
echo "  floodgate on Redis:  $(paired free/floodgate-redis)"
echo "wrk -t1 -c$CONN, $SLICES slices of $SECS s per configuration, uvicorn 1 worker; ${server[*]:-unpinned} server, ${load[*]:-unpinned} wrk, Redis on port $redis_port; $(date -u +%F) $(git rev-parse --short HEAD)"
