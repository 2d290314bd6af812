"""floodgate: rate limiting that names its guarantee at the window boundary.

Every algorithm of the Rust core as a class taking keyword arguments in seconds, or a
rate string as the ``limits`` package writes it (``FixedWindow("100/minute")``)::

    from floodgate import TokenBucket
    bucket = TokenBucket(capacity=10, refill_per_s=2.0)
    if bucket.allow():          # monotonic clock; or bucket.allow(now=12.5)
        ...
    d = bucket.check()          # Decision(allowed=..., limit=..., remaining=..., retry_after=...)

Classes: FixedWindow, SlidingLog, SlidingCounter, TokenBucket, LeakyBucket (alias
LeakyMeter), LeakyQueue, GCRA, all subclasses of Limiter; KeyedLimiter for per-key limits
(KeyedLimiter.reserve returns a Reservation, settled with the actual cost);
InFlight for at most n calls at once per key (leases: Lease, InFlightFull);
Decision; ConfigError (a ValueError). throttle() is redis-cell's CL.THROTTLE on any Redis
(RedisError, RedisTimeoutError when Redis cannot answer). parse_rate() and parse_rates()
read rate strings ("10 per minute", "1/second; 100/minute") as (count, period_s).
"""

from floodgate._floodgate import (
    GCRA,
    ConfigError,
    Decision,
    FixedWindow,
    InFlight,
    InFlightFull,
    KeyedLimiter,
    LeakyBucket,
    LeakyMeter,
    LeakyQueue,
    Lease,
    Limiter,
    RedisError,
    RedisTimeoutError,
    Reservation,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    __version__,
    parse_rate,
    parse_rates,
    throttle,
)

__all__ = [
    "ConfigError",
    "Decision",
    "FixedWindow",
    "GCRA",
    "InFlight",
    "InFlightFull",
    "KeyedLimiter",
    "LeakyBucket",
    "LeakyMeter",
    "LeakyQueue",
    "Lease",
    "Limiter",
    "RedisError",
    "RedisTimeoutError",
    "Reservation",
    "SlidingCounter",
    "SlidingLog",
    "TokenBucket",
    "__version__",
    "parse_rate",
    "parse_rates",
    "throttle",
]
