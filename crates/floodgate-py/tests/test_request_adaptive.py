"""Adaptive concurrency policies in RequestLimiter: a permit per admitted request,
released by Verdict.finish() (the time since decide is the latency sample), the proxy's
503 with Retry-After for a request refused, bad fields named."""

import http.server
import math
import threading

import pytest

from floodgate import ConfigError, Policy, RequestLimiter, Route
from proxyproc import Proxy

# the headers whose values depend on the decision only (not on Date, Server...)
LIMIT_HEADERS = ("retry-after", "content-type", "cache-control")


def limited(pairs):
    return sorted((k, v) for k, v in pairs if k in LIMIT_HEADERS)


def two_at_once():
    # a floor equal to the ceiling: the limit stays 2 whatever the latency samples say
    return Policy("backend", adaptive="gradient2", min_limit=2, max_limit=2, initial_limit=2)


def test_a_third_request_at_once_is_refused_until_one_finishes():
    lim = RequestLimiter([two_at_once()])
    a, b = lim.decide("GET", "/"), lim.decide("GET", "/x")
    assert a.allowed and b.allowed
    third = lim.decide("GET", "/")
    assert not third.allowed and third.policy == "backend"
    status, headers, body = third.response
    assert status == 503 and dict(headers)["retry-after"] == "1"
    a.finish(status=200)
    a.finish()  # idempotent
    with lim.decide("GET", "/") as c:
        assert c.allowed
        assert not lim.decide("GET", "/").allowed
    # the block's end released it; b still holds one
    assert lim.decide("GET", "/").allowed
    b.finish()
    assert 'floodgate_adaptive_limit{policy="backend"} 2' in lim.metrics()


def test_classes_share_the_limit_by_priority():
    lim = RequestLimiter([Policy("backend", adaptive="aimd", min_limit=2, max_limit=2,
                                 initial_limit=2,
                                 classes=[{"name": "critical", "share": 0.5,
                                           "match": {"header": "x-priority",
                                                     "value": "critical"}},
                                          {"name": "rest", "share": 0.0}])],
                         routes=[Route("/", policies=["backend"])])
    critical = [("x-priority", "critical")]
    # idle classes lend their guarantee: two requests of the lowest class at once
    first, second = lim.decide("GET", "/"), lim.decide("GET", "/")
    assert first.allowed and second.allowed
    first.finish()
    second.finish()
    # a critical request arrived within the last second: its class is demanding, and
    # its guarantee (half the limit) is no longer lent
    lim.decide("GET", "/", critical).finish(status=200)
    rest = lim.decide("GET", "/")
    assert rest.allowed
    refused = lim.decide("GET", "/")
    assert not refused.allowed and refused.response[0] == 503
    urgent = lim.decide("GET", "/", critical)
    assert urgent.allowed
    rest.finish()
    urgent.finish(status=503)


class _Held(http.server.BaseHTTPRequestHandler):
    """Answers 200 once `release` is set; counts the requests it holds."""
    release = threading.Event()
    holding = threading.Semaphore(0)

    def do_GET(self):
        _Held.holding.release()
        _Held.release.wait(10)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_refusal_is_the_proxys(tmp_path):
    proxy = Proxy(tmp_path, """
[[policy]]
name = "backend"
adaptive = "gradient2"
min_limit = 2
max_limit = 2
initial_limit = 2
""", handler=_Held)
    held = []
    try:
        threads = [threading.Thread(target=lambda: held.append(proxy.get("/"))) for _ in range(2)]
        for t in threads:
            t.start()
        for _ in range(2):
            assert _Held.holding.acquire(timeout=10)
        refused = proxy.get("/")
        _Held.release.set()
        for t in threads:
            t.join(10)
    finally:
        _Held.release.set()
        proxy.stop()
    assert [s for s, _, _ in held] == [200, 200]
    lim = RequestLimiter([two_at_once()])
    verdicts = [lim.decide("GET", "/", client="127.0.0.1") for _ in range(3)]
    status, headers, body = verdicts[2].response
    assert (refused[0], refused[2]) == (status, body) == (503, body)
    assert limited(refused[1]) == limited(headers)
    assert dict(headers)["retry-after"] == "1"


@pytest.mark.parametrize("kwargs, message", [
    (dict(adaptive="fast"), "adaptive"),
    (dict(adaptive="gradient2", rate="1/s"), "adaptive"),
    (dict(adaptive="gradient2", max_in_flight=2), "adaptive"),
    (dict(min_limit=2), "apply only with adaptive"),
    (dict(adaptive="gradient2", min_limit=5, max_limit=2), "min_limit"),
    (dict(adaptive="gradient2", max_limit=0), "max_limit"),
    (dict(adaptive="gradient2", min_limit=-1), "min_limit"),
    (dict(adaptive="gradient2", queue_timeout_s=math.nan), "queue_timeout_s"),
    (dict(adaptive="gradient2", drop_on=["4xx"]), "drop_on"),
    (dict(adaptive="gradient2", classes=[{"share": 0.5}]), "name"),
    (dict(adaptive="gradient2", classes=[{"name": "a", "share": 2.0}]), "class"),
    (dict(adaptive="gradient2", classes=[{"name": "a", "share": 0.5, "weight": 1}]), "weight"),
    (dict(adaptive="gradient2", classes=[{"name": "a", "share": 0.5,
                                          "match": {"header": "x-p"}}]), "header and value"),
    (dict(adaptive="gradient2", classes="critical"), "classes"),
])
def test_bad_adaptive_fields_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Policy("p", **kwargs)


def test_finish_refuses_a_bad_status():
    lim = RequestLimiter([two_at_once()])
    v = lim.decide("GET", "/")
    with pytest.raises(ValueError, match="status"):
        v.finish(status=1000)
    v.finish(status=200)
