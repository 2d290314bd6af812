"""floodgate.wsgi.RateLimitMiddleware with real frameworks: Flask (its test client, and a
real werkzeug server on loopback driven by httpx) and Django's WSGI handler (its test
client; settings configured here, no project directory); in process and on the shared
Redis. Statuses, headers and bodies are asserted exactly from the ASGI tests' table."""

from __future__ import annotations

import logging

import flask
import httpx
import pytest
from test_asgi import CLIENT, MISSING_KEY, NO_PEER, TABLE, check_row, limiter, provided_limiter
from web_servers import REDIS_URL, redis_prefix, wsgi_server

from floodgate import RedisStore
from floodgate.wsgi import RateLimitMiddleware


def flask_app(lim, **kw):
    app = flask.Flask("floodgate-wsgi-test")

    @app.get("/limited")
    def limited():
        return flask.Response("limited", content_type="text/plain; charset=utf-8")

    @app.get("/free")
    def free():
        return "free"

    @app.get("/boom")
    def boom():
        raise RuntimeError("the application failed")

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=lim, **kw)
    return app


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        yield None
    else:
        with redis_prefix() as prefix:
            yield RedisStore(REDIS_URL, prefix=prefix)


def test_table_flask_test_client(store):
    c = flask_app(limiter(store)).test_client()
    for row in TABLE:
        r = c.get(row[0], headers=row[1], environ_base={"REMOTE_ADDR": CLIENT[0]})
        check_row(row, r.status_code, r.headers, r.data)


def test_table_flask_under_a_real_wsgi_server(store):
    with wsgi_server(flask_app(limiter(store))) as base, httpx.Client(base_url=base) as c:
        for row in TABLE:
            r = c.get(row[0], headers=row[1])
            check_row(row, r.status_code, r.headers, r.content)


def django_handler():
    import django_urls  # noqa: F401 - configures Django's settings

    from django.core.handlers.wsgi import WSGIHandler

    return WSGIHandler()


def test_table_django_wsgi_handler(store):
    handler = django_handler()
    wrapped = RateLimitMiddleware(handler, limiter=limiter(store))
    with wsgi_server(wrapped) as base, httpx.Client(base_url=base) as c:
        for row in TABLE:
            r = c.get(row[0], headers=row[1])
            check_row(row, r.status_code, r.headers, r.content)


def test_key_function_of_the_environ():
    c = flask_app(provided_limiter(),
                  key=lambda environ: environ.get("HTTP_X_API_KEY")).test_client()
    got = [c.get("/limited", headers={"x-api-key": "alice"}).status_code for _ in range(3)]
    assert got == [200, 200, 429]
    assert c.get("/limited", headers={"x-api-key": "bob"}).status_code == 200
    r = c.get("/limited")  # no header: the key function returns None
    assert (r.status_code, r.data) == (400, MISSING_KEY)


def test_key_function_raising_is_the_missing_key_outcome(caplog):
    c = flask_app(provided_limiter(), key=lambda environ: environ["HTTP_NOPE"]).test_client()
    with caplog.at_level(logging.WARNING, logger="floodgate"):
        r = c.get("/limited")
    assert (r.status_code, r.data) == (400, MISSING_KEY)
    assert "KeyError" in caplog.text


def test_no_remote_addr_gets_the_missing_key_outcome():
    c = flask_app(limiter()).test_client()
    r = c.get("/limited", environ_base={"REMOTE_ADDR": ""})
    assert (r.status_code, r.data) == (400, NO_PEER)


def test_an_application_error_is_the_applications_and_is_counted():
    from floodgate import Policy, RequestLimiter, Route

    lim = RequestLimiter([Policy("per-ip", "2/min", algorithm="gcra", burst=1, key="ip")],
                         routes=[Route("/boom", policies={"per-ip": 1})],
                         retry_after_jitter_s=0.0)
    c = flask_app(lim).test_client()
    got = [c.get("/boom", environ_base={"REMOTE_ADDR": CLIENT[0]}).status_code
           for _ in range(3)]
    assert got == [500, 500, 429]  # Flask's own error page, twice, both counted


def test_a_bad_limiter_is_a_clear_error():
    with pytest.raises(TypeError, match="limiter must be a floodgate.RequestLimiter, got dict"):
        RateLimitMiddleware(lambda e, s: [], limiter={})


def test_in_flight_leases_are_released_when_the_response_is_closed():
    from floodgate import Policy, RequestLimiter

    lim = RequestLimiter([Policy("one-at-once", max_in_flight=1, key="global")],
                         retry_after_jitter_s=0.0)
    c = flask_app(lim).test_client()
    # the test client closes a buffered response at once, an unbuffered one on close()
    first = c.get("/limited", buffered=False)
    assert first.status_code == 200
    assert c.get("/limited", buffered=True).status_code == 429  # the place is held
    first.close()
    assert [c.get("/limited", buffered=True).status_code for _ in range(3)] == [200, 200, 200]
    assert [c.get("/boom", buffered=True).status_code for _ in range(2)] == [500, 500]
    assert c.get("/limited", buffered=True).status_code == 200
    assert first is not None  # held until here: the place was freed by close(), not by GC


@pytest.mark.parametrize("cost, fields", [
    # 40 units each: the fields of the settled state, 100 -> 60 -> 20
    ("40", ['"tokens";r=61;t=60', '"tokens";r=21;t=60']),
    # no cost: the fields of the admission at the estimate (the abort cost, 1, is kept)
    ("not a number", ['"tokens";r=100;t=60', '"tokens";r=99;t=60']),
], ids=["settled", "malformed"])
def test_cost_settled_from_the_response_header(cost, fields):
    from floodgate import Policy, RequestLimiter, Route

    app = flask.Flask("floodgate-settle-test")

    @app.get("/v1/complete")
    def complete():
        return flask.Response("done", headers={"x-cost": cost})

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=RequestLimiter(
        [Policy("tokens", "100/min", algorithm="gcra", capacity=100)],
        routes=[Route("/v1/complete", policies={"tokens": 1}, estimate=1, cost_header="x-cost")],
        retry_after_jitter_s=0.0))
    c = app.test_client()
    got = [c.get("/v1/complete", environ_base={"REMOTE_ADDR": CLIENT[0]}) for _ in range(2)]
    assert [r.status_code for r in got] == [200, 200]
    assert [r.headers["ratelimit"] for r in got] == fields
    assert [r.headers.getlist("ratelimit") for r in got] == [[f] for f in fields]  # once each


def test_the_plain_wsgi_call_adds_the_verdicts_str_fields_or_nothing():
    # no framework: the start_response calls as the server sees them. A path no route
    # covers gets the application's own start_response call, untouched; a limited one
    # gets the verdict's fields (str pairs) after the application's; a request the
    # native limiter cannot read (a NUL in a header value) is a 400, not an exception
    calls = []

    def app(environ, start_response):
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"ok"]

    def start_response(status, headers, exc_info=None):
        calls.append((status, headers))

    mw = RateLimitMiddleware(app, limiter=limiter())
    env = {"REQUEST_METHOD": "GET", "REMOTE_ADDR": CLIENT[0], "HTTP_HOST": "test"}
    assert list(mw({**env, "PATH_INFO": "/free"}, start_response)) == [b"ok"]
    assert calls.pop() == ("200 OK", [("content-type", "text/plain")])
    body = mw({**env, "PATH_INFO": "/limited"}, start_response)
    assert list(body) == [b"ok"]
    body.close()
    status, headers = calls.pop()
    assert status == "200 OK" and headers[0] == ("content-type", "text/plain")
    names = [n for n, _ in headers[1:]]
    assert "ratelimit" in names and "ratelimit-policy" in names
    assert all(isinstance(n, str) and isinstance(v, str) for n, v in headers)
    bad = mw({**env, "PATH_INFO": "/limited", "HTTP_X_NOTE": "a\x00b"}, start_response)
    assert calls.pop()[0] == "400 Bad Request" and b"".join(bad).startswith(b"400 Bad Request")
