#!/usr/bin/env bash
# Benchmark: the most requests per second `floodgate load` sustains against a
# trivial local server, in the same run as oha and hey on the same target, same
# concurrency and duration, closed loop at max rate (no -q), keep-alive HTTP/1.1.
# Tools alternate and rounds repeat so that machine noise is visible. Loopback only.
# Not part of the test suite.
#
#   bash scripts/bench-load.sh                 # -c 50 -z 10s, 3 rounds
#   C=50 DUR=10s ROUNDS=3 PORT=18080 SERVER_THREADS=1 bash scripts/bench-load.sh
#
# Installs what is missing: hey from Debian (apt-get), oha with cargo into
# target/bench-tools (compiling it takes minutes). Prints a table of rps per tool per
# round, the median per tool, the client's CPU time per request (user + system, bash's
# `time`), and floodgate / best peer. The load average is printed before, after and with
# each run: on a shared machine, compare runs only at similar loads.
set -euo pipefail
cd "$(dirname "$0")/.."

C=${C:-50}
DUR=${DUR:-10s}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18080}
SERVER_THREADS=${SERVER_THREADS:-}
TOOLS=target/bench-tools
OUT=target/bench-load
mkdir -p "$TOOLS" "$OUT"

if ! command -v hey >/dev/null 2>&1; then
    apt-get update
    apt-get install -y hey
fi
OHA=$TOOLS/bin/oha
if [ ! -x "$OHA" ]; then
    cargo install --locked oha --root "$TOOLS"
fi
cargo build --profile dist --bin floodgate
cargo build --profile dist -p floodgate-load --example target_server
FLOODGATE=target/dist/floodgate
SERVER=target/dist/examples/target_server

server_args=("$PORT")
[ -n "$SERVER_THREADS" ] && server_args+=(--threads "$SERVER_THREADS")
"$SERVER" "${server_args[@]}" 2>"$OUT/server.log" &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
URL="http://127.0.0.1:$PORT/"
for _ in $(seq 100); do
    curl -fsS "$URL" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "$URL" >/dev/null

# One run of a tool; prints its requests per second and the client's CPU time (user +
# system, from bash's `time`) per request in microseconds.
run() {
    local tool=$1 log="$OUT/$1.$2" cpu
    TIMEFORMAT='%U %S'
    case "$tool" in
        floodgate)
            cpu=$({ time "$FLOODGATE" load "$URL" -c "$C" -z "$DUR" --no-progress --json >"$log.json" 2>"$log.err"; } 2>&1)
            python3 - "$log.json" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["errors"]
assert e["timeout"] + e["other"] + e["connect_refused"] == 0, e
n = r["requests"]
print(f'{r["rps"]:.0f} {sum(map(float, sys.argv[2].split())) / n * 1e6:.1f}')
PY
            ;;
        oha)
            cpu=$({ time "$OHA" -c "$C" -z "$DUR" --no-tui --output-format json "$URL" >"$log.json" 2>"$log.err"; } 2>&1)
            python3 - "$log.json" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = sum(r["statusCodeDistribution"].values())
print(f'{r["summary"]["requestsPerSec"]:.0f} {sum(map(float, sys.argv[2].split())) / n * 1e6:.1f}')
PY
            ;;
        hey)
            cpu=$({ time hey -c "$C" -z "$DUR" "$URL" >"$log.txt" 2>"$log.err"; } 2>&1)
            awk -v cpu="$cpu" '
                /Requests\/sec:/ {rps = $2}
                /\[[0-9]+\][ \t]+[0-9]+ responses/ {n += $2}
                END {split(cpu, c, " "); printf "%.0f %.1f\n", rps, (c[1] + c[2]) / n * 1e6}' "$log.txt"
            ;;
    esac
}

echo "== load before: $(uptime)"
echo "== target $URL (target_server, threads: ${SERVER_THREADS:-all cores}); -c $C -z $DUR, closed loop, max rate; $ROUNDS rounds"
tools=(floodgate oha hey)
declare -A results cpus
for round in $(seq "$ROUNDS"); do
    # Rotate the order each round so that no tool always runs first or last.
    for k in 0 1 2; do
        tool=${tools[$(((k + round - 1) % 3))]}
        read -r rps cpu < <(run "$tool" "$round")
        results[$tool.$round]=$rps
        cpus[$tool.$round]=$cpu
        echo "round $round  $tool  $rps req/s  client CPU $cpu us/request  (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    done
done
echo "== load after: $(uptime)"

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo
printf '| tool |'; for r in $(seq "$ROUNDS"); do printf ' round %s req/s |' "$r"; done; printf ' median req/s | median client CPU us/request |\n'
printf '|---|'; for _ in $(seq "$ROUNDS"); do printf -- '---:|'; done; printf -- '---:|---:|\n'
declare -A med
for tool in "${tools[@]}"; do
    vals=()
    cvals=()
    printf '| %s |' "$tool"
    for r in $(seq "$ROUNDS"); do
        printf ' %s |' "${results[$tool.$r]}"
        vals+=("${results[$tool.$r]}")
        cvals+=("${cpus[$tool.$r]}")
    done
    med[$tool]=$(median "${vals[@]}")
    printf ' %s | %s |\n' "${med[$tool]}" "$(median "${cvals[@]}")"
done
best=oha
awk -v a="${med[hey]}" -v b="${med[oha]}" 'BEGIN {exit !(a > b)}' && best=hey
awk -v f="${med[floodgate]}" -v p="${med[$best]}" -v n="$best" \
    'BEGIN {printf "\nfloodgate / best peer (%s), medians: %.2f\n", n, f / p}'
