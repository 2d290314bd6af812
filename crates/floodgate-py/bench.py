"""allow() calls per second from Python: floodgate's native classes against a pure-Python
token bucket with the same semantics (capacity, continuous refill, monotonic clock).

    python crates/floodgate-py/bench.py            # after installing the module

Each line is the best of 5 timed runs of N calls in a plain `for` loop (the loop's own cost
is included for every contender alike). Bounded: a few seconds in all.
"""

import argparse
import threading
import time

import floodgate


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


def rate(fn, n, runs=5):
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def threaded_rate(make_fn, threads, n, runs=3):
    best = float("inf")
    for _ in range(runs):
        fns = [make_fn(i) for i in range(threads)]
        barrier = threading.Barrier(threads + 1)

        def run(fn):
            barrier.wait()
            for _ in range(n):
                fn()

        ts = [threading.Thread(target=run, args=(f,)) for f in fns]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return threads * n / best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=300_000, help="calls per timed run")
    args = ap.parse_args()
    n = args.n
    cap, refill = 1_000_000_000, 1e6  # never empties: every call takes the same path

    fg = floodgate.TokenBucket(capacity=cap, refill_per_s=refill)
    py = PyTokenBucket(cap, refill)
    pyl = PyTokenBucket(cap, refill, lock=True)
    fk = floodgate.KeyedLimiter(floodgate.TokenBucket(capacity=cap, refill_per_s=refill))
    pk = PyKeyed(cap, refill)
    keys = [f"user-{i}" for i in range(1000)]
    rows = []

    def add(name, per_s, base=None):
        rows.append((name, per_s))

    add("floodgate.TokenBucket.allow()", rate(fg.allow, n))
    add("pure-Python token bucket allow()", rate(py.allow, n))
    add("pure-Python token bucket + Lock", rate(pyl.allow, n))
    add("floodgate.TokenBucket.allow(now)", rate(lambda: fg.allow(5.0), n))
    add("pure-Python token bucket allow(now)", rate(lambda: py.allow(5.0), n))
    it = iter(range(1 << 62))
    add("floodgate.KeyedLimiter.allow(key), 1000 keys", rate(lambda: fk.allow(keys[next(it) % 1000]), n))
    it = iter(range(1 << 62))
    add("pure-Python dict of buckets + Lock, 1000 keys", rate(lambda: pk.allow(keys[next(it) % 1000]), n))
    for threads in (1, 4):
        add(
            f"floodgate.KeyedLimiter.allow(key), {threads} thread(s)",
            threaded_rate(lambda i: (lambda k=keys[i]: fk.allow(k)), threads, n // threads),
        )
        add(
            f"pure-Python dict of buckets + Lock, {threads} thread(s)",
            threaded_rate(lambda i: (lambda k=keys[i]: pk.allow(k)), threads, n // threads),
        )

    ref = rows[1][1]
    width = max(len(r[0]) for r in rows)
    print(f"{'call':<{width}}  {'calls/s':>12}  {'vs pure Python':>14}")
    for name, per_s in rows:
        print(f"{name:<{width}}  {per_s:>12,.0f}  {per_s / ref:>13.2f}x")


if __name__ == "__main__":
    main()
