"""floodgate.decorators.RateLimiter's `limit()` on real framework endpoints: Starlette and
FastAPI (async and sync endpoints, under uvicorn with httpx and through TestClient), Flask
views (its test client) and Django views (its test client, sync and async); the rate
strings slowapi and Flask-Limiter users write; in process and on the shared Redis."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route as StarletteRoute
from starlette.testclient import TestClient
from web_servers import REDIS_URL, redis_prefix, uvicorn_server

from floodgate import ConfigError, RedisStore
from floodgate.decorators import RateLimiter, split_limits

CLIENT = ("203.0.113.7", 50000)


def denied_text(policy, retry):
    return (f'429 Too Many Requests: rate limited by policy "{policy}"; '
            f"retry after {retry} s\n").encode()


def check_sequence(responses, policy, bodies):
    """Two admitted (with the RateLimit fields of a 2/min policy), then the exact denial."""
    assert [r.status_code for r in responses] == [200, 200, 429], [
        (r.status_code, r.content) for r in responses]
    assert [r.content for r in responses[:2]] == bodies
    # the rate's whole count at once (capacity 2), then one per 30 s; r and t pace a client
    # at that rate (docs/ratelimit-fields.md)
    for r, field in zip(responses, ("r=2;t=60", "r=1;t=60", "r=0;t=30")):
        assert r.headers["ratelimit-policy"] == f'"{policy}";q=2;w=60;floodgate-capacity=2', dict(
            r.headers)
        assert r.headers["ratelimit"] == f'"{policy}";{field}', dict(r.headers)
    denied = responses[2]
    assert denied.content == denied_text(policy, 30)
    assert denied.headers["retry-after"] == "30"
    assert denied.headers["content-type"] == "text/plain; charset=utf-8"
    assert denied.headers["cache-control"] == "no-store"
    assert denied.headers["content-length"] == str(len(denied.content))


@pytest.fixture(params=["memory", "redis"])
def limiter(request):
    if request.param == "memory":
        yield RateLimiter(retry_after_jitter_s=0.0)
    else:
        with redis_prefix() as prefix:
            yield RateLimiter(retry_after_jitter_s=0.0, store=RedisStore(REDIS_URL, prefix=prefix))


def starlette_app(limiter):
    @limiter.limit("2/minute")
    async def async_endpoint(request):
        return PlainTextResponse("async")

    @limiter.limit("2 per minute")
    def sync_endpoint(request):
        return PlainTextResponse("sync")

    return Starlette(routes=[StarletteRoute("/async", async_endpoint),
                             StarletteRoute("/sync", sync_endpoint)])


def fastapi_app(limiter):
    app = FastAPI()

    @app.get("/async")
    @limiter.limit("2/minute")
    async def async_endpoint(q: str = "x"):
        return {"q": q}  # not a Response: the headers go on FastAPI's response

    @app.get("/sync")
    @limiter.limit("2/minute")
    def sync_endpoint(request: Request):
        return JSONResponse({"path": request.url.path})

    return app


@pytest.mark.parametrize("make_app, bodies", [
    (starlette_app, {"/async": [b"async"] * 2, "/sync": [b"sync"] * 2}),
    (fastapi_app, {"/async": [b'{"q":"x"}'] * 2, "/sync": [b'{"path":"/sync"}'] * 2}),
], ids=["starlette", "fastapi"])
def test_starlette_and_fastapi_endpoints(make_app, bodies, limiter):
    app = make_app(limiter)
    with TestClient(app, client=CLIENT) as c:
        for path, policy in (("/async", "async_endpoint"), ("/sync", "sync_endpoint")):
            check_sequence([c.get(path) for _ in range(3)], policy, bodies[path])


def test_fastapi_under_uvicorn(limiter):
    with uvicorn_server(fastapi_app(limiter)) as base, httpx.Client(base_url=base) as c:
        check_sequence([c.get("/async") for _ in range(3)], "async_endpoint", [b'{"q":"x"}'] * 2)
        check_sequence([c.get("/sync") for _ in range(3)], "sync_endpoint",
                       [b'{"path":"/sync"}'] * 2)


def test_fastapi_keeps_the_endpoint_parameters(limiter):
    app = fastapi_app(limiter)
    with TestClient(app, client=CLIENT) as c:
        assert c.get("/async", params={"q": "hello"}).json() == {"q": "hello"}
        spec = c.get("/openapi.json").json()
        params = [p["name"] for p in spec["paths"]["/async"]["get"]["parameters"]]
        assert params == ["q"]  # the injected request/response are not query parameters


def test_key_cost_and_several_rates():
    limiter = RateLimiter(retry_after_jitter_s=0.0)

    @limiter.limit("4/minute", key=lambda request: request.headers.get("x-api-key"), cost=2)
    async def by_key(request):
        return PlainTextResponse("ok")

    @limiter.limit("5/minute; 2/hour", name="both")
    async def two_rates(request):
        return PlainTextResponse("ok")

    app = Starlette(routes=[StarletteRoute("/key", by_key), StarletteRoute("/both", two_rates)])
    with TestClient(app, client=CLIENT) as c:
        alice = [c.get("/key", headers={"x-api-key": "alice"}).status_code for _ in range(3)]
        assert alice == [200, 200, 429]  # cost 2 of 4
        assert c.get("/key", headers={"x-api-key": "bob"}).status_code == 200
        r = c.get("/key")  # no key: the missing-key outcome
        assert (r.status_code, r.content) == (400, b"400 Bad Request: no rate-limit key: custom "
                                              b'key extractor: no key provided for policy "by_key"\n')
        both = [c.get("/both") for _ in range(3)]
        assert [r.status_code for r in both] == [200, 200, 429]
        assert both[0].headers["ratelimit-policy"] == (
            '"both";q=5;w=60;floodgate-capacity=5, "both-2";q=2;w=3600;floodgate-capacity=2')
        assert b'policy "both-2"' in both[2].content


def test_flask_views(limiter):
    import flask

    app = flask.Flask("floodgate-decorator-test")

    @app.get("/view")
    @limiter.limit("2 per minute", name="flask-view")
    def view():
        return "view"  # a str: the decorator makes the response to add its headers

    @app.get("/keyed")
    @limiter.limit("2/minute", key=lambda request: request.headers.get("x-api-key"))
    def keyed():
        return flask.jsonify(ok=True)

    c = app.test_client()
    env = {"REMOTE_ADDR": CLIENT[0]}
    got = [c.get("/view", environ_base=env) for _ in range(3)]
    check_sequence([_Flat(r) for r in got], "flask-view", [b"view"] * 2)
    keyed_got = [c.get("/keyed", headers={"x-api-key": "k"}).status_code for _ in range(3)]
    assert keyed_got == [200, 200, 429]


class _Flat:
    """A werkzeug test response seen as httpx's (status_code, content, headers)."""

    def __init__(self, r):
        self.status_code, self.content = r.status_code, r.data
        self.headers = {k.lower(): v for k, v in r.headers.items()}


def test_django_views():
    import django_urls  # noqa: F401 - configures Django and its views
    from django.test import Client

    c = Client(REMOTE_ADDR=CLIENT[0])
    check_sequence([_Django(c.get("/decorated")) for _ in range(3)], "django-sync",
                   [b"decorated"] * 2)
    check_sequence([_Django(c.get("/decorated-async")) for _ in range(3)], "django-async",
                   [b'{"ok": true}'] * 2)
    keyed = [c.get("/keyed", headers={"x-api-key": "k"}).status_code for _ in range(3)]
    assert keyed == [200, 200, 429]


class _Django:
    def __init__(self, r):
        self.status_code, self.content = r.status_code, r.content
        self.headers = {k.lower(): v for k, v in r.headers.items()}


@pytest.mark.parametrize("text, parts", [
    ("10/minute", ["10/minute"]),
    ("100 per hour", ["100 per hour"]),
    ("5/s; 100/hour", ["5/s", "100/hour"]),
    ("5/s,100/hour", ["5/s", "100/hour"]),
])
def test_rate_strings_split(text, parts):
    assert split_limits(text) == parts


@pytest.mark.parametrize("notation", ["10/minute", "100 per hour", "5/s", "10/min", "1/day"])
def test_rate_notations_are_taken(notation):
    RateLimiter().limit(notation)(lambda request: None)


@pytest.mark.parametrize("bad, exc, message", [
    ("", ValueError, "no rate in ''"),
    (";", ValueError, "no rate in ';'"),
    (10, TypeError, "expected a rate string"),
    ("10/fortnight", ConfigError, "fortnight"),
    ("many/minute", ConfigError, "many/minute"),
])
def test_bad_rate_strings_are_clear_errors(bad, exc, message):
    with pytest.raises(exc, match=message):
        RateLimiter().limit(bad)(lambda request: None)


@pytest.mark.parametrize("kwargs, message", [
    ({"cost": -1}, "cost must be a whole number >= 0, got -1"),
    ({"cost": 1.5}, "cost must be a whole number >= 0, got 1.5"),
    ({"key": 3}, "key must be a function of the request"),
])
def test_bad_limit_arguments_are_clear_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        RateLimiter().limit("1/s", **kwargs)


def test_an_endpoint_without_a_request_is_a_clear_error():
    @RateLimiter().limit("1/s")
    def orphan():
        return None

    with pytest.raises(TypeError, match="a limited endpoint found no request"):
        orphan()
