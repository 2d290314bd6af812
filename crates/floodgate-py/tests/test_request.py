"""RequestLimiter: the proxy's decision procedure for requests a Python application
serves itself (policies, routes, keys, denials, dry runs, leases, settled costs), and the
same answers as a real `floodgate proxy` process with the same policy."""

import asyncio
import math
import re

import pytest

from floodgate import ConfigError, Policy, RequestLimiter, Route, Verdict
from proxyproc import Proxy

CLIENT = ("127.0.0.1", 50000)
# the headers whose values depend on the decision only (not on Date, Server...)
LIMIT_HEADERS = ("retry-after", "ratelimit-policy", "ratelimit", "content-type", "cache-control")


def limited(pairs):
    return [(k, v) for k, v in pairs if k in LIMIT_HEADERS]


def test_headers_as_a_list_a_tuple_a_dict_or_a_mapping_decide_alike():
    lim = RequestLimiter([Policy("api", "10/min", algorithm="gcra", capacity=10,
                                 key="header:x-api-key")])
    given = [[(b"x-api-key", b"k1")], ((b"x-api-key", "k1"),), {"x-api-key": "k1"},
             MappingOnly({"x-api-key": b"k1"})]
    fields = [dict(lim.decide("GET", "/x", h).headers)["ratelimit"] for h in given]
    remaining = [int(re.search(r";r=(\d+)", f).group(1)) for f in fields]
    assert remaining == [10, 9, 8, 7], fields  # one key: each form read it
    with pytest.raises(TypeError, match="header value must be str or bytes"):
        lim.decide("GET", "/x", [(b"x-api-key", 1)])
    with pytest.raises(ValueError, match="header name .* is not valid"):
        lim.decide("GET", "/x", [(b"bad name", b"v")])


class MappingOnly:
    """A mapping with `items()` only (as a framework's header object)."""

    def __init__(self, d):
        self.d = d

    def items(self):
        return self.d.items()


def test_admits_then_denies_with_the_proxys_denial():
    lim = RequestLimiter([Policy("api", "2/min", algorithm="gcra", capacity=2)],
                         retry_after_jitter_s=0)
    first = lim.decide("GET", "/x", [("host", "a")], client=CLIENT)
    assert isinstance(first, Verdict) and first.allowed and bool(first)
    assert first.response is None and first.policy == "api" and first.outcome == "allowed"
    assert dict(first.headers)["ratelimit-policy"] == '"api";q=2;w=60;floodgate-capacity=2'
    assert dict(first.headers)["ratelimit"].startswith('"api";r=')
    lim.decide("GET", "/x", client=CLIENT)
    denied = lim.decide("GET", "/x", client=CLIENT)
    assert not denied.allowed and denied.headers == [] and denied.outcome == "limited"
    assert first.header_bytes == [(n.encode(), v.encode()) for n, v in first.headers]
    assert first.header_bytes and denied.header_bytes == []
    status, headers, body = denied.response
    assert status == 429
    retry = int(dict(headers)["retry-after"])
    assert 29 <= retry <= 30
    assert body == f'429 Too Many Requests: rate limited by policy "api"; retry after {retry} s\n'.encode()
    # another client has a key of its own
    assert lim.decide("GET", "/x", client="203.0.113.9").allowed
    # counted under the proxy's metric names
    assert 'floodgate_requests_total{outcome="rejected"} 1' in lim.metrics()


def test_same_answers_as_a_floodgate_proxy_process(tmp_path):
    policy = dict(name="per-ip", rate="1/min", algorithm="gcra", capacity=2)
    proxy = Proxy(tmp_path, """
[headers]
retry_after_jitter = "0s"

[[policy]]
name = "per-ip"
algorithm = "gcra"
rate = "1/min"
capacity = 2
""")
    try:
        through_proxy = [proxy.get("/p") for _ in range(3)]
    finally:
        proxy.stop()
    lim = RequestLimiter([Policy(**policy)], retry_after_jitter_s=0)
    verdicts = [lim.decide("GET", "/p", client="127.0.0.1") for _ in range(3)]
    assert [s for s, _, _ in through_proxy] == [200, 200, 429]
    for (status, headers, body), v in zip(through_proxy[:2], verdicts[:2]):
        assert v.allowed and limited(headers) == v.headers
    status, headers, body = through_proxy[2]
    v_status, v_headers, v_body = verdicts[2].response
    assert (status, body) == (v_status, v_body)
    assert limited(headers) == limited(v_headers)


def test_keys_provided_per_policy_header_and_behind_trusted_proxies():
    lim = RequestLimiter([
        Policy("user", "1/min", algorithm="gcra", key="provided"),
        Policy("token", "1/min", algorithm="gcra", key="header:x-api-key"),
    ], routes=[Route("/u", policies=["user"]), Route("/t", policies=["token"])])
    assert lim.decide("GET", "/u", keys="alice").allowed
    assert not lim.decide("GET", "/u", keys=b"alice").allowed
    assert lim.decide("GET", "/u", keys={"user": "bob"}).allowed
    status, _, body = lim.decide("GET", "/u").response
    assert status == 400 and b'no key provided for policy "user"' in body
    assert lim.decide("GET", "/t", {"X-Api-Key": "k1"}).allowed
    assert not lim.decide("GET", "/t", {"x-api-key": "k1"}).allowed
    assert lim.decide("GET", "/t", [(b"x-api-key", b"k2")]).allowed

    behind = RequestLimiter([Policy("ip", "1/min", algorithm="gcra")],
                            trusted_proxies=["10.0.0.0/8"])
    spoofed = [("x-forwarded-for", "198.51.100.1, 203.0.113.5")]
    assert behind.decide("GET", "/", spoofed, client=("10.1.2.3", 443)).allowed
    # the right-most untrusted hop is the client, whatever it writes on the left
    again = [("x-forwarded-for", "192.0.2.77, 203.0.113.5")]
    assert not behind.decide("GET", "/", again, client=("10.9.9.9", 443)).allowed
    # an untrusted peer's header is not read: its own address counts
    assert behind.decide("GET", "/", again, client="198.51.100.200").allowed


def test_routes_costs_methods_dry_run_and_unlimited_paths():
    lim = RequestLimiter(
        [Policy("writes", "10/min", algorithm="gcra", capacity=10),
         Policy("shadow", "1/min", algorithm="gcra", dry_run=True, key="global")],
        routes=[Route("/api", methods=["post"], policies={"writes": 4, "shadow": 1})])
    free = lim.decide("GET", "/api/x", client=CLIENT)
    assert free.allowed and free.headers == [] and free.outcome is None
    outcomes = [lim.decide("POST", "/api/x", client=CLIENT) for _ in range(3)]
    assert [v.allowed for v in outcomes] == [True, True, False]
    assert outcomes[0].outcome == "allowed"
    assert outcomes[1].outcome == "shadow"  # the dry run would have denied; not enforced
    assert outcomes[2].response[0] == 429 and outcomes[2].policy == "writes"


def test_in_flight_leases_are_held_until_finish():
    lim = RequestLimiter([Policy("one", max_in_flight=1, key="global")])
    first = lim.decide("GET", "/")
    assert first.allowed
    assert not lim.decide("GET", "/").allowed
    first.finish()
    first.finish()  # idempotent
    with lim.decide("GET", "/") as again:
        assert again.allowed
        assert not lim.decide("GET", "/").allowed
    assert lim.decide("GET", "/").allowed


def test_settle_the_actual_cost_after_the_response():
    lim = RequestLimiter([Policy("tokens", "100/min", algorithm="gcra", capacity=100,
                                 key="global")],
                         routes=[Route("/llm", policies=["tokens"], estimate=10,
                                       cost_header="x-cost")])
    def r(headers):
        return int(re.search(r'"tokens";r=(\d+)', dict(headers)["ratelimit"]).group(1))

    v = lim.decide("POST", "/llm")
    assert v.allowed
    admitted = r(v.headers)
    # charged 60 instead of the estimate 10: 50 more units gone
    assert r(v.settle(60)) == admitted - 50
    with pytest.raises(RuntimeError, match="settled already"):
        v.settle(1)
    with pytest.raises(ValueError, match="nothing to settle"):
        RequestLimiter([Policy("p", "1/s")]).decide("GET", "/", client=CLIENT).settle(1)


def test_decide_async_in_an_event_loop():
    lim = RequestLimiter([Policy("a", "2/min", algorithm="gcra", capacity=2, key="global")])

    async def main():
        return await asyncio.gather(*(lim.decide_async("GET", "/") for _ in range(5)))

    verdicts = asyncio.run(main())
    assert sorted(v.allowed for v in verdicts) == [False, False, False, True, True]


@pytest.mark.parametrize("kwargs, message", [
    (dict(rate="0/s"), "rate"),
    (dict(rate="-1/s"), "rate"),
    (dict(rate="10/q"), "rate"),
    (dict(rate="1/s", capacity=0), "capacity"),
    (dict(rate="1/s", burst=-1), "burst"),
    (dict(rate="1/s", burst=1, capacity=2), "burst or capacity"),
    (dict(rate="1/s", algorithm="fastest"), "algorithm"),
    (dict(rate="1/s", key="cookie"), "key"),
    (dict(rate="1/s", key="header:bad name"), "header"),
    (dict(rate="1/s", key=[]), "key list is empty"),
    (dict(rate="1/s", nodelay=True, algorithm="gcra"), "nodelay"),
    (dict(), "rate: is required"),
    (dict(max_in_flight=0), "max_in_flight"),
    (dict(max_in_flight=2, rate="1/s"), "max_in_flight"),
    (dict(max_in_flight=2, lease_ttl_s=math.nan), "lease_ttl_s"),
    (dict(rate="1/s", advertise=True), "advertise"),
])
def test_bad_policy_fields_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Policy("p", **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(trusted_proxies=["10.0.0.0/33"]), "trusted_proxies"),
    (dict(trusted_proxies=["not-a-net"]), "trusted_proxies"),
    (dict(retry_after_jitter_s=math.nan), "retry_after_jitter_s"),
    (dict(retry_after_jitter_s=-1.0), "retry_after_jitter_s"),
    (dict(deny_status=200), "deny_status"),
    (dict(missing_key_status=503), "missing_key_status"),
    (dict(on_store_failure="maybe"), "on_store_failure"),
    (dict(missing_key="fallback"), "fallback_key"),
    (dict(max_keys=0), "max_keys"),
    (dict(ipv4_prefix=33), "ipv4_prefix"),
    (dict(legacy_headers="soon"), "legacy_headers"),
    (dict(routes=[Route("/", policies=["nope"])]), "unknown policy"),
])
def test_bad_limiter_settings_name_the_setting(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RequestLimiter([Policy("p", "1/s")], **kwargs)


def test_bad_routes_and_requests_are_clear_errors():
    with pytest.raises(ConfigError, match="cost_header"):
        Route("/", policies=["p"], cost_header="bad header")
    with pytest.raises(ConfigError, match="methods"):
        Route("/", policies=["p"], methods=["G ET"])
    with pytest.raises(ConfigError, match="empty"):
        Route("/", policies=[])
    with pytest.raises(ConfigError, match="empty"):
        RequestLimiter([])
    lim = RequestLimiter([Policy("p", "1/s")])
    with pytest.raises(ValueError, match="method"):
        lim.decide("G ET", "/", client=CLIENT)
    with pytest.raises(ValueError, match="header name"):
        lim.decide("GET", "/", [("bad name", "v")], client=CLIENT)
    with pytest.raises(ValueError, match="not an IP address"):
        lim.decide("GET", "/", client=("testclient", 50000))
    with pytest.raises(ValueError, match="must start with /"):
        lim.decide("GET", "relative", client=CLIENT)
    with pytest.raises(TypeError):
        lim.decide("GET", "/", [("a",)], client=CLIENT)
    # a decoded non-ASCII path is a path of its own, not an error
    assert lim.decide("GET", "/caf\u00e9", client=CLIENT).allowed
