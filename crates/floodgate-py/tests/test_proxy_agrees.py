"""The ASGI middleware answers as `floodgate proxy` does: one request sequence, sent to a
Starlette app under uvicorn behind floodgate.asgi.RateLimitMiddleware and to a real
`floodgate proxy` process in front of the same app (no middleware), both configured with
the same policies and routes (the proxy from TOML) and a Retry-After jitter of 0, gives the
same statuses, the same RateLimit, RateLimit-Policy, Retry-After, Content-Type and
Cache-Control fields and the same body bytes of every denial.

The proxy is the debug build of this workspace (`cargo build -p floodgate`,
target/debug/floodgate; $FLOODGATE_BIN names another); without it the test is skipped
with that command in the reason."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route as StarletteRoute
from web_servers import REDIS_URL, free_port, redis_prefix, uvicorn_server

from floodgate import Policy, RedisStore, RequestLimiter, Route
from floodgate.asgi import RateLimitMiddleware

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(os.environ.get("FLOODGATE_BIN", ROOT / "target" / "debug" / "floodgate"))

# Every Retry-After and `t` here counts from a request of the same run (GCRA, token bucket,
# sliding log): a fixed window's would count to the next multiple of its width on the wall
# clock, and the two runs, a moment apart, could straddle a second.
COMPARED = ["ratelimit", "ratelimit-policy", "retry-after", "content-type", "cache-control",
            "x-ratelimit-delay-ms"]

POLICIES_TOML = """
[[policy]]
name = "per-ip"
algorithm = "gcra"
rate = "3/min"
burst = 2
key = "ip"

[[policy]]
name = "per-key"
algorithm = "sliding-log"
rate = "4/h"
capacity = 4
key = "header:x-api-key"

[[policy]]
name = "global"
algorithm = "token-bucket"
rate = "10/min"
capacity = 5
key = "global"

[[route]]
prefix = "/search"
policies = ["per-ip", "global"]
costs = { global = 2 }

[[route]]
prefix = "/api"
policies = ["per-key"]

[[route]]
prefix = "/heavy"
policies = ["per-ip"]
cost = 5
"""


def native_limiter(store):
    return RequestLimiter(
        [Policy("per-ip", "3/min", algorithm="gcra", burst=2, key="ip"),
         Policy("per-key", "4/h", algorithm="sliding-log", capacity=4, key="header:x-api-key"),
         Policy("global", "10/min", algorithm="token-bucket", capacity=5, key="global")],
        routes=[Route("/search", policies={"per-ip": 1, "global": 2}),
                Route("/api", policies={"per-key": 1}),
                Route("/heavy", policies={"per-ip": 5})],
        store=store, retry_after_jitter_s=0.0)


# (path, request headers): admitted, then denied by each policy, in both reply formats,
# a cost above the capacity, a missing header key, a path on no route
SEQUENCE = [
    ("/search", {}), ("/search", {}), ("/search", {"accept": "application/problem+json"}),
    ("/search", {}), ("/search", {"accept": "application/json"}),
    ("/api/a", {"x-api-key": "alice"}), ("/api/b", {"x-api-key": "alice"}),
    ("/api/c", {"x-api-key": "alice"}), ("/api/d", {"x-api-key": "alice"}),
    ("/api/e", {"x-api-key": "alice"}), ("/api/f", {"x-api-key": "alice",
                                                     "accept": "application/problem+json"}),
    ("/api/g", {"x-api-key": "bob"}), ("/api/h", {}),
    ("/heavy", {}), ("/elsewhere", {}),
]


def backend():
    async def ok(request):
        return PlainTextResponse("ok " + request.url.path)

    return Starlette(routes=[StarletteRoute("/{path:path}", ok)])


def wait_listening(port, deadline_s=30):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on 127.0.0.1:{port} after {deadline_s} s")


def proxy_config(tmp_path, upstream, listen, prefix):
    store = ""
    if prefix is not None:
        store = f'[store]\ntype = "redis"\n[store.redis]\nurl = "{REDIS_URL}"\nprefix = "{prefix}"\n'
    text = (f'listen = "127.0.0.1:{listen}"\nupstream = "{upstream}"\n'
            '[headers]\nretry_after_jitter = "0s"\n' + store + POLICIES_TOML)
    path = tmp_path / "floodgate.toml"
    path.write_text(text)
    return path


def run(base):
    out = []
    with httpx.Client(base_url=base) as c:
        for path, headers in SEQUENCE:
            r = c.get(path, headers=headers)
            body = r.content if r.status_code != 200 else b""
            out.append((path, r.status_code,
                        {h: r.headers.get(h) for h in COMPARED}, body))
    return out


@pytest.mark.parametrize("on_redis", [False, True], ids=["memory", "redis"])
def test_the_middleware_answers_as_the_proxy(tmp_path, on_redis):
    if not BIN.exists():
        pytest.skip(f"no {BIN}: build it with `cargo build -p floodgate`")
    with redis_prefix() as prefix_a, redis_prefix() as prefix_b:
        store = RedisStore(REDIS_URL, prefix=prefix_a) if on_redis else None
        app = backend()
        app.add_middleware(RateLimitMiddleware, limiter=native_limiter(store))
        with uvicorn_server(backend()) as upstream, uvicorn_server(app) as limited:
            listen = free_port()
            config = proxy_config(tmp_path, upstream, listen, prefix_b if on_redis else None)
            log = open(tmp_path / "proxy.log", "w+")
            proc = subprocess.Popen([str(BIN), "proxy", "--config", str(config)],
                                    stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_listening(listen)
                by_proxy = run(f"http://127.0.0.1:{listen}")
                by_middleware = run(limited)
            finally:
                proc.terminate()
                proc.wait(timeout=15)
                log.close()
    statuses = [s for _, s, _, _ in by_proxy]
    # the sequence exercises admissions, denials and the missing key
    assert {200, 429, 400} <= set(statuses), statuses
    for p, m in zip(by_proxy, by_middleware):
        assert m == p, f"\nproxy:      {p}\nmiddleware: {m}\n{(tmp_path / 'proxy.log').read_text()}"
