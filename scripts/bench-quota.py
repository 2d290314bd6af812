#!/usr/bin/env python3
"""The fleet strategies `quota`, `shared` and `local` of floodgate proxy side by side, on
loopback: N proxies (3, then 10) in front of one backend, one policy of 100/s on one key,
skewed demand at twice the limit (160/s, 80 % of it, on one proxy; 40/s spread over the
others), then the hot spot moving: after --seconds the 160/s go to the second proxy and
the first gets the quiet share.

Per run, from the wall-clock timeline of every `floodgate load` (open loop, 1 s buckets):

* the fleet's admitted requests over every 10 s span (1 s steps) after the first report
  interval, against the limit over the span: the most (the target: at most 5 % over)
  and the least (the share of the limit used while demand exceeds it; the target: at
  least 90 %), and the least over the spans holding the move;
* round trips per request: `shared`, the commands its own Redis (started by this script)
  processed per request sent; `quota`, the usage reports the quota server received per
  request (`floodgate_quota_reports_total`), and the assignments it pushed unasked
  (`floodgate_quota_pushes_total`); `local` has no store;
* the latency the busy proxy adds (p50/p99 of its requests less the same load sent to the
  backend directly), in the first phase.

  python3 scripts/bench-quota.py [--bin target/release/floodgate] [--seconds 20]

Bounded: 6 runs of 2 x --seconds each (at most 60), plus start-up. Needs redis-server on
PATH for `shared` (a throwaway instance on a free port, removed at the end). Prints a
Markdown table.
"""

import argparse
import collections
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

LIMIT = 100
DEMAND = 2 * LIMIT
HOT = 0.8
SPAN = 10
REPORT_INTERVAL = "500ms"
# spans start after the first whole second past the first report interval
SKIP_S = 2


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
    """A `floodgate load` process: open loop at `rate` for `seconds`, 1 s buckets."""
    return subprocess.Popen(
        [binary, "load", f"http://127.0.0.1:{port}/", "-z", f"{seconds}s", "-q", f"{rate:.3f}",
         "-c", str(conc), "-t", "5s", "-H", "x-api-key: tenant-1", "--bucket", "1s",
         "--json", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def result(proc):
    out, _ = proc.communicate(timeout=180)
    d = json.loads(out)
    lat = d["latency"]["all"]
    return {
        "sent": d["requests"],
        "admitted": d["statuses"].get("200", 0),
        "p50": lat["p50_ms"],
        "p99": lat["p99_ms"],
        "timeline": [(round(b["start_unix_s"]), b["admitted"])
                     for b in d["timeline"]["buckets"]],
    }


def metric(port, name):
    """The sum of a counter's samples on a server's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(rf"{name}(_total)?(\{{| )", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def redis_commands(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "stats"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"total_commands_processed:(\d+)", out)
    return int(m.group(1))


def proxy_config(strategy, i, listens, upstream, grpc, redis_port):
    n = len(listens)
    nodes = ", ".join(f'"127.0.0.1:{p}"' for p in listens)
    me = f"127.0.0.1:{listens[i]}"
    head = (f'listen = "{me}"\nupstream = "http://127.0.0.1:{upstream}"\n'
            '[deny]\nretry_after_jitter = "0s"\n')
    if strategy == "shared":
        head += (f'[store]\ntype = "redis"\n[store.redis]\n'
                 f'url = "redis://127.0.0.1:{redis_port}/"\n')
    policy = ('[[policy]]\nname = "api"\nalgorithm = "gcra"\n'
              f'rate = "{LIMIT}/s"\nkey = "header:x-api-key"\n')
    if strategy == "quota":
        fleet = (f'[fleet]\nstrategy = "quota"\nquota_server = "http://127.0.0.1:{grpc}"\n'
                 f'quota_domain = "bench"\nreport_interval = "{REPORT_INTERVAL}"\n'
                 f'no_assignment = "local_share"\nnodes = {n}\n')
    else:
        fleet = f'[fleet]\nstrategy = "{strategy}"\nnodes = [{nodes}]\nself = "{me}"\n'
    return head + policy + fleet


def rates(n, hot):
    quiet = DEMAND * (1 - HOT) / (n - 1)
    return [DEMAND * HOT if i == hot else quiet for i in range(n)]


def run(binary, strategy, n, seconds, upstream, grpc, tmp, redis_port, server_http):
    listens = [free_port() for _ in range(n)]
    procs = []
    try:
        for i in range(n):
            cfg = os.path.join(tmp, f"{strategy}-{n}-{i}.toml")
            with open(cfg, "w") as f:
                f.write(proxy_config(strategy, i, listens, upstream, grpc, redis_port))
            procs.append(subprocess.Popen(
                [binary, "proxy", "--threads", "1", "--config", cfg],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "FLOODGATE_LOG": "warn"}))
        for p, port in zip(procs, listens):
            wait_port(port, p, "floodgate proxy")
        time.sleep(1)  # every proxy started (and, under quota, connected to the server)
        before = {}
        if strategy == "shared":
            before["redis"] = redis_commands(redis_port)
        if strategy == "quota":
            before["reports"] = metric(server_http, "floodgate_quota_reports")
            before["pushes"] = metric(server_http, "floodgate_quota_pushes")
        t0 = time.time()
        first = [load(binary, port, r, seconds, 4 if r > LIMIT / 2 else 2)
                 for port, r in zip(listens, rates(n, 0))]
        time.sleep(max(0.0, t0 + seconds - time.time()))
        second = [load(binary, port, r, seconds, 4 if r > LIMIT / 2 else 2)
                  for port, r in zip(listens, rates(n, 1))]
        rs1 = [result(p) for p in first]
        rs2 = [result(p) for p in second]
        trips = {}
        if strategy == "shared":
            trips["redis"] = redis_commands(redis_port) - before["redis"]
        if strategy == "quota":
            trips["reports"] = metric(server_http, "floodgate_quota_reports") - before["reports"]
            trips["pushes"] = metric(server_http, "floodgate_quota_pushes") - before["pushes"]
        return t0, rs1, rs2, trips
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def spans(t0, seconds, results):
    """Admitted per wall-clock second over every load process, and the 10 s spans:
    (the sums of every span from t0 + SKIP_S, those of the spans holding the move)."""
    per_s = collections.Counter()
    for r in results:
        for sec, admitted in r["timeline"]:
            per_s[sec] += admitted
    start = int(t0) + SKIP_S
    end = int(t0 + 2 * seconds)  # the last whole second
    move = t0 + seconds
    all_spans, moving = [], []
    for a in range(start, end - SPAN + 1):
        s = sum(per_s[x] for x in range(a, a + SPAN))
        all_spans.append(s)
        if a <= move < a + SPAN:
            moving.append(s)
    total = sum(per_s[x] for x in range(start, end))
    return all_spans, moving, total / max(1, end - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=None)
    ap.add_argument("--seconds", type=int, default=20, help="each phase (hot spot) [20]")
    ap.add_argument("--n", type=int, action="append", help="fleet sizes [3, 10]")
    args = ap.parse_args()
    seconds = max(SPAN + SKIP_S, min(args.seconds, 60))
    sizes = args.n or [3, 10]
    if any(n < 2 for n in sizes):
        sys.exit("--n: a fleet of at least 2 proxies")
    binary = args.bin or next(
        (b for b in ("target/release/floodgate", "target/debug/floodgate") if os.path.exists(b)),
        None)
    if binary is None:
        sys.exit("no floodgate binary: cargo build --release -p floodgate, or --bin PATH")
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        sys.exit("redis-server and redis-cli are needed on PATH (the shared runs)")
    tmp = tempfile.mkdtemp(prefix="fg-bench-quota-")
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    upstream = backend.server_address[1]
    grpc, server_http, redis_port = free_port(), free_port(), free_port()
    rules = os.path.join(tmp, "limits.yaml")
    with open(rules, "w") as f:
        f.write("quota:\n  domains:\n    - domain: bench\n      buckets:\n"
                f"        - match: {{policy: api}}\n          rate: {LIMIT}/s\n"
                f"          report_interval: {REPORT_INTERVAL}\n          assignment_ttl: 2s\n")
    server = subprocess.Popen(
        [binary, "server", "--config", rules, "--grpc", f"127.0.0.1:{grpc}",
         "--http", f"127.0.0.1:{server_http}", "--resp", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(grpc, server, "floodgate server")
        wait_port(redis_port, redis, "redis-server")
        base = result(load(binary, upstream, DEMAND * HOT, min(seconds, 5), 4))
        print(f"binary {binary}; limit {LIMIT}/s; demand {DEMAND}/s, {HOT:.0%} on one proxy, "
              f"the rest spread; the hot spot moves to another proxy after {seconds} s "
              f"({2 * seconds} s per run); {SPAN} s spans from {SKIP_S} s on; backend direct "
              f"p50 {base['p50']:.2f} ms, p99 {base['p99']:.2f} ms\n")
        print("| N | strategy | admitted/s | most in a 10 s span | least in a 10 s span "
              "| least, spans holding the move | hot proxy's share (1st, 2nd phase) "
              "| round trips per request | added p50, p99 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            for strategy in ("quota", "shared", "local"):
                t0, rs1, rs2, trips = run(binary, strategy, n, seconds, upstream, grpc, tmp,
                                          redis_port, server_http)
                all_spans, moving, per_s = spans(t0, seconds, rs1 + rs2)
                cap = LIMIT * SPAN
                sent = sum(r["sent"] for r in rs1 + rs2)
                hot1 = rs1[0]["admitted"] / max(1, sum(r["admitted"] for r in rs1))
                hot2 = rs2[1]["admitted"] / max(1, sum(r["admitted"] for r in rs2))
                if strategy == "shared":
                    rt = f"{trips['redis'] / max(1, sent):.2f} (Redis commands)"
                elif strategy == "quota":
                    rt = (f"{trips['reports'] / max(1, sent):.3f} (+ {trips['pushes'] / max(1, sent):.3f}"
                          " pushed)")
                else:
                    rt = "0 (no store)"
                busy = rs1[0]
                print(f"| {n} | {strategy} | {per_s:.1f} | {100 * max(all_spans) / cap:.1f}% "
                      f"| {100 * min(all_spans) / cap:.1f}% | {100 * min(moving) / cap:.1f}% "
                      f"| {100 * hot1:.0f}%, {100 * hot2:.0f}% | {rt} "
                      f"| {busy['p50'] - base['p50']:+.2f}, {busy['p99'] - base['p99']:+.2f} ms |",
                      flush=True)
    finally:
        server.terminate()
        redis.terminate()
        server.wait(timeout=10)
        redis.wait(timeout=10)
        backend.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
