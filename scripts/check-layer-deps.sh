#!/usr/bin/env bash
# The tower layer stays lean: floodgate-http's normal dependency tree (default features)
# lists at most 50 distinct packages (a package cargo tree repeats with (*) counts once) and none of a Redis client, TLS (rustls, ring), hyper's
# client (hyper-util's client-legacy) or a TOML parser. Those belong to floodgate-proxy
# and to floodgate-engine's `redis` feature. .ci/run calls this before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
max=${LAYER_DEPS_MAX:-50}
tree=$(cargo tree -p floodgate-http -e normal --prefix none | sort -u)
lines=$(wc -l <<<"$tree")
packages=$(sed 's/ (\*)$//' <<<"$tree" | sort -u | wc -l)
echo "floodgate-http: $lines lines of 'cargo tree -p floodgate-http -e normal --prefix none | sort -u', $packages distinct packages (at most $max)"
status=0
if [ "$packages" -gt "$max" ]; then
    echo "error: the layer's tree lists $packages distinct packages, more than $max:" >&2
    echo "$tree" >&2
    status=1
fi
forbidden=$(grep -E '^(redis|rustls|ring|toml|tokio-rustls) ' <<<"$tree" || true)
if [ -n "$forbidden" ]; then
    echo "error: the layer depends on packages it must not (they belong to the proxy or the engine's redis feature):" >&2
    echo "$forbidden" >&2
    status=1
fi
# hyper-util is allowed only without its HTTP client (client-legacy)
if grep -q '^hyper-util ' <<<"$tree"; then
    features=$(cargo tree -p floodgate-http -e normal,features -i hyper-util --prefix none 2>/dev/null || true)
    if grep -q 'client-legacy' <<<"$features"; then
        echo "error: the layer pulls hyper-util's client (client-legacy)" >&2
        status=1
    fi
fi
exit $status
