"""Each algorithm's semantics through the Python API, on explicit times (seconds)."""

import math
import time

import pytest

import floodgate
from floodgate import (
    GCRA,
    Decision,
    FixedWindow,
    LeakyBucket,
    LeakyMeter,
    LeakyQueue,
    Limiter,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
)


def admitted(lim, now, n, cost=1):
    return sum(lim.allow(now, cost) for _ in range(n))


def test_boundary_burst_per_algorithm():
    # 100 at t=59.9 and 100 at t=60.1, as `floodgate simulate --scenario boundary`
    cases = [
        (FixedWindow(limit=100, window_s=60.0), 200),
        (SlidingLog(limit=100, window_s=60.0), 100),
        (SlidingCounter(limit=100, window_s=60.0), 100),
        (TokenBucket(capacity=100, refill_per_s=100 / 60), 100),
        (LeakyBucket(capacity=100, rate_per_s=100 / 60), 100),
        (GCRA(limit=100, period_s=60.0), 100),
    ]
    for lim, expected in cases:
        got = admitted(lim, 59.9, 100) + admitted(lim, 60.1, 100)
        assert got == expected, lim


def test_every_class_is_a_limiter_with_kind_and_limit():
    kinds = {
        FixedWindow(limit=5, window_s=1.0): ("fixed-window", 5),
        SlidingLog(limit=5, window_s=1.0): ("sliding-log", 5),
        SlidingCounter(limit=5, window_s=1.0): ("sliding-counter", 5),
        TokenBucket(capacity=7, refill_per_s=1.0): ("token-bucket", 7),
        LeakyBucket(capacity=7, rate_per_s=1.0): ("leaky-meter", 7),
        LeakyQueue(rate_per_s=1.0, burst=6): ("leaky-queue", 7),
        GCRA(rate_per_s=1.0, capacity=7): ("gcra", 7),
    }
    for lim, (kind, limit) in kinds.items():
        assert isinstance(lim, Limiter)
        assert (lim.kind, lim.limit) == (kind, limit)
        assert type(lim).__module__ == "floodgate"
    assert LeakyMeter is LeakyBucket


def test_decision_fields_in_seconds():
    b = TokenBucket(capacity=2, refill_per_s=4.0)  # one token per 0.25 s
    d = b.check(10.0)
    assert isinstance(d, Decision)
    assert (d.allowed, d.limit, d.remaining) == (True, 2, 1)
    assert d.retry_after is None
    assert d.reset_after == pytest.approx(0.25)
    assert d.delay == 0.0 and d.reason is None and not d.never and bool(d)
    b.check(10.0)
    d = b.check(10.0)
    assert not d.allowed and not bool(d)
    assert d.remaining == 0
    assert d.retry_after == pytest.approx(0.25)
    assert d.reset_after == pytest.approx(0.5)
    assert d.reason == "rate limited"
    assert repr(d) == (
        "Decision(allowed=False, limit=2, remaining=0, retry_after=0.25, "
        "reset_after=0.5, delay=0.0)"
    )
    # CL.THROTTLE's rendering truncates (0.25 s and 0.5 s are 0 s), as redis-cell does
    assert d.throttle_reply() == (1, 2, 0, 0, 0)
    # retry_after is exact: one token is back at 10.25 s, not before
    assert not b.allow(10.2499)
    assert b.allow(10.25)


def test_peek_consumes_nothing_and_cost():
    g = GCRA(rate_per_s=10.0, capacity=5)
    for _ in range(3):
        assert g.peek(1.0, cost=5).allowed
    assert g.check(1.0, cost=4).remaining == 1
    assert not g.allow(1.0, cost=2)
    assert g.allow(1.0, cost=1)
    assert g.allow(1.0, cost=0)  # cost 0 asks without consuming


def test_cost_above_capacity_is_a_never_decision_not_an_error():
    for lim in [
        TokenBucket(capacity=3, refill_per_s=1.0),
        FixedWindow(limit=3, window_s=1.0),
        GCRA(rate_per_s=1.0, capacity=3),
        LeakyQueue(rate_per_s=1.0, burst=2),
    ]:
        d = lim.check(5.0, cost=4)
        assert not d.allowed and d.never and d.retry_after is None, lim
        assert "exceeds the limit" in d.reason
        assert lim.allow(5.0, cost=3), lim  # nothing was consumed


def test_sliding_log_rolls():
    log = SlidingLog(limit=2, window_s=1.0)
    assert log.allow(0.0) and log.allow(0.5)
    assert not log.allow(0.999)
    assert log.allow(1.0)  # the unit from t=0 left the window
    assert not log.allow(1.4)


def test_fractional_rates():
    b = TokenBucket(capacity=1, refill_per_s=0.5)  # one token per 2 s
    assert b.allow(0.0)
    d = b.check(0.0)
    assert d.retry_after == pytest.approx(2.0, abs=1e-6)
    assert not b.allow(1.99)
    assert b.allow(2.0)
    g = GCRA(rate_per_s=2.5)  # default capacity: one second's worth, rounded up
    assert g.limit == 3
    assert repr(g) == "GCRA(rate_per_s=2.5, capacity=3)"


def test_leaky_queue_nginx_delays():
    # limit_req rate=5r/s burst=12 delay=8: 9 at once, 4 delayed 200..800 ms, 14th rejected
    q = LeakyQueue(rate_per_s=5.0, burst=12, delay=8)
    ds = [q.check(0.0) for _ in range(14)]
    assert all(d.allowed and d.delay == 0.0 for d in ds[:9])
    assert [d.delay for d in ds[9:13]] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert not ds[13].allowed
    # nginx default (no delay=): every excess request waits
    q = LeakyQueue(rate_per_s=10.0, burst=3)
    assert [q.check(1.0).delay for _ in range(4)] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    # nodelay: admitted at once, same admission
    q = LeakyQueue(rate_per_s=10.0, burst=3, nodelay=True)
    ds = [q.check(1.0) for _ in range(5)]
    assert [d.allowed for d in ds] == [True] * 4 + [False]
    assert all(d.delay == 0.0 for d in ds)


def test_gcra_rate_forms_and_from_cell():
    assert GCRA(limit=100, period_s=60.0).limit == 100
    assert GCRA(limit=100, period_s=60.0, burst=9).limit == 10
    assert GCRA(rate_per_s=5.0, capacity=2).limit == 2
    # CL.THROTTLE user123 15 30 60 on a fresh key: [0, 16, 15, -1, 2]
    cell = GCRA.from_cell(15, 30, 60)
    assert repr(cell) == "GCRA.from_cell(max_burst=15, count=30, period=60)"
    assert isinstance(cell, GCRA)
    assert cell.check(1_700_000_000.0).throttle_reply() == (0, 16, 15, -1, 2)
    replies = [cell.check(1_700_000_000.0).throttle_reply() for _ in range(16)]
    assert replies[-1][0] == 1 and replies[-1][3] == 2  # limited, retry in 2 s


def test_throttle_reply_truncates_as_redis_cell():
    # again 1 ms later: 3.999 s to full capacity is 3 in CL.THROTTLE (the module's
    # num_seconds), while the decision keeps the exact time
    cell = GCRA.from_cell(15, 30, 60)
    assert cell.check(1_700_000_000.0).throttle_reply() == (0, 16, 15, -1, 2)
    d = cell.check(1_700_000_000.001)
    assert d.reset_after == pytest.approx(3.999)
    assert d.throttle_reply() == (0, 16, 14, -1, 3)
    # denied 0.5 s into a 2 s emission interval: retry 1.5 s is 1, reset 31.5 s is 31
    full = GCRA.from_cell(15, 30, 60)
    assert full.check(1_700_000_000.0, 16).throttle_reply() == (0, 16, 0, -1, 32)
    assert full.check(1_700_000_000.5).throttle_reply() == (1, 16, 0, 1, 31)


def test_reprs():
    assert repr(FixedWindow(limit=100, window_s=60.0)) == "FixedWindow(limit=100, window_s=60.0)"
    assert repr(TokenBucket(capacity=10, refill_per_s=2)) == "TokenBucket(capacity=10, refill_per_s=2.0)"
    assert repr(LeakyQueue(rate_per_s=5, burst=12, delay=8)) == "LeakyQueue(rate_per_s=5.0, burst=12, delay=8)"
    assert repr(LeakyQueue(rate_per_s=5, burst=12, nodelay=True)) == "LeakyQueue(rate_per_s=5.0, burst=12, nodelay=True)"


def test_monotonic_clock_when_now_is_omitted():
    g = GCRA(rate_per_s=20.0, capacity=1)  # one per 50 ms
    assert g.allow()
    d = g.check()
    assert not d.allowed and 0.0 < d.retry_after <= 0.05
    time.sleep(d.retry_after + 0.01)
    assert g.allow()


def test_time_standing_still_or_going_back_is_no_refill():
    b = TokenBucket(capacity=1, refill_per_s=1.0)
    assert b.allow(100.0)
    assert not b.allow(50.0)  # a step back counts as no time passing
    assert not b.allow(100.5)
    assert b.allow(101.0)


def test_large_and_int_times():
    b = TokenBucket(capacity=1, refill_per_s=1.0)
    assert b.allow(time.time())  # epoch seconds are fine
    assert FixedWindow(limit=1, window_s=1.0).allow(60)  # int seconds accepted
    assert b.check(1e12).allowed  # far future, no overflow


def test_module_metadata():
    assert floodgate.__version__
    assert issubclass(floodgate.ConfigError, ValueError)
    assert "LeakyMeter" in floodgate.__all__
    assert math.isfinite(TokenBucket(capacity=1, refill_per_s=1).check(0.0).reset_after)
