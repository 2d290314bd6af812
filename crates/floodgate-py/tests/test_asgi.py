"""floodgate.asgi.RateLimitMiddleware with real frameworks: Starlette and FastAPI, under a
real uvicorn on loopback driven by httpx, and through Starlette's TestClient; in process
and on the shared Redis (a prefix of the test's own). Statuses, headers and bodies are
asserted exactly, request by request, from one table."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route as StarletteRoute
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from web_servers import REDIS_URL, redis_prefix, uvicorn_server

from floodgate import Policy, RedisStore, RequestLimiter, Route
from floodgate.asgi import RateLimitMiddleware

PROBLEM = "application/problem+json"
CLIENT = ("203.0.113.7", 50000)

# One request per row: (path, request headers, status, body, headers the response carries
# (name -> exact value), header names it must not carry). A 2/min GCRA with capacity 2 on
# /limited, keyed by client address; /free is on no route. Retry-After is exact: the
# jitter is 0 and the rows run within a second.
DENIED_TEXT = b'429 Too Many Requests: rate limited by policy "per-ip"; retry after 30 s\n'
DENIED_JSON = (b'{"detail":"rate limited by policy \\"per-ip\\"; retry after 30 s",'
               b'"policy":"per-ip","retry_after":30,"status":429,'
               b'"title":"Too Many Requests","type":"about:blank"}')
POLICY_FIELD = '"per-ip";q=2;w=60;floodgate-capacity=2'
# RateLimit's r and t pace a client at the sustained rate (docs/ratelimit-fields.md): one
# request left per 30 s of the window, not the bucket's level
TABLE = [
    ("/limited", {}, 200, b"limited",
     {"ratelimit-policy": POLICY_FIELD, "ratelimit": '"per-ip";r=2;t=60',
      "content-type": "text/plain; charset=utf-8"}, ["retry-after"]),
    ("/limited", {}, 200, b"limited",
     {"ratelimit-policy": POLICY_FIELD, "ratelimit": '"per-ip";r=1;t=60'}, ["retry-after"]),
    ("/limited", {}, 429, DENIED_TEXT,
     {"ratelimit-policy": POLICY_FIELD, "ratelimit": '"per-ip";r=0;t=30',
      "retry-after": "30", "content-type": "text/plain; charset=utf-8",
      "cache-control": "no-store", "content-length": "73"}, []),
    ("/limited", {"accept": PROBLEM}, 429, DENIED_JSON,
     {"ratelimit-policy": POLICY_FIELD, "ratelimit": '"per-ip";r=0;t=30',
      "retry-after": "30", "content-type": PROBLEM, "cache-control": "no-store",
      "content-length": "161"}, []),
    ("/free", {}, 200, b"free", {}, ["ratelimit", "ratelimit-policy", "retry-after"]),
]


def limiter(store=None, **options):
    return RequestLimiter(
        [Policy("per-ip", "2/min", algorithm="gcra", burst=1, key="ip")],
        routes=[Route("/limited", policies={"per-ip": 1})],
        store=store, retry_after_jitter_s=0.0, **options)


def starlette_app(lim, **kw):
    async def limited(request):
        return PlainTextResponse("limited")

    async def free(request):
        return PlainTextResponse("free")

    async def ws(websocket):
        await websocket.accept()
        await websocket.send_text("hi")
        await websocket.close()

    app = Starlette(routes=[StarletteRoute("/limited", limited), StarletteRoute("/free", free),
                           WebSocketRoute("/limited/ws", ws)])
    app.add_middleware(RateLimitMiddleware, limiter=lim, **kw)
    return app


def fastapi_app(lim, **kw):
    app = FastAPI()

    @app.get("/limited", response_class=PlainTextResponse)
    async def limited():
        return "limited"

    @app.get("/free", response_class=PlainTextResponse)
    def free():  # a sync endpoint: FastAPI runs it in its thread pool
        return "free"

    app.add_middleware(RateLimitMiddleware, limiter=lim, **kw)
    return app


def check_row(row, status, headers, body):
    path, _, want_status, want_body, want_headers, absent = row
    assert (path, status, body) == (path, want_status, want_body)
    for name, value in want_headers.items():
        assert headers.get(name) == value, (path, name, dict(headers))
    for name in absent:
        assert name not in headers, (path, name, dict(headers))


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        yield None
    else:
        with redis_prefix() as prefix:
            yield RedisStore(REDIS_URL, prefix=prefix)


@pytest.mark.parametrize("make_app", [starlette_app, fastapi_app])
def test_table_under_uvicorn_with_httpx(make_app, store):
    with uvicorn_server(make_app(limiter(store))) as base, httpx.Client(base_url=base) as c:
        for row in TABLE:
            r = c.get(row[0], headers=row[1])
            check_row(row, r.status_code, r.headers, r.content)


@pytest.mark.parametrize("make_app", [starlette_app, fastapi_app])
def test_table_through_the_test_client(make_app, store):
    with TestClient(make_app(limiter(store)), client=CLIENT) as c:
        for row in TABLE:
            r = c.get(row[0], headers=row[1])
            check_row(row, r.status_code, r.headers, r.content)


def test_clients_have_keys_of_their_own():
    app = starlette_app(limiter())
    with TestClient(app, client=CLIENT) as a, TestClient(app, client=("198.51.100.2", 1)) as b:
        assert [a.get("/limited").status_code for _ in range(3)] == [200, 200, 429]
        assert b.get("/limited").status_code == 200


def test_trusted_proxy_forwarded_address_is_the_key():
    app = starlette_app(limiter(trusted_proxies=["127.0.0.1/32"]))
    with TestClient(app, client=("127.0.0.1", 1)) as c:
        first = {"x-forwarded-for": "192.0.2.10"}
        assert [c.get("/limited", headers=first).status_code for _ in range(3)] == [200, 200, 429]
        # another client behind the same proxy
        assert c.get("/limited", headers={"x-forwarded-for": "192.0.2.11"}).status_code == 200
    with TestClient(app, client=("198.51.100.9", 1)) as c:
        # not a trusted peer: its X-Forwarded-For is ignored, the peer is the key
        spoof = [c.get("/limited", headers={"x-forwarded-for": f"192.0.2.{i}"}).status_code
                 for i in range(20, 23)]
        assert spoof == [200, 200, 429]


def provided_limiter(**options):
    return RequestLimiter([Policy("per-key", "2/min", algorithm="gcra", burst=1, key="provided")],
                          retry_after_jitter_s=0.0, **options)


def api_key(scope):
    return dict(scope["headers"]).get(b"x-api-key")


def test_key_function_of_the_scope():
    app = starlette_app(provided_limiter(), key=api_key)
    with TestClient(app, client=CLIENT) as c:
        alice = [c.get("/limited", headers={"x-api-key": "alice"}) for _ in range(3)]
        assert [r.status_code for r in alice] == [200, 200, 429]
        assert alice[2].headers["ratelimit-policy"] == '"per-key";q=2;w=60;floodgate-capacity=2'
        assert c.get("/limited", headers={"x-api-key": "bob"}).status_code == 200


MISSING_KEY = (b'400 Bad Request: no rate-limit key: custom key extractor: no key provided '
               b'for policy "per-key"\n')


HUGE_KEY = b"400 Bad Request: no rate-limit key: key of 300 bytes is longer than the maximum of 256\n"


@pytest.mark.parametrize("key, body", [
    (lambda scope: 1 / 0, MISSING_KEY),      # the key function raises
    (api_key, MISSING_KEY),                  # it returns None: no such header
    (lambda scope: 42, MISSING_KEY),         # not a str or bytes
    (lambda scope: "k" * 300, HUGE_KEY),     # longer than 256 bytes
], ids=["raises", "none", "not-a-string", "huge"])
def test_key_function_without_a_key_gets_the_missing_key_outcome(key, body):
    app = starlette_app(provided_limiter(), key=key)
    with TestClient(app, client=CLIENT) as c:
        r = c.get("/limited")
    assert (r.status_code, r.content) == (400, body)
    assert r.headers["content-type"] == "text/plain; charset=utf-8"


def test_key_function_failures_are_logged(caplog):
    app = starlette_app(provided_limiter(), key=lambda scope: 1 / 0)
    with caplog.at_level(logging.WARNING, logger="floodgate"), TestClient(app, client=CLIENT) as c:
        c.get("/limited")
    assert "the key function raised" in caplog.text
    assert "ZeroDivisionError" in caplog.text


def test_missing_key_allow_lets_the_request_through():
    app = starlette_app(provided_limiter(missing_key="allow"), key=lambda scope: None)
    with TestClient(app, client=CLIENT) as c:
        assert [c.get("/limited").status_code for _ in range(4)] == [200] * 4


async def call(app, scope):
    """Calls an ASGI app with `scope` and an empty body; returns the sent messages."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def scope(headers=(), client=None, path="/limited"):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": list(headers), "client": client, "server": ("127.0.0.1", 80)}


NO_PEER = (b"400 Bad Request: no rate-limit key: no peer address on the request (the server "
           b"gave no client address: pass client= to RequestLimiter.decide, key the policy by "
           b"\"header:NAME\" or \"provided\", or set missing_key=\"allow\" or \"fallback\")\n")


def test_no_client_address_gets_the_missing_key_outcome():
    app = starlette_app(limiter())
    sent = asyncio.run(call(app, scope(client=None)))
    assert sent[0]["status"] == 400
    assert sent[1]["body"] == NO_PEER


@pytest.mark.parametrize("headers", [
    [(b"x-forwarded-for", b"\xff\xfe not an address")],
    [(b"x-forwarded-for", b"1.2.3.4, , ,,")],
    [(b"accept", b"\x00\x01"), (b"x-api-key", b"\xff" * 10_000)],
], ids=["xff-bytes", "xff-empty-hops", "odd-bytes"])
def test_bad_header_bytes_are_decided_never_a_500(headers):
    app = starlette_app(limiter(trusted_proxies=["127.0.0.1/32"]))
    statuses = [asyncio.run(call(app, scope(headers, ("127.0.0.1", 1))))[0]["status"]
                for _ in range(3)]
    assert statuses[0] in (200, 400) and 500 not in statuses, statuses


def test_lifespan_and_websocket_pass_through():
    started = []

    @contextlib.asynccontextmanager
    async def lifespan(app):
        started.append(True)
        yield

    async def ws(websocket):
        await websocket.accept()
        await websocket.send_text("hi")
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute("/limited/ws", ws)], lifespan=lifespan)
    app.add_middleware(RateLimitMiddleware, limiter=limiter())
    with TestClient(app, client=CLIENT) as c:
        assert started == [True]
        for _ in range(5):  # beyond the limit: websockets are not limited
            with c.websocket_connect("/limited/ws") as w:
                assert w.receive_text() == "hi"


def test_an_application_error_is_the_applications_and_releases_the_verdict():
    async def boom(request):
        raise RuntimeError("the application failed")

    app = Starlette(routes=[StarletteRoute("/limited", boom)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter())
    with TestClient(app, client=CLIENT, raise_server_exceptions=False) as c:
        r = c.get("/limited")
        assert r.status_code == 500  # Starlette's own error page for the app's exception
        assert c.get("/limited").status_code == 500
        assert c.get("/limited").status_code == 429  # both failed requests were counted


@pytest.mark.parametrize("bad, message", [
    ("not a limiter", "limiter must be a floodgate.RequestLimiter, got str"),
    (None, "limiter must be a floodgate.RequestLimiter, got NoneType"),
])
def test_a_bad_limiter_is_a_clear_error(bad, message):
    with pytest.raises(TypeError, match=message):
        RateLimitMiddleware(lambda *a: None, limiter=bad)


def test_a_bad_key_function_is_a_clear_error():
    with pytest.raises(TypeError, match="key must be a function of the request"):
        RateLimitMiddleware(lambda *a: None, limiter=limiter(), key="x-api-key")


def test_in_flight_leases_are_held_while_the_application_runs_and_released_after():
    nested = []
    lim = RequestLimiter([Policy("one-at-once", max_in_flight=1, key="global")],
                         retry_after_jitter_s=0.0)

    async def outer(request):
        # a second request while this one holds the only place
        sent = await call(app, scope(path="/inner", client=("198.51.100.1", 1)))
        nested.append(sent[0]["status"])
        return PlainTextResponse("outer")

    async def boom(request):
        raise RuntimeError("the application failed")

    app = Starlette(routes=[StarletteRoute("/outer", outer), StarletteRoute("/boom", boom),
                            StarletteRoute("/inner", outer)])
    app = RateLimitMiddleware(app, limiter=lim)
    with TestClient(app, client=CLIENT, raise_server_exceptions=False) as c:
        assert c.get("/outer").status_code == 200
        assert nested == [429]  # the place was held
        assert c.get("/boom").status_code == 500
        assert c.get("/boom").status_code == 500  # released when the application raised
        assert c.get("/outer").status_code == 200  # and when it answered
