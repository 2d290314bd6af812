"""Bad arguments raise ValueError or TypeError with a message naming the parameter; none
crashes the interpreter."""

import math

import pytest

from floodgate import (
    GCRA,
    ConfigError,
    FixedWindow,
    KeyedLimiter,
    LeakyBucket,
    LeakyQueue,
    Limiter,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
)

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    "make, exc, message",
    [
        (lambda: FixedWindow(limit=0, window_s=60.0), ConfigError, "limit must be at least 1, got 0"),
        (lambda: SlidingLog(limit=0, window_s=1.0), ValueError, "limit must be at least 1"),
        (lambda: SlidingCounter(limit=-5, window_s=1.0), ValueError, "limit must be a whole number >= 1, got -5"),
        (lambda: FixedWindow(limit=2**64, window_s=1.0), ValueError, "limit is too large"),
        (lambda: FixedWindow(limit=1.5, window_s=1.0), TypeError, "limit must be an int, not float"),
        (lambda: FixedWindow(limit="100", window_s=1.0), TypeError, "limit must be an int, not str"),
        (lambda: FixedWindow(limit=10, window_s=NAN), ValueError, "window_s must be a positive, finite number, got nan"),
        (lambda: FixedWindow(limit=10, window_s=-1.0), ValueError, "window_s must be a positive, finite number, got -1.0"),
        (lambda: FixedWindow(limit=10, window_s=0.0), ValueError, "window_s must be a positive, finite number"),
        (lambda: SlidingLog(limit=10, window_s=INF), ValueError, "got inf"),
        (lambda: FixedWindow(limit=10, window_s=1e300), ValueError, "window_s is too large"),
        (lambda: FixedWindow(limit=10, window_s="60s"), TypeError, "window_s"),
        (lambda: FixedWindow(limit=10), TypeError, "window_s"),
        (lambda: TokenBucket(capacity=0, refill_per_s=1.0), ConfigError, "capacity must be at least 1"),
        (lambda: TokenBucket(capacity=10, refill_per_s=0.0), ValueError, "refill_per_s must be a positive, finite number"),
        (lambda: TokenBucket(capacity=10, refill_per_s=NAN), ValueError, "refill_per_s"),
        (lambda: TokenBucket(capacity=10, refill_per_s=1e30), ValueError, "refill_per_s"),
        (lambda: LeakyBucket(capacity=10, rate_per_s=-1.0), ValueError, "rate_per_s"),
        (lambda: LeakyQueue(rate_per_s=1.0, burst=-1), ValueError, "burst must be a whole number >= 0"),
        (lambda: LeakyQueue(rate_per_s=1.0, burst=2, delay=3), ConfigError, "delay=3 is above burst=2"),
        (lambda: LeakyQueue(rate_per_s=1.0, burst=2, nodelay=True, delay=1), ValueError, "contradict"),
        (lambda: GCRA(), TypeError, "GCRA() needs a rate"),
        (lambda: GCRA(rate_per_s=1.0, limit=5, period_s=1.0), TypeError, "not a mix"),
        (lambda: GCRA(limit=5), TypeError, "not a mix"),
        (lambda: GCRA(rate_per_s=1.0, capacity=2, burst=1), TypeError, "not both"),
        (lambda: GCRA(rate_per_s=1.0, capacity=0), ConfigError, "capacity must be at least 1"),
        (lambda: GCRA(limit=0, period_s=1.0), ConfigError, "at least 1"),
        (lambda: GCRA(limit=5, period_s=-1.0), ValueError, "period_s must be a positive, finite number"),
        (lambda: GCRA(limit=10**10, period_s=1.0), ConfigError, "more than one unit per nanosecond"),
        (lambda: GCRA.from_cell(15, 0, 60), ConfigError, "count must be at least 1"),
        (lambda: GCRA.from_cell(-1, 30, 60), ValueError, "max_burst must be a whole number >= 0"),
        (lambda: GCRA(rate_per_s=1.0, capacity=2**62), ConfigError, "capacity is too large"),
        (lambda: Limiter(), TypeError, "cannot create"),
        (lambda: KeyedLimiter(TokenBucket(capacity=1, refill_per_s=1.0), max_keys=0), ConfigError, "max_keys must be at least 1"),
        (lambda: KeyedLimiter("gcra"), TypeError, "Limiter"),
    ],
)
def test_bad_construction(make, exc, message):
    with pytest.raises(exc) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda l: l.allow(NAN), ValueError, "now must be a finite number of seconds >= 0, got nan"),
        (lambda l: l.allow(-0.5), ValueError, "got -0.5"),
        (lambda l: l.check(INF), ValueError, "got inf"),
        (lambda l: l.peek(-INF), ValueError, "got -inf"),
        (lambda l: l.allow("now"), TypeError, "now"),
        (lambda l: l.allow(1.0, -1), ValueError, "cost must be a whole number >= 0, got -1"),
        (lambda l: l.check(1.0, cost=2**64), ValueError, "cost is too large"),
        (lambda l: l.allow(1.0, cost=1.0), TypeError, "argument 'cost': must be an int, not float"),
        (lambda l: l.allow(1.0, cost=None), TypeError, "cost"),
        (lambda l: l.allow(1.0, 1, 1), TypeError, "positional"),
        (lambda l: l.allow(when=1.0), TypeError, "when"),
    ],
)
def test_bad_calls(call, exc, message):
    lim = TokenBucket(capacity=10, refill_per_s=1.0)
    with pytest.raises(exc) as info:
        call(lim)
    assert message in str(info.value)
    assert lim.check(1.0).remaining == 9  # the failed calls consumed nothing


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda k: k.allow(42), TypeError, "key must be str or bytes, not int"),
        (lambda k: k.allow(None), TypeError, "key must be str or bytes, not NoneType"),
        (lambda k: k.check(bytearray(b"a")), TypeError, "not bytearray"),
        (lambda k: k.check("a", NAN), ValueError, "now must be a finite number"),
        (lambda k: k.peek("a", 1.0, -3), ValueError, "cost must be a whole number >= 0"),
        (lambda k: k.allow("\ud800"), UnicodeEncodeError, "surrogate"),
        (lambda k: k.set_key_algorithm("a", "gcra"), TypeError, "Limiter"),
        (lambda k: k.sweep(-1.0), ValueError, "now"),
    ],
)
def test_bad_keyed_calls(call, exc, message):
    k = KeyedLimiter(TokenBucket(capacity=10, refill_per_s=1.0), max_keys=100)
    with pytest.raises(exc) as info:
        call(k)
    assert message in str(info.value)
    assert len(k) == 0
