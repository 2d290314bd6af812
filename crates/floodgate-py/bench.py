"""allow() calls per second from Python: floodgate's native classes against a pure-Python
token bucket with the same semantics (capacity, continuous refill, monotonic clock).

    python crates/floodgate-py/bench.py            # after installing the module
    python crates/floodgate-py/bench.py --asgi     # the request middleware's cost instead
    python crates/floodgate-py/bench.py --asgi-redis redis://127.0.0.1:6379   # ... on Redis

Each figure is the best of several rounds of N calls in a plain `for` loop (the loop's own cost
is included for every contender alike); the contenders alternate within each round so a
change of machine load hits both. Bounded: about ten seconds in all.
"""

import argparse
from functools import partial
import threading
import time

import floodgate
import floodgate._floodgate


class PyTokenBucket:
    """Pure-Python token bucket: `capacity` tokens, refilled continuously at
    `refill_per_s`, on time.monotonic(); the semantics of floodgate.TokenBucket."""

    def __init__(self, capacity, refill_per_s, lock=False):
        self.capacity = float(capacity)
        self.rate = float(refill_per_s)
        self.tokens = float(capacity)
        self.last = time.monotonic()
        self.lock = threading.Lock() if lock else None

    def _allow(self, now, cost):
        elapsed = now - self.last
        if elapsed > 0:
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
            self.last = now
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def allow(self, now=None, cost=1):
        if now is None:
            now = time.monotonic()
        if self.lock is None:
            return self._allow(now, cost)
        with self.lock:
            return self._allow(now, cost)


class PyKeyed:
    """Pure-Python per-key buckets in a dict (no cap, no eviction), behind one lock."""

    def __init__(self, capacity, refill_per_s):
        self.capacity, self.rate = capacity, refill_per_s
        self.buckets = {}
        self.lock = threading.Lock()

    def allow(self, key, now=None, cost=1):
        with self.lock:
            b = self.buckets.get(key)
            if b is None:
                b = self.buckets[key] = PyTokenBucket(self.capacity, self.rate)
            return b.allow(now, cost)


def timed(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def threaded(make_fn, threads, n):
    fns = [make_fn(i) for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def run(fn):
        barrier.wait()
        for _ in range(n // threads):
            fn()

    ts = [threading.Thread(target=run, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return threads * (n // threads) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200_000, help="calls per timed run")
    ap.add_argument("--rounds", type=int, default=7, help="rounds; each runs every case once")
    ap.add_argument("--redis", metavar="URL", help="also time throttle() against this Redis (loopback)")
    ap.add_argument("--asgi", action="store_true",
                    help="time RequestLimiter.decide and the ASGI middleware per request instead")
    ap.add_argument("--asgi-redis", metavar="URL",
                    help="time the ASGI middleware on a RedisStore at URL on an asyncio loop")
    args = ap.parse_args()
    if floodgate._floodgate.BUILD_PROFILE != "release":
        print("warning: this floodgate is a debug build (maturin build without --release); "
              "install a release build to benchmark: pip install ./crates/floodgate-py\n")
    if args.asgi:
        bench_asgi(args.n // 4, args.rounds)
        return
    if args.asgi_redis:
        bench_asgi_redis(args.asgi_redis, args.n // 40, args.rounds)
        return
    n = args.n
    cap, refill = 1_000_000_000, 1e6  # never empties: every call takes the same path

    fg = floodgate.TokenBucket(capacity=cap, refill_per_s=refill)
    py = PyTokenBucket(cap, refill)
    pyl = PyTokenBucket(cap, refill, lock=True)
    fk = floodgate.KeyedLimiter(floodgate.TokenBucket(capacity=cap, refill_per_s=refill))
    pk = PyKeyed(cap, refill)
    keys = [f"user-{i}" for i in range(1000)]
    for k in keys:  # both stores hold the 1000 keys before timing
        fk.allow(k)
        pk.allow(k)

    def cycling(allow):
        it = iter(range(1 << 62))
        return lambda: allow(keys[next(it) % 1000])

    # (case, floodgate, pure Python): the same call on both sides, timed alternately.
    cases = [
        ("TokenBucket.allow() (monotonic clock)", lambda: timed(fg.allow, n), lambda: timed(py.allow, n)),
        ("TokenBucket.allow() vs pure Python + threading.Lock", None, lambda: timed(pyl.allow, n)),
        ("TokenBucket.allow(now) (explicit time)", lambda: timed(partial(fg.allow, 5.0), n), lambda: timed(partial(py.allow, 5.0), n)),
        ("KeyedLimiter.allow(key), 1000 keys", lambda: timed(cycling(fk.allow), n), lambda: timed(cycling(pk.allow), n)),
        ("KeyedLimiter.allow(key), 4 threads, a key each", lambda: threaded(lambda i: (lambda k=keys[i]: fk.allow(k)), 4, n),
         lambda: threaded(lambda i: (lambda k=keys[i]: pk.allow(k)), 4, n)),
    ]
    best = {}
    for _ in range(args.rounds):
        for name, f, p in cases:
            for side, fn in (("fg", f), ("py", p)):
                if fn is not None:
                    best[name, side] = max(best.get((name, side), 0.0), fn())
    best["TokenBucket.allow() vs pure Python + threading.Lock", "fg"] = best[cases[0][0], "fg"]

    print(f"floodgate {floodgate.__version__}, best of {args.rounds} rounds of {n:,} calls\n")
    print("| call | floodgate calls/s | pure Python calls/s | floodgate / pure Python |")
    print("|---|---:|---:|---:|")
    for name, _, _ in cases:
        f, p = best[name, "fg"], best[name, "py"]
        print(f"| {name} | {f:,.0f} | {p:,.0f} | {f / p:.1f}x |")
    if args.redis:
        bench_throttle(args.redis)


def bench_throttle(url, calls=5000):
    """Sequential throttle() round trips, then 4 threads; the key refills within a second
    (1,000,000 per 1 s), so it expires from Redis by itself right after."""
    key = f"bench-{time.time_ns()}"
    floodgate.throttle(key, 10, 1_000_000, 1, url=url)  # connect once, outside the timing
    one = timed(lambda: floodgate.throttle(key, 10, 1_000_000, 1, url=url, timeout_s=1.0), calls)
    four = threaded(
        lambda i: (lambda: floodgate.throttle(key, 10, 1_000_000, 1, url=url, timeout_s=1.0)), 4, calls
    )
    print(f"\nthrottle() on {url}: {one:,.0f} calls/s from one thread, {four:,.0f} calls/s from 4 threads")


#: The request head uvicorn gives an ASGI app for `wrk -c32 http://127.0.0.1:8000/item`.
HEADERS = [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk/4.2.0"),
           (b"accept", b"*/*")]


def scope():
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": "/item", "raw_path": b"/item",
            "query_string": b"", "root_path": "", "headers": HEADERS,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}


async def plain_app(scope, receive, send):
    """The smallest ASGI app: a 200 with a 2-byte JSON body."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def asgi_loop(app, n):
    """Seconds per request of `app` called n times in process: no server, no event loop
    (nothing awaited ever suspends, so each request's coroutine runs to its end on its first
    step); every message sent is checked to be the expected status."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    t0 = time.perf_counter()
    for _ in range(n):
        coro = app(scope(), receive, send)
        try:
            coro.send(None)
        except StopIteration:
            pass
        else:
            raise RuntimeError("the app suspended: this loop times only apps that never wait")
    elapsed = time.perf_counter() - t0
    if sent[0]["status"] != 200 or len(sent) != 2 * n:
        raise RuntimeError(f"unexpected answer: {sent[0]}")
    return elapsed / n


def bench_asgi(n, rounds):
    """What floodgate's ASGI middleware adds to a request when the limit does not bind,
    in process: the native decide alone, then the plain app with and without the middleware
    (the limiter of scripts/lib/bench_python_app.py, in memory), each the best of `rounds`."""
    from floodgate import Policy, RequestLimiter, Route
    from floodgate.asgi import RateLimitMiddleware

    rate = "100000000/minute"
    limiter = RequestLimiter([Policy("item", rate, algorithm="gcra", capacity=100_000_000, key="ip")],
                             routes=[Route("/item", policies={"item": 1})])
    wrapped = RateLimitMiddleware(plain_app, limiter=limiter)
    v = limiter.decide("GET", b"/item", HEADERS, client="127.0.0.1")
    assert v.allowed and v.headers, v

    def decide_loop(n):
        t0 = time.perf_counter()
        for _ in range(n):
            limiter.decide("GET", b"/item", HEADERS, client="127.0.0.1")
        return (time.perf_counter() - t0) / n

    cases = [("RequestLimiter.decide (in memory)", decide_loop),
             ("plain ASGI app", lambda n: asgi_loop(plain_app, n)),
             ("plain ASGI app + RateLimitMiddleware (in memory)", lambda n: asgi_loop(wrapped, n))]
    best = {}
    for _ in range(rounds):
        for name, fn in cases:
            best[name] = min(best.get(name, float("inf")), fn(n))
    print(f"floodgate {floodgate.__version__}, best of {rounds} rounds of {n:,} requests, in process\n")
    print("| per request | µs |")
    print("|---|---:|")
    for name, _ in cases:
        print(f"| {name} | {best[name] * 1e6:.2f} |")
    added = best[cases[2][0]] - best[cases[1][0]]
    print(f"| added by the middleware | {added * 1e6:.2f} |")


def bench_asgi_redis(url, n, rounds, concurrency=32):
    """What the middleware costs on Redis, on an asyncio event loop (no server, no
    sockets but Redis's): n requests one after another (the latency of one decision:
    the round trip and the hand-offs to the I/O threads and back), and n requests by
    `concurrency` tasks at once (as a server's connections), with the event loop
    thread's CPU time per request (`time.thread_time`: what the loop cannot spend on
    other requests) and the process's. A round trip of the `redis` package's asyncio
    client (PING), when installed, is the reference. Each figure is the best of
    `rounds`."""
    import asyncio
    import uuid

    from floodgate import Policy, RedisStore, RequestLimiter, Route
    from floodgate.asgi import RateLimitMiddleware

    prefix = f"floodgate-bench-{uuid.uuid4().hex}:"
    limiter = RequestLimiter(
        [Policy("item", "100000000/minute", algorithm="gcra", capacity=100_000_000, key="ip")],
        routes=[Route("/item", policies={"item": 1})], store=RedisStore(url, prefix=prefix))
    wrapped = RateLimitMiddleware(plain_app, limiter=limiter)
    try:
        import redis.asyncio as aredis
    except ImportError:
        aredis = None

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def one(app, sent):
        async def send(message):
            sent.append(message)
        await app(scope(), receive, send)

    async def requests(app, n, at_once):
        """(wall, loop thread CPU, process CPU) seconds per request."""
        sent = []

        async def worker(k):
            for _ in range(k):
                await one(app, sent)
        w0, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        await asyncio.gather(*(worker(n // at_once) for _ in range(at_once)))
        w, t, p = time.perf_counter() - w0, time.thread_time() - t0, time.process_time() - p0
        done = (n // at_once) * at_once
        if any(m.get("status", 200) != 200 for m in sent) or len(sent) != 2 * done:
            raise RuntimeError(f"unexpected answer: {sent[:2]}")
        return w / done, t / done, p / done

    async def decides(n):
        t0 = time.perf_counter()
        for _ in range(n):
            await limiter.decide_async("GET", b"/item", HEADERS, "127.0.0.1")
        return (time.perf_counter() - t0) / n

    async def pings(client, n):
        t0 = time.perf_counter()
        for _ in range(n):
            await client.ping()
        return (time.perf_counter() - t0) / n

    async def main():
        client = aredis.Redis.from_url(url) if aredis else None
        cases = [("plain ASGI app, 32 at once", lambda: requests(plain_app, n, concurrency)),
                 ("+ RateLimitMiddleware on Redis, one at a time", lambda: requests(wrapped, n, 1)),
                 ("+ RateLimitMiddleware on Redis, 32 at once",
                  lambda: requests(wrapped, n, concurrency))]
        best = {}
        for _ in range(rounds):
            for name, fn in cases:
                got = await fn()
                best[name] = tuple(min(a, b) for a, b in zip(best.get(name, got), got))
            for name, fn in [("await RequestLimiter.decide_async, one at a time",
                              lambda: decides(n))] + (
                    [("await redis.asyncio PING, one at a time", lambda: pings(client, n))]
                    if client else []):
                best[name] = min(best.get(name, float("inf")), await fn())
        if client:
            keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()
        return best

    best = asyncio.run(main())
    print(f"floodgate {floodgate.__version__}, best of {rounds} rounds of {n:,} requests, "
          f"on {url}\n")
    print("| per request | wall µs | loop thread CPU µs | process CPU µs |")
    print("|---|---:|---:|---:|")
    for name, v in best.items():
        if isinstance(v, tuple):
            print(f"| {name} | {v[0] * 1e6:.1f} | {v[1] * 1e6:.1f} | {v[2] * 1e6:.1f} |")
        else:
            print(f"| {name} | {v * 1e6:.1f} | | |")


if __name__ == "__main__":
    main()
