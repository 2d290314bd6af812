"""KeyedLimiter: per-key state, the key cap, overrides, and many Python threads."""

import threading

import pytest

from floodgate import GCRA, FixedWindow, KeyedLimiter, LeakyQueue, SlidingLog, TokenBucket


def test_keys_are_independent_and_str_equals_bytes():
    k = KeyedLimiter(GCRA(rate_per_s=10.0, capacity=3), max_keys=1000)
    now = 1.0
    assert k.allow("alice", now) and k.allow("alice", now, cost=2)
    assert not k.allow("alice", now)
    assert not k.allow(b"alice", now)  # the UTF-8 bytes of "alice": the same key
    assert k.allow("bob", now)
    assert k.allow(b"\xff\x00raw", now)  # any byte string is a key
    assert k.allow("żółw", now)
    assert len(k) == 4
    d = k.peek("carol", now, 3)
    assert d.allowed and d.remaining == 0
    assert len(k) == 4  # peek stores nothing
    d = k.check("alice", now)
    assert not d.allowed and d.retry_after == pytest.approx(0.1)


def test_template_state_is_not_shared():
    template = TokenBucket(capacity=2, refill_per_s=1.0)
    assert template.allow(0.0) and template.allow(0.0)
    k = KeyedLimiter(template)
    assert k.allow("x", 0.0)  # fresh state per key
    assert k.algorithm is template
    assert 99_000 < k.max_keys <= 100_000  # the default, rounded down to the shards
    assert "TokenBucket(capacity=2, refill_per_s=1.0)" in repr(k)


def test_key_cap_and_stats():
    k = KeyedLimiter(FixedWindow(limit=5, window_s=1.0), max_keys=300)
    assert k.max_keys == 300
    for i in range(2000):
        assert k.allow(f"user-{i}", 0.5)
        assert len(k) <= 300
    st = k.stats()
    assert st["keys"] == len(k) <= 300
    assert st["evicted"] > 0 and st["max_keys"] == 300
    # at t=10 s every window is over: a sweep drops all (loses nothing)
    assert k.sweep(10.0) == st["keys"]
    assert len(k) == 0 and k.stats()["idle_dropped"] >= st["keys"]


def test_idle_keys_go_before_live_ones():
    k = KeyedLimiter(GCRA(rate_per_s=1.0, capacity=5), max_keys=256)
    for i in range(256):
        k.allow(i.to_bytes(4, "big"), 0.0)
    for i in range(256, 512):  # at t=100 s all earlier keys are back at full capacity
        k.allow(i.to_bytes(4, "big"), 100.0)
    assert k.stats() == {"keys": 256, "idle_dropped": 256, "evicted": 0, "max_keys": 256}
    for i in range(512, 600):  # now every held key is live: some must be evicted
        k.allow(i.to_bytes(4, "big"), 100.0)
    assert k.stats()["evicted"] > 0 and len(k) <= 256


def test_per_key_override_and_default_change():
    k = KeyedLimiter(TokenBucket(capacity=1, refill_per_s=1.0))
    k.set_key_algorithm("premium", TokenBucket(capacity=5, refill_per_s=1.0))
    assert sum(k.allow("premium", 0.0) for _ in range(10)) == 5
    assert sum(k.allow("basic", 0.0) for _ in range(10)) == 1
    k.clear_key_algorithm("premium")
    assert k.check("premium2", 0.0).limit == 1
    k.set_algorithm(TokenBucket(capacity=3, refill_per_s=1.0))
    assert k.check("new", 0.0).limit == 3
    assert isinstance(k.algorithm, TokenBucket) and k.algorithm.limit == 3


def test_leaky_queue_per_key_delays():
    k = KeyedLimiter(LeakyQueue(rate_per_s=10.0, burst=2))
    assert [k.check("a", 0.0).delay for _ in range(3)] == pytest.approx([0.0, 0.1, 0.2])
    assert not k.allow("a", 0.0)
    assert k.check("b", 0.0).delay == 0.0


def hammer(n_threads, calls, target):
    barrier = threading.Barrier(n_threads)
    counts = [0] * n_threads

    def run(i):
        barrier.wait()
        counts[i] = sum(target() for _ in range(calls))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    return sum(counts)


@pytest.mark.parametrize(
    "template",
    [
        TokenBucket(capacity=1000, refill_per_s=1e-6),
        GCRA(rate_per_s=1e-6, capacity=1000),
        SlidingLog(limit=1000, window_s=3600.0),
        FixedWindow(limit=1000, window_s=3600.0),
    ],
    ids=repr,
)
def test_eight_threads_on_one_key_admit_exactly_the_capacity(template):
    # 8 x 1000 calls on the real monotonic clock; the refill over the test's duration is
    # far below one unit, so exactly 1000 may pass: any overshoot is a race.
    k = KeyedLimiter(template, max_keys=1000)
    assert hammer(8, 1000, lambda: k.allow("hot")) == 1000
    assert len(k) == 1


def test_eight_threads_on_one_single_limiter():
    b = TokenBucket(capacity=1000, refill_per_s=1e-6)
    assert hammer(8, 1000, b.allow) == 1000
    g = GCRA(rate_per_s=1.0, capacity=500)
    assert hammer(8, 500, lambda: g.allow(42.0)) == 500


def test_threads_on_many_keys_with_the_cap():
    k = KeyedLimiter(TokenBucket(capacity=2, refill_per_s=1e-6), max_keys=512)
    local = threading.local()

    def one():
        local.i = getattr(local, "i", 0) + 1
        key = f"{threading.get_ident()}-{local.i % 300}"
        return k.allow(key, 5.0)

    total = hammer(8, 2000, one)
    assert len(k) <= 512
    assert 0 < total <= 8 * 2000
