# Sourced by the Python benchmarks: on a machine of two or more CPUs, the server under
# test runs on CPU SERVER_CPU (default 1) and the load generator on LOAD_CPU (default 0),
# so that a server's requests/s is what its one CPU serves rather than what the load
# generator leaves it of a CPU they share. PIN=0 runs both unpinned. Sets two arrays to
# put before a command: "${server[@]}" and "${load[@]}" (empty when unpinned).
server=()
load=()
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    server=(taskset -c "${SERVER_CPU:-1}")
    load=(taskset -c "${LOAD_CPU:-0}")
fi
