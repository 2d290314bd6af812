#!/usr/bin/env bash
# The project's test command (the README's second command; .ci/run calls it after its
# lint and fuzz steps). First installs what the tests need (scripts/setup.sh: Debian
# packages as root, redis-cell, the Python virtualenv), then runs every crate's unit,
# integration and property tests with nextest, the doc examples (nextest does not run
# doctests), the Python module's pytest suite (scripts/test-python.sh) and `floodgate
# server` against independent Python clients (grpcio with Envoy's xds-protos, redis-py,
# curl: scripts/test-server-python.sh). Needs a Redis on 127.0.0.1:6379; tests that kill
# or pause Redis start their own redis-server.
#
# No test passes by returning early: a test whose prerequisite is missing fails naming
# it. The one prerequisite setup cannot give is root, for the network namespaces of the
# network-fault tests: without it they are left out by the runner's filter, and nextest
# reports them as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
filter=()
netns_tests='binary(reliability_net) | test(netns::tests::builds_a_reachable_network_and_removes_it)'
probe="fgtest-$$-probe"
if [ "$(id -u)" = 0 ] && ip netns add "$probe" 2>/dev/null; then
    ip netns del "$probe"
else
    echo "scripts/test.sh: SKIPPED (no network namespaces: not root, or ip netns refused): $netns_tests" >&2
    filter=(-E "all() - ($netns_tests)")
fi
cargo nextest run --workspace --no-fail-fast "${filter[@]}" "$@"
cargo test --workspace --doc
bash scripts/test-python.sh
bash scripts/test-server-python.sh
