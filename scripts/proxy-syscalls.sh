#!/usr/bin/env bash
# Per proxied request: the system calls by kind, context switches, CPU time and TCP
# segments of `floodgate proxy` and HAProxy, each balancing round-robin over the same two
# backend servers (bench_backend, one thread each), driven by the same wrk run; and the
# same counts for the backend servers and wrk while each proxy is in front. Counted with
# perf's syscall tracepoints (no ptrace: the counted process runs at nearly full speed).
# Configurations as in scripts/bench-proxy.sh (its "proxied" scenario). TCP segments and
# the idle share are the machine's (nstat, /proc/stat): other traffic on loopback and
# other work count there too.
# Needs: haproxy, wrk, perf (apt-get install -y haproxy wrk linux-perf).
#
#   scripts/proxy-syscalls.sh [SECONDS] [CONNECTIONS] [ROUNDS]     (defaults: 3 64 2)
#
# Each proxy gets ROUNDS runs of wrk -t2 -cCONNECTIONS -dSECONDS, in turn with the other;
# the table sums the runs. PROFILE=dist for the benchmark's build (default: release).
# FLOODGATE=path runs that floodgate binary instead of the build's; BASE_FLOODGATE=path
# adds a second floodgate binary to the same run (e.g. main's, to compare a change).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/nginx-limit-req.sh
source scripts/lib/proxy-pair-conf.sh
DUR=${1:-3}
CONN=${2:-64}
ROUNDS=${3:-2}
BACKEND1=127.0.0.1:28000
BACKEND2=127.0.0.1:28001
FG=127.0.0.1:28080
HAP=127.0.0.1:28082
BASE=127.0.0.1:28083
for tool in haproxy wrk perf; do
  command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install -y haproxy wrk linux-perf" >&2; exit 1; }
done
for p in 28000 28001 28080 28082 28083; do
  if ss -ltn | grep -q "127.0.0.1:$p "; then echo "port $p is busy" >&2; exit 1; fi
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
PROFILE=${PROFILE:-release}
BIN=$CARGO_TARGET_DIR/$PROFILE
if [ -z "${FLOODGATE:-}" ]; then
  cargo build --profile "$PROFILE" -q --bin floodgate
  FLOODGATE=$BIN/floodgate
fi
BACKEND=${BACKEND:-$BIN/examples/bench_backend}
[ -x "$BACKEND" ] || cargo build --profile "$PROFILE" -q -p floodgate-proxy --example bench_backend
TMP=$(mktemp -d /tmp/fg-syscalls.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

floodgate_pair_conf "$TMP/floodgate.toml" "$FG" "$BACKEND1" "$BACKEND2" 100000000 100000000
haproxy_pair_conf "$TMP/haproxy.cfg" "$HAP" "$BACKEND1" "$BACKEND2" 100000000 100000000 2

"$BACKEND" $BACKEND1 1 2>/dev/null & PIDS+=($!); B1=$!
"$BACKEND" $BACKEND2 1 2>/dev/null & PIDS+=($!); B2=$!
"$FLOODGATE" proxy --config "$TMP/floodgate.toml" --threads 2 2>"$TMP/fg.log" & PIDS+=($!); FGPID=$!
haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" & PIDS+=($!); HAPID=$!
TARGETS=("fg $FGPID http://$FG/" "hap $HAPID http://$HAP/")
if [ -n "${BASE_FLOODGATE:-}" ]; then
  sed "s|^listen = .*|listen = \"$BASE\"|" "$TMP/floodgate.toml" >"$TMP/base.toml"
  "$BASE_FLOODGATE" proxy --config "$TMP/base.toml" --threads 2 2>"$TMP/base.log" & PIDS+=($!)
  TARGETS+=("base $! http://$BASE/")
  wait_port $BASE
fi
wait_port $BACKEND1; wait_port $BACKEND2; wait_port $FG; wait_port $HAP
# warm up: upstream connections opened, pools filled
for t in "${TARGETS[@]}"; do wrk -t2 -c"$CONN" -d1s "${t##* }" >/dev/null; done

# every system call counted by kind; the table shows those made at least once per 200 requests
EVENTS="task-clock,raw_syscalls:sys_enter,context-switches,cpu-migrations,syscalls:sys_enter_*"

ticks() { awk '{print $14 + $15, $14, $15}' "/proc/$1/stat"; }
segs() { nstat -az TcpOutSegs | awk '/TcpOutSegs/ {print $2}'; }
# idle ticks of all CPUs
idle() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
# per thread of the proxy: "tid name utime stime voluntary nonvoluntary"
threads() {
  local t
  for t in /proc/$1/task/*; do
    echo "${t##*/} $(tr ' ' _ <"$t/comm") $(cut -d' ' -f14,15 "$t/stat") $(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v, n}' "$t/status")"
  done
}

run() { # key proxy-pid url
  local key=$1 pid=$2 url=$3 who perfs=()
  for who in proxy:$pid b1:$B1 b2:$B2; do
    perf stat -x, -e "$EVENTS" -p "${who#*:}" -o "$TMP/$key.${who%%:*}.perf.$r" &
    perfs+=($!)
  done
  sleep 0.3
  local s0 s1 i0 i1 u0p s0p u0b1 s0b1 u0b2 s0b2 u1p s1p u1b1 s1b1 u1b2 s1b2
  read -r _ u0p s0p < <(ticks "$pid"); read -r _ u0b1 s0b1 < <(ticks $B1); read -r _ u0b2 s0b2 < <(ticks $B2)
  s0=$(segs); i0=$(idle); threads "$pid" >"$TMP/$key.threads0.$r"
  perf stat -x, -e "$EVENTS" -o "$TMP/$key.wrk.perf.$r" wrk -t2 -c"$CONN" -d"${DUR}s" --latency "$url" >"$TMP/$key.wrk.$r"
  s1=$(segs); i1=$(idle); threads "$pid" >"$TMP/$key.threads1.$r"
  read -r _ u1p s1p < <(ticks "$pid"); read -r _ u1b1 s1b1 < <(ticks $B1); read -r _ u1b2 s1b2 < <(ticks $B2)
  kill -INT "${perfs[@]}"; wait "${perfs[@]}" 2>/dev/null || true
  local n
  n=$(awk '/requests in/ {print $1}' "$TMP/$key.wrk.$r")
  echo "$n $((u1p - u0p)) $((s1p - s0p)) $((u1b1 - u0b1 + u1b2 - u0b2)) $((s1b1 - s0b1 + s1b2 - s0b2)) $((s1 - s0)) $((i1 - i0))" >>"$TMP/$key.ticks"
}

# the targets in turn, the order rotating per round
K=${#TARGETS[@]}
for r in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((K - 1))); do
    # shellcheck disable=SC2086
    run ${TARGETS[$(((i + r) % K))]}
  done
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GB, kernel $(uname -r)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(haproxy -v | head -1 | cut -d' ' -f1-3); wrk -t2 -c$CONN, $ROUNDS x ${DUR}s per proxy; counts per proxied request"
python3 - "$TMP" "$(getconf CLK_TCK)" "$DUR" <<'PY'
import collections, glob, sys
tmp, hz, dur = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def perf(key, who):
    c = collections.Counter()
    for f in glob.glob(f"{tmp}/{key}.{who}.perf.*"):
        for line in open(f):
            p = line.strip().split(",")
            if len(p) > 2 and p[0].replace(".", "").isdigit():
                name = p[2]
                if name.startswith("syscalls:sys_enter_"):
                    name = name[len("syscalls:sys_enter_"):]
                elif name.startswith("raw_syscalls"):
                    name = "raw_syscalls"
                c[name] += float(p[0])
    return c
def threads(key):
    """per thread name: [cpu us, voluntary, nonvoluntary] over the runs"""
    acc = collections.defaultdict(lambda: [0.0, 0, 0])
    for f0 in glob.glob(f"{tmp}/{key}.threads0.*"):
        a = {l.split()[0]: l.split() for l in open(f0)}
        for l in open(f0.replace("threads0", "threads1")):
            b = l.split()
            if b[0] in a:
                x = acc[b[1] + "/" + b[0]]
                x[0] += (int(b[2]) + int(b[3]) - int(a[b[0]][2]) - int(a[b[0]][3])) / hz * 1e6
                x[1] += int(b[4]) - int(a[b[0]][4])
                x[2] += int(b[5]) - int(a[b[0]][5])
    return acc
rows = {}
for key in [k for k in ("fg", "base", "hap") if glob.glob(f"{tmp}/{k}.ticks")]:
    t = [list(map(int, l.split())) for l in open(f"{tmp}/{key}.ticks")]
    n = sum(x[0] for x in t)
    rows[key] = dict(n=n, rps=n / (dur * len(t)),
                     pu=sum(x[1] for x in t) / hz / n * 1e6, ps=sum(x[2] for x in t) / hz / n * 1e6,
                     bu=sum(x[3] for x in t) / hz / n * 1e6, bs=sum(x[4] for x in t) / hz / n * 1e6,
                     segs=sum(x[5] for x in t) / n,
                     idle=sum(x[6] for x in t) / hz / (2 * dur * len(t)) * 100,
                     thr=threads(key),
                     **{w: perf(key, w) for w in ("proxy", "b1", "b2", "wrk")})
names = {"fg": "floodgate", "base": "fg base", "hap": "HAProxy"}
print(f"{'per request':<28}" + "".join(f"{names[k]:>12}" for k in rows))
def line(label, f):
    print(f"{label:<28}" + "".join(f"{f(r):>12.2f}" for r in rows.values()))
line("requests/s (wrk)", lambda r: r["rps"])
def pct(key, p):
    vals = []
    for f in glob.glob(f"{tmp}/{key}.wrk.*"):
        if ".perf." in f:
            continue
        for l in open(f):
            w = l.split()
            if len(w) == 2 and w[0] == p:
                v = w[1]
                m = 1 if v.endswith("us") else 1000 if v.endswith("ms") else 1e6
                vals.append(float(v.rstrip("mus")) * m)
    return sorted(vals)[len(vals) // 2]
for r, key in zip(rows.values(), rows):
    r["p50"], r["p99"] = pct(key, "50%"), pct(key, "99%")
line("wrk p50 us (median of runs)", lambda r: r["p50"])
line("wrk p99 us (median of runs)", lambda r: r["p99"])
line("proxy cpu us user", lambda r: r["pu"])
line("proxy cpu us system", lambda r: r["ps"])
line("backends cpu us user", lambda r: r["bu"])
line("backends cpu us system", lambda r: r["bs"])
line("TCP segments, machine-wide", lambda r: r["segs"])
line("wrk cpu us (task-clock)", lambda r: r["wrk"]["task-clock"] * 1e3 / r["n"])
line("idle % of 2 CPUs", lambda r: r["idle"])
for who, label in (("proxy", "proxy"), ("b", "backends"), ("wrk", "wrk")):
    def get(r, ev, who=who):
        if who == "b":
            return (r["b1"][ev] + r["b2"][ev]) / r["n"]
        return r[who][ev] / r["n"]
    line(f"{label}: syscalls", lambda r, get=get: get(r, "raw_syscalls"))
    kinds = sorted({k for r in rows.values() for w in ("proxy", "b1", "b2", "wrk") for k in r[w]}
                   - {"task-clock", "raw_syscalls", "context-switches", "cpu-migrations"})
    for ev in kinds + ["context-switches", "cpu-migrations"]:
        if any(get(r, ev) >= 0.005 for r in rows.values()):
            line(f"{label}:   {ev}", lambda r, ev=ev, get=get: get(r, ev))
for key in rows:
    print(f"{names[key]} threads (cpu us, voluntary, involuntary switches per request):")
    r = rows[key]
    for name, (us, v, nv) in sorted(r["thr"].items()):
        if us or v or nv:
            print(f"  {name:<30} {us / r['n']:8.2f} {v / r['n']:8.3f} {nv / r['n']:8.3f}")
PY
