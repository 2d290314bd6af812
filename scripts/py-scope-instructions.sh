#!/usr/bin/env bash
# Instructions per `RequestLimiter.decide_scope` call (what the ASGI middleware calls once
# per request), counted by valgrind's callgrind: repeatable whatever else the machine is
# doing, unlike microseconds. The limiter and scope are those of the Python benchmark's app
# (scripts/lib/bench_python_app.py: one GCRA policy per client address, not binding; the
# scope uvicorn gives wrk's request). Two runs, of N calls and of none (each after the same
# 1,000 warm-up calls); the difference over N is the figure, the loop's own few
# instructions included. Builds given as directories holding a `floodgate` package (or
# `installed`, target/pyenv's own) are counted in turn.
#
#   bash scripts/py-scope-instructions.sh [N] [BUILD..]    (default 20000, installed)
#
# Needs valgrind (apt-get install -y valgrind) and target/pyenv with the module
# (bash scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
shift || true
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(installed)
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
py=$PWD/target/pyenv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/loop.py" <<'PY'
import sys
from floodgate import Policy, RequestLimiter
limiter = RequestLimiter([Policy("item", "100000000/minute", algorithm="gcra",
                                 capacity=100000000, key="ip")])
scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
         "http_version": "1.1", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 51234),
         "scheme": "http", "method": "GET", "root_path": "", "path": "/item",
         "raw_path": b"/item", "query_string": b"", "headers": [(b"host", b"127.0.0.1:8000")],
         "state": {}}
decide = limiter.decide_scope
assert type(decide(scope, None)) is list, "the request must pass holding nothing"
for _ in range(1000):
    decide(scope, None)
for _ in range(int(sys.argv[1])):
    decide(scope, None)
PY
count() {
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$py" "$work/loop.py" "$1" \
        2>&1 | awk '/Collected :/ {print $4}'
}
for b in "${builds[@]}"; do
    if [ "$b" = installed ]; then unset PYTHONPATH
    else export PYTHONPATH=$b; fi
    none=$(count 0)
    some=$(count "$N")
    echo "$b: $(( (some - none) / N )) instructions per decide_scope ($N calls)"
done
