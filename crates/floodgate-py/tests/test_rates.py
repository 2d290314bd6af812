"""Rate strings: floodgate reads the notation of the ``limits`` package (slowapi,
Flask-Limiter) as ``limits.parse_many`` reads it, string for string, and every algorithm
class takes a rate string wherever it takes a rate."""

import limits
import pytest

import floodgate
from floodgate import (
    GCRA,
    ConfigError,
    FixedWindow,
    LeakyBucket,
    LeakyQueue,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    parse_rate,
    parse_rates,
)

# Strings on which floodgate and limits agree: the same (count, seconds) list, or both
# refuse.
AGREE = [
    "10/minute",
    "10 per minute",
    "100 per hour",
    "100/hour",
    "10/2 minutes",
    "10 per 2 minutes",
    "10per2minutes",
    " 3 / 5 seconds ",
    "1/second",
    "1/seconds",
    "7/day",
    "7/days",
    "5/month",
    "5/months",
    "2/year",
    "2/years",
    "10/MINUTE",
    "2 PER 3 Hours",
    "1/second; 100/minute",
    "1/second;100/minute",
    "1/second, 100/minute",
    "1/second | 100/minute | 1000/day",
    "1000 per 2 hours; 5 per 30 seconds",
    # both refuse
    "",
    "   ",
    "10",
    "10 minute",
    "/minute",
    "10/",
    "10 per",
    "ten/minute",
    "1.5/minute",
    "-1/minute",
    "10/-1 minute",
    "10/fortnight",
    "10/minutess",
    "nan/minute",
    "10/nan",
    "inf/minute",
    "10/inf minutes",
    "1/second;",
    ";1/second",
    "1/second;;2/minute",
    "1/second; 10/fortnight",
    "1/second 2/minute",
]

# Where the two differ, what each answers (None: refused). floodgate reads more units
# (`s`, `min`, `h`, `ms`...), fractional periods and nginx's `10r/s`; it refuses a count
# or a period of 0 (limits reads `10/0 minute` as one minute) and limits' stray `:` before
# a separator.
DIFFER = [
    # (string, floodgate, limits)
    ("5/s", [(5, 1)], None),
    ("100/min", [(100, 60)], None),
    ("5000/h", [(5000, 3600)], None),
    ("100/30s", [(100, 30)], None),
    ("1/1.5s", [(1, 1.5)], None),
    ("10r/s", [(10, 1)], None),
    ("0/minute", None, [(0, 60)]),
    ("10/0 minute", None, [(10, 60)]),
    ("1/second:,2/minute", None, [(1, 1), (2, 60)]),
]


def limits_reading(s):
    try:
        return [(item.amount, item.get_expiry()) for item in limits.parse_many(s)]
    except ValueError:
        return None


def floodgate_reading(s):
    try:
        return parse_rates(s)
    except ConfigError:
        return None


@pytest.mark.parametrize("s", AGREE)
def test_same_reading_as_limits(s):
    assert floodgate_reading(s) == limits_reading(s), s


def test_the_agreed_strings_include_both_answers():
    readings = [limits_reading(s) for s in AGREE]
    assert sum(r is None for r in readings) >= 20
    assert sum(r is not None for r in readings) >= 20


@pytest.mark.parametrize("s,ours,theirs", DIFFER)
def test_the_differences_are_the_stated_ones(s, ours, theirs):
    assert floodgate_reading(s) == ours, s
    assert limits_reading(s) == theirs, s


def test_parse_rate():
    assert parse_rate("100/minute") == (100, 60.0)
    assert parse_rate("10 per 2 minutes") == (10, 120.0)
    assert parse_rate("5/s") == (5, 1.0)
    assert parse_rate("1/250ms") == (1, 0.25)
    assert parse_rate("5/year") == (5, 360 * 86400.0)
    assert floodgate.parse_rates("1/second; 100/minute") == [(1, 1.0), (100, 60.0)]


@pytest.mark.parametrize(
    "s,needle",
    [
        ("", "empty"),
        ("10 minute", "missing '/' or 'per'"),
        ("0/minute", "count must be at least 1"),
        ("-1/minute", "not a whole number"),
        ("18446744073709551616/minute", "too large"),
        ("10/fortnight", 'unknown unit "fortnight"'),
        ("10/nan", 'unknown unit "nan"'),
        ("10/0 minutes", "at least 1"),
        ("2000000000/s", "more than one unit per nanosecond"),
        ("1/second; 100/minute", "several limits"),
    ],
)
def test_parse_rate_refuses_with_the_reason(s, needle):
    with pytest.raises(ConfigError) as e:
        parse_rate(s)
    assert needle in str(e.value)
    assert repr(s).strip("'") in str(e.value)


def test_parse_rates_names_the_bad_limit():
    with pytest.raises(ConfigError, match=r'limit 2 of 3 \("10/fortnight"\): unknown unit'):
        parse_rates("1/s; 10/fortnight; 5/minute")
    with pytest.raises(ConfigError, match="limit 2 of 2 is empty"):
        parse_rates("1/s;")
    with pytest.raises(TypeError):
        parse_rates(None)
    with pytest.raises(TypeError):
        parse_rate(10)


def decisions(lim):
    """What `lim` answers over a fixed arrival sequence (seconds): bursts, gaps, costs."""
    out = []
    t = 1000.0
    for gap, n, cost in [(0, 30, 1), (0.05, 5, 2), (1.5, 12, 1), (30, 150, 1), (61, 3, 7), (3600, 200, 1)]:
        t += gap
        for _ in range(n):
            d = lim.check(t, cost)
            out.append((d.allowed, d.remaining, d.retry_after, d.delay))
    return out


@pytest.mark.parametrize(
    "from_text,from_keywords",
    [
        (lambda: FixedWindow("100/minute"), lambda: FixedWindow(limit=100, window_s=60.0)),
        (lambda: FixedWindow("10 per 2 seconds"), lambda: FixedWindow(limit=10, window_s=2.0)),
        (lambda: SlidingLog("100 per hour"), lambda: SlidingLog(limit=100, window_s=3600.0)),
        (lambda: SlidingCounter("20/minute"), lambda: SlidingCounter(limit=20, window_s=60.0)),
        (lambda: TokenBucket("10/s", capacity=20), lambda: TokenBucket(capacity=20, refill_per_s=10.0)),
        (lambda: TokenBucket("10/s"), lambda: TokenBucket(capacity=10, refill_per_s=10.0)),
        (lambda: TokenBucket(capacity=20, refill_per_s="10/s"), lambda: TokenBucket(20, 10.0)),
        (lambda: LeakyBucket("10/s", capacity=5), lambda: LeakyBucket(capacity=5, rate_per_s=10.0)),
        (lambda: LeakyBucket("4 per second"), lambda: LeakyBucket(capacity=4, rate_per_s=4.0)),
        (lambda: GCRA("100/minute", burst=9), lambda: GCRA(limit=100, period_s=60.0, burst=9)),
        (lambda: GCRA("100/minute"), lambda: GCRA(limit=100, period_s=60.0)),
        (lambda: GCRA("5/s", capacity=2), lambda: GCRA(rate_per_s=5.0, capacity=2)),
        (lambda: LeakyQueue("10/s", burst=5), lambda: LeakyQueue(rate_per_s=10.0, burst=5)),
        (lambda: LeakyQueue("10/s", 5, delay=2), lambda: LeakyQueue(10.0, 5, delay=2)),
        (lambda: LeakyQueue("10/s", burst=5, nodelay=True), lambda: LeakyQueue(rate_per_s=10.0, burst=5, nodelay=True)),
    ],
)
def test_a_rate_string_builds_the_same_limiter(from_text, from_keywords):
    a, b = from_text(), from_keywords()
    assert type(a) is type(b)
    assert a.limit == b.limit
    assert decisions(a) == decisions(b)


def test_reprs():
    assert repr(FixedWindow("100/minute")) == repr(FixedWindow(limit=100, window_s=60.0))
    assert repr(SlidingLog("100 per hour")) == "SlidingLog(limit=100, window_s=3600.0)"
    assert repr(TokenBucket("10 per second", capacity=20)) == "TokenBucket('10/s', capacity=20)"
    assert repr(LeakyBucket("10/s")) == "LeakyBucket('10/s', capacity=10)"
    assert repr(GCRA("100/minute", burst=9)) == "GCRA('100/min', capacity=10)"
    assert repr(LeakyQueue("10/s", burst=5)) == "LeakyQueue('10/s', burst=5, delay=0)"
    # the keyword forms print as before
    assert repr(TokenBucket(capacity=2, refill_per_s=1.5)) == "TokenBucket(capacity=2, refill_per_s=1.5)"
    assert repr(LeakyQueue(rate_per_s=1.0, burst=2, nodelay=True)) == "LeakyQueue(rate_per_s=1.0, burst=2, nodelay=True)"
    # a repr of a rate-string limiter builds the same limiter
    for lim in [TokenBucket("100/minute", capacity=3), GCRA("7 per 2 hours"), LeakyBucket("3/s")]:
        again = eval(repr(lim), vars(floodgate))
        assert repr(again) == repr(lim)
        assert decisions(again) == decisions(lim)


@pytest.mark.parametrize(
    "build,exc,needle",
    [
        (lambda: FixedWindow("100/fortnight"), ConfigError, 'unknown unit "fortnight"'),
        (lambda: FixedWindow("0/minute"), ConfigError, "count must be at least 1"),
        (lambda: FixedWindow("100/minute", window_s=60.0), TypeError, "limit must be an int, not str"),
        (lambda: FixedWindow("100/minute", 60.0), TypeError, "replaces both"),
        (lambda: SlidingLog("1/s; 2/min"), ConfigError, "several limits"),
        (lambda: SlidingCounter(10), TypeError, "window_s"),
        (lambda: TokenBucket("10/s", 20), TypeError, "give capacity by keyword"),
        (lambda: TokenBucket("10/s", refill_per_s=2.0), TypeError, "not both"),
        (lambda: TokenBucket("10/s", capacity=0), ConfigError, "capacity must be at least 1"),
        (lambda: TokenBucket("10/s", capacity=1.5), TypeError, "capacity must be an int, not float"),
        (lambda: TokenBucket(5), TypeError, "needs a rate"),
        (lambda: TokenBucket(refill_per_s=2.0), TypeError, "needs capacity"),
        (lambda: TokenBucket(5, 2.0, 1), TypeError, "at most 2 positional arguments (3 given)"),
        (lambda: TokenBucket(5, capacity=5, refill_per_s=1.0), TypeError, "multiple values for argument 'capacity'"),
        (lambda: TokenBucket(5, 1.0, refill_per_s=1.0), TypeError, "multiple values for argument 'refill_per_s'"),
        (lambda: TokenBucket(capacity=5, refill_per_s=[1]), TypeError, "refill_per_s must be a number"),
        (lambda: TokenBucket(capacity=5, refill_per_s=float("nan")), ValueError, "refill_per_s must be a positive, finite number"),
        (lambda: TokenBucket("99999999999999999999/s"), ConfigError, "too large"),
        (lambda: LeakyBucket("10/q", capacity=5), ConfigError, 'unknown unit "q"'),
        (lambda: LeakyBucket(capacity=5, rate_per_s=b"10/s"), TypeError, "rate_per_s must be a number"),
        (lambda: LeakyBucket(b"10/s", capacity=5), TypeError, "multiple values for argument 'capacity'"),
        (lambda: LeakyQueue("10 minute", burst=5), ConfigError, "missing '/' or 'per'"),
        (lambda: LeakyQueue(None, burst=5), TypeError, "rate_per_s must be a number"),
        (lambda: GCRA("100/minute", limit=100, period_s=60.0), TypeError, "not a mix"),
        (lambda: GCRA("-5/minute"), ConfigError, "not a whole number"),
        (lambda: GCRA("5/month", capacity=1, burst=1), TypeError, "not both"),
    ],
)
def test_bad_rate_arguments(build, exc, needle):
    with pytest.raises(exc) as e:
        build()
    assert needle in str(e.value)
