#!/usr/bin/env bash
# Instructions and simulated cache misses per check, floodgate core against governor, for
# the single-thread cells of the core benchmark (crates/floodgate-core/benches/limiters.rs),
# counted by valgrind's callgrind: repeatable whatever else the machine is doing, unlike
# nanoseconds. Callgrind counts only inside the bench's measured loop (`hot_loop`), after
# the same warm-up pass the timed benchmark makes, so the figures are per check of the
# same workload (moving clock, ~90% admitted).
#
#   scripts/core-instructions.sh [CHECKS] [CELL..]   (default 200000 checks; cells as the
#                                                     bench names them, e.g. "zipf 1M")
#
# Needs valgrind (apt-get install -y valgrind). Cache misses are callgrind's simulation
# (D1 = first-level data cache, LL = last level), not the hardware's counters.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
shift || true
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
BIN=$(cargo bench -q -p floodgate-core --bench limiters --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "limiters":
        print(m["executable"])')
[ -x "$BIN" ] || { echo "could not build the limiters bench" >&2; exit 1; }
TMP=$(mktemp -d /tmp/fg-core-instr.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

CELLS=("$@")
if [ ${#CELLS[@]} -eq 0 ]; then
  CELLS=("direct, one key" "uniform 1k" "zipf 1k" "uniform 100k" "zipf 100k" "uniform 1M" "zipf 1M")
fi

printf '| cell | library | instructions per check | D1 misses per check | LL misses per check |\n'
printf '|---|---|---:|---:|---:|\n'
for cell in "${CELLS[@]}"; do
  if [ "$cell" = "direct, one key" ]; then
    LIBS=("governor" "floodgate AtomicGcra" "floodgate Limiter<Gcra>" "floodgate Limiter<AnyAlgorithm>")
  else
    LIBS=("governor" "floodgate")
  fi
  for lib in "${LIBS[@]}"; do
    out="$TMP/out"
    valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no --toggle-collect='*hot_loop*' \
      --callgrind-out-file="$out" "$BIN" --instructions "$cell" "$lib" "$N" >"$TMP/stdout" 2>"$TMP/log" || {
      cat "$TMP/log" >&2; exit 1; }
    name=$(cut -d'|' -f1 "$TMP/stdout" | sed 's/ *$//')
    shown="$lib"
    case "$lib" in *'<'*) shown="floodgate \`${lib#floodgate }\`" ;; esac # Markdown: not an HTML tag
    awk -v n="$N" -v cell="$name" -v lib="$shown" '
      /^events:/ { for (i = 2; i <= NF; i++) ev[i - 1] = $i }
      /^totals:/ { for (i = 2; i <= NF; i++) v[ev[i - 1]] = $i }
      END {
        d1 = v["D1mr"] + v["D1mw"]; ll = v["DLmr"] + v["DLmw"]
        printf "| %s | %s | %.1f | %.2f | %.2f |\n", cell, lib, v["Ir"] / n, d1 / n, ll / n
      }' "$out"
  done
done
