"""Type stubs for floodgate's native module. Every time and duration is in seconds."""

from collections.abc import Awaitable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, Literal, final, overload

__version__: str
BUILD_PROFILE: str
"""``"release"`` or ``"debug"`` (how the native module was compiled)."""

class ConfigError(ValueError):
    """A limiter parameter that cannot work (zero limit, delay above burst, overflow...)."""

class RedisError(ConnectionError):
    """Redis could not answer: unreachable, not Redis, an error reply, a broken connection."""

class RedisTimeoutError(RedisError):
    """Redis did not answer within the call's timeout."""

class StoreUnavailable(RedisError):
    """The decision store (Redis) could not answer, and the limiter was told to raise
    (``on_failure="raise"``) rather than decide under its fault policy."""

class RateLimitExceeded(Exception):
    """``acquire`` gave up: the cost can never be admitted, or the next admission comes
    after ``timeout_s``. ``decision`` is the last Decision."""

    decision: Decision

def throttle(
    key: str | bytes,
    max_burst: int,
    count: int,
    period: int,
    quantity: int = 1,
    url: str = "redis://127.0.0.1:6379",
    *,
    prefix: str = "floodgate:",
    timeout_s: float = 0.25,
) -> tuple[int, int, int, int, int]:
    """redis-cell's ``CL.THROTTLE key max_burst count period [quantity]`` on any Redis (no
    module): ``(limited, limit, remaining, retry_after_s, reset_after_s)``. ``count`` per
    ``period`` seconds, bursts of ``max_burst + 1``; ``quantity`` 0 only looks.
    The connection (per url and prefix) is opened on first use (1 s connect limit) and
    kept; the GIL is released while waiting.
    Raises ValueError for bad arguments, RedisTimeoutError / RedisError when Redis cannot
    answer."""

def parse_rate(rate: str) -> tuple[int, float]:
    """A rate string as ``(count, period_s)``, read as every floodgate surface reads it:
    ``"100/minute"`` and ``"100 per minute"`` are ``(100, 60.0)``, ``"10/2 minutes"`` is
    ``(10, 120.0)``, ``"5/s"`` ``(5, 1.0)``. Units: ns, us, ms, s, m or min, h, d, and the
    words second, minute, hour, day, month (30 days), year (360 days), singular or plural,
    any case. Raises ConfigError naming what is wrong."""

def parse_rates(rates: str) -> list[tuple[int, float]]:
    """Several limits separated by ``;``, ``,`` or ``|`` (``"1/second; 100/minute"``), in
    the order written. Raises ConfigError naming the limit that is wrong."""

@final
class Decision:
    """The outcome of one request. ``bool(decision)`` is ``decision.allowed``."""

    @property
    def allowed(self) -> bool:
        """Whether the request is admitted (after ``delay`` seconds for a LeakyQueue)."""
    @property
    def limit(self) -> int:
        """The most units admitted at once from rest."""
    @property
    def remaining(self) -> int:
        """Units that could still be admitted right now, after this request."""
    @property
    def retry_after(self) -> float | None:
        """Seconds until a request of the same cost would be admitted; None when allowed
        or when it never can be (cost above the limit)."""
    @property
    def reset_after(self) -> float:
        """Seconds until the limiter is back at full capacity if nothing else arrives."""
    @property
    def delay(self) -> float:
        """Seconds to hold an admitted request before forwarding it (LeakyQueue only)."""
    @property
    def reason(self) -> str | None:
        """Why it was denied ("rate limited" or cost above the limit); None when allowed."""
    @property
    def never(self) -> bool:
        """True when the cost is above the limit: retrying can never succeed."""
    def throttle_reply(self) -> tuple[int, int, int, int, int]:
        """redis-cell's CL.THROTTLE reply: (limited, limit, remaining, retry_after_s,
        reset_after_s), durations truncated to whole seconds as the module truncates
        them (3.9 s is 3), -1 for no retry-after."""
    def __bool__(self) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Limiter:
    """Base class of the single-key limiters; not constructed directly.

    ``now`` is seconds on the limiter's own time axis; when omitted, a monotonic clock
    started when the limiter was created is read. ``cost`` is a whole number of units >= 0.
    Raises ValueError for a negative/NaN/infinite ``now`` or a negative ``cost``.
    """

    def allow(self, now: float | None = None, cost: int = 1) -> bool:
        """Decide and consume ``cost`` when admitted; True when admitted."""
    def check(self, now: float | None = None, cost: int = 1) -> Decision:
        """Decide and consume ``cost`` when admitted; the full Decision."""
    def peek(self, now: float | None = None, cost: int = 1) -> Decision:
        """The Decision ``check`` would return, consuming nothing."""
    @property
    def limit(self) -> int:
        """The most units admitted at once from rest."""
    @property
    def kind(self) -> str:
        """The algorithm's config name: "fixed-window", "token-bucket", "gcra", ..."""

@final
class FixedWindow(Limiter):
    """At most ``limit`` per aligned window of ``window_s`` seconds; up to 2 x limit
    across a boundary. ``FixedWindow("100/minute")`` is limit 100, window_s 60."""

    def __init__(self, limit: int | str, window_s: float | None = None) -> None: ...

@final
class SlidingLog(Limiter):
    """At most ``limit`` in any rolling window of ``window_s`` seconds, exactly
    (``SlidingLog("100 per hour")``: limit and window from a rate string)."""

    def __init__(self, limit: int | str, window_s: float | None = None) -> None: ...

@final
class SlidingCounter(Limiter):
    """At most ``limit`` per aligned window; the weighted rolling estimate stays <= limit.
    ``limit`` may be a rate string in place of both (``"100/minute"``)."""

    def __init__(self, limit: int | str, window_s: float | None = None) -> None: ...

@final
class TokenBucket(Limiter):
    """``capacity`` tokens refilled at ``refill_per_s`` per second (fractional allowed),
    or at a rate string's rate: ``TokenBucket("10/s", capacity=20)`` (capacity defaults to
    the rate's count)."""

    @overload
    def __init__(self, capacity: int, refill_per_s: float | str) -> None: ...
    @overload
    def __init__(self, rate: str, /, *, capacity: int | None = None) -> None: ...

@final
class LeakyBucket(Limiter):
    """Leaky bucket as a meter: ``capacity`` at once, draining at ``rate_per_s``, or at a
    rate string's rate: ``LeakyBucket("10/s", capacity=5)`` (capacity defaults to the
    rate's count)."""

    @overload
    def __init__(self, capacity: int, rate_per_s: float | str) -> None: ...
    @overload
    def __init__(self, rate: str, /, *, capacity: int | None = None) -> None: ...

LeakyMeter = LeakyBucket

@final
class LeakyQueue(Limiter):
    """nginx ``limit_req rate=R burst=B [nodelay | delay=N]``; Decision.delay says how long
    to hold an admitted request. ``rate_per_s`` may be a rate string (``"10/s"``)."""

    def __init__(
        self,
        rate_per_s: float | str,
        burst: int,
        nodelay: bool = False,
        delay: int | None = None,
    ) -> None: ...

@final
class GCRA(Limiter):
    """Generic cell rate algorithm (redis-cell). Rate: ``rate_per_s``, or ``limit`` per
    ``period_s``, or a rate string (``GCRA("100/minute", burst=9)``). Burst: ``capacity``
    units at once, or ``burst`` = capacity - 1; default ``limit`` (a rate string's count)
    or ceil(rate_per_s)."""

    def __init__(
        self,
        rate_per_s: float | str | None = None,
        capacity: int | None = None,
        *,
        burst: int | None = None,
        limit: int | None = None,
        period_s: float | None = None,
    ) -> None: ...
    @staticmethod
    def from_cell(max_burst: int, count: int, period: int) -> GCRA:
        """CL.THROTTLE's parameters: ``count`` per ``period`` seconds, bursts of max_burst + 1."""

@final
class InFlightFull(RuntimeError):
    """Raised by InFlight.hold when every place is taken; args[1] is the Decision."""

class Lease:
    """A held place; released by release() or on leaving a ``with`` block."""

    @property
    def id(self) -> int: ...
    @property
    def key(self) -> bytes: ...
    @property
    def decision(self) -> Decision: ...
    @property
    def expires(self) -> float: ...
    def release(self, now: float | None = None) -> bool:
        """Give the place back: True the first time, False after."""
    def renew(self, now: float | None = None) -> bool:
        """Extend to now + ttl; False when released or expired."""
    def __enter__(self) -> Lease: ...
    def __exit__(self, *exc: object) -> bool: ...

class InFlight:
    """At most ``n`` calls of one key in flight at once, as leases living ``ttl`` seconds
    unless released first; at most ``max_keys`` keys (default 100000). Thread-safe."""

    def __init__(self, n: int, ttl: float, max_keys: int | None = None) -> None: ...
    def acquire(self, key: str | bytes | None = None, now: float | None = None) -> Lease | None:
        """A Lease, or None when n are in flight."""
    def hold(self, key: str | bytes | None = None, now: float | None = None) -> Lease:
        """A Lease for a ``with`` block; raises InFlightFull when none is free."""
    def check(self, key: str | bytes | None = None, now: float | None = None) -> Decision: ...
    def release(self, key: str | bytes, lease_id: int, now: float | None = None) -> bool: ...
    def renew(self, key: str | bytes, lease_id: int, now: float | None = None) -> bool: ...
    def in_flight(self, key: str | bytes | None = None, now: float | None = None) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def ttl(self) -> float: ...

class KeyedLimiter:
    """Per-key limits of ``algorithm`` (a Limiter used as a template), at most ``max_keys``
    keys (default 100000). Keys are str or bytes ("a" and b"a" are the same key).
    Thread-safe; `sweep`, `stats` and `len` release the GIL."""

    def __init__(
        self,
        algorithm: Limiter,
        max_keys: int | None = None,
        *,
        store: RedisStore | None = None,
        name: str = "default",
        on_failure: Literal["allow", "deny", "raise"] = "allow",
    ) -> None:
        """With ``store``, the keys are kept in Redis under the policy ``name`` (shared with
        other processes and with ``floodgate proxy``'s policy of that name); time is Redis
        TIME (``now`` is refused); when Redis cannot answer, decisions admit (``allow``),
        deny with a 1 s retry (``deny``) or raise StoreUnavailable (``raise``).
        On Redis, ``reserve`` and ``Reservation.settle`` charge and refund the shared count;
        ``peek`` decides as a request of ``cost`` would be, charging nothing (one script
        call in its dry mode); ``sweep`` returns 0 (Redis
        expires keys by TTL); ``stats``, ``len`` and the quota setters raise TypeError."""
    def acquire(
        self, key: str | bytes, cost: int = 1, timeout_s: float | None = None
    ) -> Decision:
        """Wait (sleeping, the GIL released) until admitted, and for a LeakyQueue's delay;
        RateLimitExceeded when never admissible or not within ``timeout_s``."""
    def check_async(self, key: str | bytes, cost: int = 1) -> Awaitable[Decision]:
        """``check`` as an awaitable: Redis round trips never block the event loop."""
    def peek_async(self, key: str | bytes, cost: int = 1) -> Awaitable[Decision]:
        """``peek`` as an awaitable."""
    @property
    def store(self) -> RedisStore | None: ...
    @property
    def name(self) -> str | None:
        """The policy name in Redis (None in process)."""
    def allow(self, key: str | bytes, now: float | None = None, cost: int = 1) -> bool: ...
    def check(self, key: str | bytes, now: float | None = None, cost: int = 1) -> Decision: ...
    def peek(self, key: str | bytes, now: float | None = None, cost: int = 1) -> Decision:
        """``check``'s decision, consuming nothing. On a RedisStore the key is read at cost
        0 whatever ``cost`` is (``allowed`` answers for cost 0; compare ``remaining``)."""
    def set_key_algorithm(self, key: str | bytes, algorithm: Limiter) -> None:
        """Give ``key`` its own quota (in process; TypeError on a RedisStore)."""
    def clear_key_algorithm(self, key: str | bytes) -> None:
        """Return ``key`` to the default quota (in process; TypeError on a RedisStore)."""
    def set_algorithm(self, algorithm: Limiter) -> None:
        """Replace the default quota; per-key state is kept (in process; TypeError on a
        RedisStore)."""
    def reserve(
        self, key: str | bytes, estimate: int = 1, now: float | None = None
    ) -> Reservation:
        """Admit at ``estimate``; settle the actual cost on the returned Reservation (on a
        RedisStore: one round trip each, the same semantics; ``now`` is refused)."""
    def sweep(self, now: float | None = None) -> int:
        """Drop keys back at full capacity (loses nothing); returns how many. On a
        RedisStore: 0, nothing to do (Redis expires keys by TTL)."""
    def stats(self) -> dict[str, int]:
        """{"keys", "idle_dropped", "evicted", "max_keys"}. TypeError on a RedisStore (no
        per-process key table)."""
    @property
    def max_keys(self) -> int: ...
    @property
    def algorithm(self) -> Limiter: ...
    def __len__(self) -> int:
        """Keys held. TypeError on a RedisStore (no per-process key table)."""

@final
class Reservation:
    """A request admitted (or not) at an estimate by ``KeyedLimiter.reserve``, settled
    once with its actual cost: ``r.settle(300)``, or as a context manager whose ``cost``,
    when set, is settled when the block ends (unset: the estimate stays)."""

    @property
    def allowed(self) -> bool: ...
    @property
    def decision(self) -> Decision: ...
    @property
    def estimate(self) -> int: ...
    @property
    def charged(self) -> int | None: ...
    @property
    def refunded(self) -> int | None: ...
    @property
    def cost(self) -> int | None: ...
    @cost.setter
    def cost(self, cost: int) -> None: ...
    def settle(self, actual: int, now: float | None = None) -> Decision:
        """Settle once; the key's state after it. ValueError: denied, settled already,
        or ``actual`` not a whole number >= 0. On a RedisStore: StoreUnavailable when Redis
        does not answer (the reservation stays open); a request admitted by the fault
        policy charged nothing and settles to its own decision."""
    def __enter__(self) -> Reservation: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class RedisStore:
    """Decisions kept in Redis, with the scripts and key layout of ``floodgate proxy``'s
    ``[store] type = "redis"``: ``prefix`` (default ``"floodgate:"``), ``timeout_s`` per
    decision (default 0.05), ``connect_timeout_s`` (default 1.0). Connected on first use
    in each process; a Redis that does not answer yet is not an error."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379",
        *,
        prefix: str = "floodgate:",
        timeout_s: float = 0.05,
        connect_timeout_s: float = 1.0,
    ) -> None: ...
    def reachable(self) -> bool:
        """Whether Redis answers now."""
    @property
    def prefix(self) -> str: ...

KeySpec = str | Sequence[str]
"""``"ip"``, ``"global"``, ``"route"``, ``"header:NAME"``, ``"provided"``, or a list."""

@final
class Policy:
    """One named limit, as ``floodgate proxy``'s ``[[policy]]`` with its defaults:
    ``rate`` ("10/s", "100/min"), ``algorithm`` (default "leaky-queue"), ``burst`` or
    ``capacity`` (default 1), ``nodelay``/``delay`` (leaky queue), ``key`` (default "ip";
    "provided": the key passed to ``decide(keys=...)``), ``dry_run``, ``advertise``; or
    ``max_in_flight`` (leases held until ``Verdict.finish``) with ``lease_ttl_s``; or
    ``adaptive`` ("gradient2", "vegas", "aimd"): one concurrency limit (key "global"
    unless ``key``) between ``min_limit`` (1) and ``max_limit`` (200) from
    ``initial_limit`` (20), following the latency from ``decide`` to ``Verdict.finish``;
    ``queue``/``queue_timeout_s``, ``drop_on`` and ``classes`` (dicts of "name",
    "share", "match") as the proxy's; a refused request gets 503 with Retry-After."""

    def __init__(
        self,
        name: str,
        rate: str | None = None,
        *,
        algorithm: str = "leaky-queue",
        burst: int | None = None,
        capacity: int | None = None,
        key: KeySpec | None = None,
        dry_run: bool = False,
        advertise: bool = False,
        nodelay: bool = False,
        delay: int | None = None,
        max_in_flight: int | None = None,
        lease_ttl_s: float | None = None,
        adaptive: str | None = None,
        min_limit: int | None = None,
        max_limit: int | None = None,
        initial_limit: int | None = None,
        queue: int | None = None,
        queue_timeout_s: float | None = None,
        drop_on: list[str] | None = None,
        classes: list[dict[str, object]] | None = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...

@final
class Route:
    """Paths starting with ``prefix`` (longest prefix wins), optionally only ``methods``,
    checked against ``policies`` ({name: cost} or names at ``cost``, default 1).
    ``estimate``/``estimate_header`` admit at an estimate settled after the response
    (``Verdict.settle``); ``abort_cost`` is charged when no cost comes."""

    def __init__(
        self,
        prefix: str = "/",
        *,
        policies: Mapping[str, int] | Sequence[str],
        methods: Sequence[str] | None = None,
        cost: int | None = None,
        estimate: int | None = None,
        estimate_header: str | None = None,
        cost_header: str | None = None,
        abort_cost: int | None = None,
    ) -> None: ...
    @property
    def prefix(self) -> str: ...

Headers = Mapping[str, str] | Mapping[bytes, bytes] | Iterable[tuple[str | bytes, str | bytes]]

@final
class RequestLimiter:
    """The decision procedure of ``floodgate proxy`` for requests a Python application
    serves: the same keys, headers and denials, byte for byte. Defaults are the proxy's."""

    def __init__(
        self,
        policies: Sequence[Policy],
        *,
        routes: Sequence[Route] | None = None,
        store: RedisStore | None = None,
        on_store_failure: Literal["allow", "deny", "fail-open", "fail-closed"] = "allow",
        trusted_proxies: Sequence[str] = (),
        forwarded_header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        deny_status: int | None = None,
        missing_key: Literal["deny", "allow", "fallback"] = "deny",
        fallback_key: str | bytes | None = None,
        missing_key_status: int | None = None,
        retry_after_jitter_s: float = 1.0,
        max_keys: int | None = None,
        ratelimit_headers: bool = True,
        legacy_headers: Literal["off", "delta", "epoch"] | None = None,
        delay_header: bool = True,
        allowlist_ips: Sequence[str] = (),
        allowlist_keys: Sequence[str | bytes] = (),
    ) -> None: ...
    def decide(
        self,
        method: str,
        path: str | bytes,
        headers: Headers | None = None,
        client: str | tuple[str, int] | None = None,
        keys: str | bytes | Mapping[str, str | bytes] | None = None,
    ) -> Verdict:
        """Decide on one request (the GIL released). ``client``: the peer address, or
        ASGI's (host, port); ``keys``: for policies keyed "provided"."""
    def decide_async(
        self,
        method: str,
        path: str | bytes,
        headers: Headers | None = None,
        client: str | tuple[str, int] | None = None,
        keys: str | bytes | Mapping[str, str | bytes] | None = None,
    ) -> Awaitable[Verdict]:
        """``decide`` as an awaitable; never blocks the event loop."""
    def decide_scope(
        self,
        scope: MutableMapping[str, Any],
        keys: str | bytes | Mapping[str, str | bytes] | None = None,
    ) -> list[tuple[bytes, bytes]] | Verdict:
        """Decide on an ASGI HTTP scope's request (method, raw_path or path, headers,
        client host) in one call: the header fields to add (bytes pairs) when it passes at
        once holding nothing to release, else the Verdict to act on and finish."""
    def decide_scope_async(
        self,
        scope: MutableMapping[str, Any],
        keys: str | bytes | Mapping[str, str | bytes] | None = None,
    ) -> Awaitable[list[tuple[bytes, bytes]] | Verdict]:
        """``decide_scope`` as an awaitable; the scope is read before it returns."""
    @property
    def waits(self) -> bool:
        """True on a RedisStore (await decide_async); False in process (decide never waits)."""
    def policies(self) -> list[str]: ...
    def store_reachable(self) -> bool: ...
    def metrics(self) -> str:
        """The Prometheus/OpenMetrics text of the limiter's metrics."""

@final
class Verdict:
    """What a RequestLimiter decided. ``allowed``: forward after ``delay_s``, adding
    ``headers``; else send ``response`` = (status, headers, body). Hold it while the
    request runs and ``finish()`` it after (or use ``with``)."""

    @property
    def allowed(self) -> bool: ...
    @property
    def delay_s(self) -> float: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def header_bytes(self) -> list[tuple[bytes, bytes]]:
        """``headers`` as the bytes an ASGI server sends, names lower case."""
        ...
    @property
    def response(self) -> tuple[int, list[tuple[str, str]], bytes] | None: ...
    @property
    def policy(self) -> str | None: ...
    @property
    def outcome(self) -> Literal["allowed", "limited", "shadow", "allowlisted"] | None: ...
    def settle(self, actual_cost: int) -> list[tuple[str, str]]:
        """Settle a route's estimate with the actual cost; the settled RateLimit headers."""
    def settle_async(self, actual_cost: int) -> Awaitable[list[tuple[str, str]]]: ...
    @property
    def cost_header(self) -> str | None:
        """The response header the route settles its cost from, while the reservation is open."""
    def settle_from_response(
        self, headers: Mapping[str, str | bytes] | Iterable[tuple[str | bytes, str | bytes]]
    ) -> list[tuple[str, str]]:
        """Settle from the application's response header fields (the route's cost_header):
        the settled state's RateLimit headers, or `headers` when nothing was settled."""
    def settle_from_response_async(
        self, headers: Mapping[str, str | bytes] | Iterable[tuple[str | bytes, str | bytes]]
    ) -> Awaitable[list[tuple[str, str]]]: ...
    def finish(self, status: int | None = None) -> None:
        """Release the in-flight leases, the adaptive permits (the time since ``decide``
        is the latency sample; a 5xx ``status`` a drop under ``drop_on``) and an open
        reservation (idempotent)."""
    def __bool__(self) -> bool: ...
    def __enter__(self) -> Verdict: ...
    def __exit__(self, *exc: object) -> bool: ...
