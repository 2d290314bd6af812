#!/usr/bin/env python3
"""The fleet strategies `quota`, `local` and `shared` of floodgate proxy side by side, on
loopback: N proxies (3, then 10) in front of one backend, one policy of 100/s on one key,
skewed demand (150/s on the first proxy, 50/s spread over the others: twice the limit).
Per run: what the fleet admitted per second against the limit, each proxy's share, and
the latency the proxy adds (p50/p99 of the busy proxy's requests, less the same load sent
to the backend directly).

  python3 scripts/bench-quota.py [--bin target/release/floodgate] [--seconds 5]

Needs the Redis on 127.0.0.1:6379 (the shared runs write keys under a prefix of their
own, deleted at the end). Bounded: 7 load runs of --seconds each (at most 30), plus
start-up. Prints a Markdown table.
"""

import argparse
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

LIMIT = 100
DEMAND_BUSY = 150.0
DEMAND_REST = 50.0


class Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"{what} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} does not listen on {port}")


def load(binary, port, rate, seconds, conc):
    """A `floodgate load` process: open loop at `rate` for `seconds`."""
    return subprocess.Popen(
        [binary, "load", f"http://127.0.0.1:{port}/", "-z", f"{seconds}s", "-q", str(rate),
         "-c", str(conc), "-t", "5s", "-H", "x-api-key: tenant-1", "--json", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def result(proc):
    out, _ = proc.communicate(timeout=120)
    d = json.loads(out)
    lat = d["latency"]["all"]
    return {
        "sent": d["requests"],
        "admitted": d["statuses"].get("200", 0),
        "elapsed": d["elapsed_s"],
        "p50": lat["p50_ms"],
        "p99": lat["p99_ms"],
    }


def proxy_config(strategy, i, listens, upstream, grpc, prefix):
    n = len(listens)
    nodes = ", ".join(f'"127.0.0.1:{p}"' for p in listens)
    me = f"127.0.0.1:{listens[i]}"
    head = (f'listen = "{me}"\nupstream = "http://127.0.0.1:{upstream}"\n'
            '[deny]\nretry_after_jitter = "0s"\n')
    if strategy == "shared":
        head += (f'[store]\ntype = "redis"\n[store.redis]\nurl = "redis://127.0.0.1:6379/"\n'
                 f'prefix = "{prefix}"\n')
    policy = ('[[policy]]\nname = "api"\nalgorithm = "gcra"\n'
              f'rate = "{LIMIT}/s"\nkey = "header:x-api-key"\n')
    if strategy == "quota":
        fleet = (f'[fleet]\nstrategy = "quota"\nquota_server = "http://127.0.0.1:{grpc}"\n'
                 f'quota_domain = "bench"\nreport_interval = "500ms"\n'
                 f'no_assignment = "local_share"\nnodes = {n}\n')
    else:
        fleet = f'[fleet]\nstrategy = "{strategy}"\nnodes = [{nodes}]\nself = "{me}"\n'
    return head + policy + fleet


def run(binary, strategy, n, seconds, upstream, grpc, tmp, prefix):
    listens = [free_port() for _ in range(n)]
    procs = []
    try:
        for i in range(n):
            cfg = os.path.join(tmp, f"{strategy}-{n}-{i}.toml")
            with open(cfg, "w") as f:
                f.write(proxy_config(strategy, i, listens, upstream, grpc, prefix))
            procs.append(subprocess.Popen(
                [binary, "proxy", "--threads", "1", "--config", cfg],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "FLOODGATE_LOG": "warn"}))
        for p, port in zip(procs, listens):
            wait_port(port, p, "floodgate proxy")
        time.sleep(1)  # every proxy started (and, under quota, connected to the server)
        rates = [DEMAND_BUSY] + [DEMAND_REST / (n - 1)] * (n - 1)
        loads = [load(binary, port, r, seconds, 4 if i == 0 else 2)
                 for i, (port, r) in enumerate(zip(listens, rates))]
        return [result(p) for p in loads]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=None)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    seconds = max(1, min(args.seconds, 30))
    binary = args.bin or next(
        (b for b in ("target/release/floodgate", "target/debug/floodgate") if os.path.exists(b)),
        None)
    if binary is None:
        sys.exit("no floodgate binary: cargo build --release -p floodgate, or --bin PATH")
    tmp = tempfile.mkdtemp(prefix="fg-bench-quota-")
    prefix = f"fg-bench-quota-{os.getpid()}:"
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    upstream = backend.server_address[1]
    grpc = free_port()
    rules = os.path.join(tmp, "limits.yaml")
    with open(rules, "w") as f:
        f.write("quota:\n  domains:\n    - domain: bench\n      buckets:\n"
                f"        - match: {{policy: api}}\n          rate: {LIMIT}/s\n"
                "          report_interval: 500ms\n          assignment_ttl: 2s\n")
    server = subprocess.Popen(
        [binary, "server", "--config", rules, "--grpc", f"127.0.0.1:{grpc}",
         "--http", "off", "--resp", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(grpc, server, "floodgate server")
        base = result(load(binary, upstream, DEMAND_BUSY, seconds, 4))
        print(f"binary {binary}; {seconds} s per run; limit {LIMIT}/s; demand "
              f"{DEMAND_BUSY:.0f}/s on proxy 1, {DEMAND_REST:.0f}/s over the others; "
              f"backend direct p50 {base['p50']:.2f} ms, p99 {base['p99']:.2f} ms\n")
        print("| N | strategy | admitted/s (limit 100) | busy proxy's share | per proxy admitted "
              "| added p50 | added p99 |")
        print("|---|---|---|---|---|---|---|")
        for n in (3, 10):
            for strategy in ("local", "shared", "quota"):
                rs = run(binary, strategy, n, seconds, upstream, grpc, tmp, prefix)
                total = sum(r["admitted"] for r in rs)
                span = max(r["elapsed"] for r in rs)
                busy = rs[0]
                per = ", ".join(str(r["admitted"]) for r in rs)
                print(f"| {n} | {strategy} | {total / span:.1f} | "
                      f"{100.0 * busy['admitted'] / max(total, 1):.0f}% | {per} | "
                      f"{busy['p50'] - base['p50']:+.2f} ms | {busy['p99'] - base['p99']:+.2f} ms |",
                      flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
        backend.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        if shutil.which("redis-cli"):
            keys = subprocess.run(["redis-cli", "-p", "6379", "--scan", "--pattern", prefix + "*"],
                                  capture_output=True, text=True).stdout.split()
            for k in keys:
                subprocess.run(["redis-cli", "-p", "6379", "del", k], capture_output=True)


if __name__ == "__main__":
    main()
