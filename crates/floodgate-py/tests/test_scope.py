"""RequestLimiter.decide_scope: a request read from an ASGI scope in one call decides as
`decide` does with the parts the middleware reads from the scope; the header fields come
back as a list when the request passes at once holding nothing, else the Verdict. In
process and on the shared Redis (a prefix of the test's own)."""

import asyncio
import contextlib

import pytest
from web_servers import REDIS_URL, redis_prefix

from floodgate import Policy, RedisStore, RequestLimiter, Route, Verdict
from floodgate.asgi import request_parts


def twin_limiters(store_of=lambda: None):
    """Two limiters with the same policies and state: one decides scopes, one parts."""
    def make():
        return RequestLimiter(
            [Policy("per-ip", "100/min", algorithm="gcra", capacity=100, key="ip"),
             Policy("per-key", "50/min", algorithm="gcra", capacity=50, key="header:x-api-key"),
             Policy("odd", "40/min", algorithm="gcra", capacity=40, key="global")],
            routes=[Route("/api", policies={"per-ip": 1, "per-key": 2}),
                    Route("/caf\u00e9", policies={"odd": 3})],
            missing_key="allow", store=store_of())
    return make(), make()


SCOPES = [
    # raw_path wins over path; its query is not read
    {"type": "http", "method": "GET", "path": "/elsewhere", "raw_path": b"/api/x?q=1",
     "headers": [(b"host", b"a"), (b"x-api-key", b"k1")], "client": ("127.0.0.1", 5555)},
    # no raw_path: the decoded path, percent-encoded for the route match
    {"type": "http", "method": "POST", "path": "/caf\u00e9", "headers": [],
     "client": ("127.0.0.2", 1)},
    {"type": "http", "method": "GET", "path": "/caf\u00e9", "raw_path": b"",
     "client": ["::1", 2]},
    # no path at all: "/" (no route: nothing to add)
    {"type": "http", "method": "GET", "headers": [(b"x-api-key", b"k2")]},
    # no client: the ip policy is skipped (missing_key="allow"), the header one counts
    {"type": "http", "method": "GET", "raw_path": b"/api", "client": None,
     "headers": [(b"x-api-key", b"k1")]},
    {"type": "http", "method": "GET", "raw_path": b"/api", "client": ("", 0),
     "headers": [(b"x-api-key", b"k1"), (b"x-api-key", b"k2")]},
]


def test_decide_scope_reads_the_scope_as_the_middleware_reads_its_parts():
    by_scope, by_parts = twin_limiters()
    for scope in SCOPES * 2:
        fields = by_scope.decide_scope(scope)
        verdict = by_parts.decide(*request_parts(scope))
        assert type(fields) is list, (scope, fields)
        assert fields == verdict.header_bytes, scope
        verdict.finish()
    assert counters(by_scope) == counters(by_parts)


def counters(lim):
    """The limiter's counters (lines in no set order; durations differ)."""
    return sorted(line for line in lim.metrics().splitlines() if line.endswith(tuple("0123456789"))
                  and "_total{" in line)


def test_a_verdict_when_denied_delayed_or_holding_something():
    lim = RequestLimiter(
        [Policy("tight", "1/min", algorithm="gcra", capacity=1, key="global"),
         Policy("queue", "1/s", algorithm="leaky-queue", burst=5, key="global"),
         Policy("one", max_in_flight=1, key="global"),
         Policy("tokens", "100/min", algorithm="gcra", capacity=100, key="global")],
        routes=[Route("/tight", policies=["tight"]), Route("/queue", policies=["queue"]),
                Route("/one", policies=["one"]),
                Route("/llm", policies=["tokens"], estimate=10)],
        retry_after_jitter_s=0)

    def scope(path):
        return {"type": "http", "method": "GET", "raw_path": path.encode(), "headers": [],
                "client": ("127.0.0.1", 1)}

    assert type(lim.decide_scope(scope("/tight"))) is list
    denied = lim.decide_scope(scope("/tight"))
    assert isinstance(denied, Verdict) and not denied.allowed
    assert denied.response[0] == 429
    assert type(lim.decide_scope(scope("/queue"))) is list
    delayed = lim.decide_scope(scope("/queue"))
    assert isinstance(delayed, Verdict) and delayed.allowed and delayed.delay_s > 0
    leased = lim.decide_scope(scope("/one"))
    assert isinstance(leased, Verdict) and leased.allowed
    assert not lim.decide_scope(scope("/one")).allowed  # the lease is held
    leased.finish()
    again = lim.decide_scope(scope("/one"))
    assert isinstance(again, Verdict) and again.allowed
    again.finish()
    reserved = lim.decide_scope(scope("/llm"))
    assert isinstance(reserved, Verdict) and reserved.allowed
    assert reserved.headers == RequestLimiter(
        [Policy("tokens", "100/min", algorithm="gcra", capacity=100, key="global")],
        routes=[Route("/llm", policies=["tokens"], estimate=10)]).decide("GET", "/llm").headers
    reserved.finish()
    assert lim.decide_scope(scope("/nowhere")) == []


@pytest.mark.parametrize("scope, error, message", [
    ([("method", "GET")], TypeError, "scope must be a dict"),
    ({"type": "http", "path": "/"}, TypeError, "no method"),
    ({"type": "http", "method": b"GET", "path": "/"}, TypeError, "method must be a str"),
    ({"type": "http", "method": "GET", "raw_path": "/x"}, TypeError, "raw_path must be bytes"),
    ({"type": "http", "method": "GET", "path": 7}, TypeError, "path must be str or bytes"),
    ({"type": "http", "method": "G T", "path": "/"}, ValueError, "not an HTTP method"),
    ({"type": "http", "method": "GET", "path": "x"}, ValueError, "must start with /"),
    ({"type": "http", "method": "GET", "path": "/", "client": ("testclient", 50000)},
     ValueError, "is not an IP address"),
    ({"type": "http", "method": "GET", "path": "/", "headers": [(b"bad name", b"v")]},
     ValueError, "header name .* is not valid"),
])
def test_a_scope_of_another_shape_or_with_bad_content_is_a_clear_error(scope, error, message):
    lim = RequestLimiter([Policy("p", "10/s", key="global")])
    with pytest.raises(error, match=message):
        lim.decide_scope(scope)
    with pytest.raises(error, match=message):
        lim.decide_scope_async(scope)  # raised before anything is awaited


@contextlib.contextmanager
def redis_store():
    with redis_prefix() as prefix:
        yield lambda: RedisStore(REDIS_URL, prefix=prefix)


@pytest.mark.parametrize("where", ["memory", "redis"])
def test_decide_scope_async_decides_as_decide_scope(where):
    stores = redis_store() if where == "redis" else contextlib.nullcontext(lambda: None)
    with stores as store_of:
        lim = RequestLimiter([Policy("a", "3/min", algorithm="gcra", capacity=3, key="ip")],
                             store=store_of(), retry_after_jitter_s=0)
        scope = {"type": "http", "method": "GET", "raw_path": b"/", "headers": [],
                 "client": ("127.0.0.1", 1)}

        async def main():
            return await asyncio.gather(*(lim.decide_scope_async(scope) for _ in range(2)))

        passed = asyncio.run(main())
        assert [type(d) for d in passed] == [list, list]
        third = lim.decide_scope(scope)
        assert type(third) is list
        assert [name for name, _ in third] == [b"ratelimit-policy", b"ratelimit"]
        denied = lim.decide_scope(scope)
        assert isinstance(denied, Verdict) and denied.response[0] == 429
