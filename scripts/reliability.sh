#!/usr/bin/env bash
# The reliability suite, one command, one table.
#   scripts/reliability.sh            fast part (seconds per area + 30 s per fuzz target,
#                                     a 10 s soak, the network faults: about a minute)
#   scripts/reliability.sh --long     full sizes: 10M rotating keys, faults held 5 s,
#                                     a 300 s soak, 120 s per fuzz target, every network
#                                     fault under shared and hybrid, fail open and closed
#   scripts/reliability.sh --only net [--long]
#                                     the network faults alone: one table (fault,
#                                     strategy, policy, admitted, denied, errors, worst
#                                     overshoot vs bound, time to apply the policy, time
#                                     to recover); the fast part takes about a minute and a half
# Extra flags go to floodgate-reliability (see --help: --only AREAS, --soak-secs N,
# --fuzz-secs N, --json). Needs cargo-fuzz for the fuzz rows (installed on first use), the
# Redis on 127.0.0.1:6379 for the clock-skew row, and redis-server for the fault matrix
# (it starts its own on free loopback ports). The network faults need root and `ip`
# (iproute2): they build their own namespaces, start their own redis-server (and for the
# failover case a replica and redis-sentinel) in one, and are skipped with a message
# elsewhere; the clock step on a node runs it under libfaketime (Debian's faketime) and
# is skipped with a message without it; missing iproute2, redis-sentinel and faketime
# are installed with apt-get as root. The fault matrix, the soak and the network faults
# run the release `floodgate` binary, built here.
set -euo pipefail
cd "$(dirname "$0")/.."
only=""
prev=""
for a in "$@"; do
    case "$a" in
        --only=*) only="${a#--only=}" ;;
        *) [ "$prev" = "--only" ] && only="$a" ;;
    esac
    prev="$a"
done
if [ -z "$only" ] || [[ ",$only," == *",fuzz,"* ]]; then
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
fi
if [ -z "$only" ] || [[ ",$only," == *",net,"* ]]; then
    # iproute2 for the namespaces, Debian's redis-sentinel for the failover case
    # (without it the case runs `redis-server --sentinel`, the same program)
    missing=""
    command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
    command -v redis-sentinel >/dev/null 2>&1 || missing="$missing redis-sentinel"
    # libfaketime (Debian's faketime) for the clock step on a node
    compgen -G "/usr/lib/*/faketime/libfaketime*.so.1" >/dev/null ||
        compgen -G "/usr/lib/faketime/libfaketime*.so.1" >/dev/null || missing="$missing faketime"
    if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null ||
            echo "reliability.sh: could not install$missing" >&2
    fi
fi
cargo build --quiet --release -p floodgate --bin floodgate
cargo build --quiet --release -p floodgate-reliability --bin floodgate-reliability
target="${CARGO_TARGET_DIR:-target}"
FLOODGATE_BIN="${FLOODGATE_BIN:-$target/release/floodgate}" \
    "$target/release/floodgate-reliability" "$@"
