# Sourced by the Python benchmarks (bench-python.sh, ab-python-asgi.sh): what both do alike.
#
# Pinning: on a machine of two or more CPUs, the server under test runs on CPU SERVER_CPU
# (default 1) and the load generator on LOAD_CPU (default 0), so that a server's
# requests/s is what its one CPU serves rather than what the load generator leaves it of
# a CPU they share. PIN=0 runs both unpinned. Sets two arrays to put before a command:
# "${server[@]}" and "${load[@]}" (empty when unpinned).
server=()
load=()
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    server=(taskset -c "${SERVER_CPU:-1}")
    load=(taskset -c "${LOAD_CPU:-0}")
fi

# warm_up PORT: waits (up to 20 s) for the app on 127.0.0.1:PORT to answer GET /item, then
# runs wrk on it for a second (CONN connections, on the load generator's CPU).
warm_up() {
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$1/item" && break
        sleep 0.2
    done
    "${load[@]}" wrk -t1 -c"$CONN" -d1s "http://127.0.0.1:$1/item" >/dev/null
}
