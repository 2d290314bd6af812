"""InFlight: at most n calls of one key at once, as expiring leases."""

import threading
import time

import pytest

import floodgate
from floodgate import InFlight, InFlightFull


def test_acquire_release_and_the_decision():
    gpu = InFlight(2, ttl=30.0)
    a = gpu.acquire("model", now=10.0)
    assert a is not None and a.decision.remaining == 1 and a.key == b"model"
    b = gpu.acquire("model", now=10.0)
    assert b.decision.remaining == 0
    assert gpu.acquire("model", now=10.0) is None
    d = gpu.check("model", now=12.0)
    assert not d.allowed and d.retry_after == pytest.approx(28.0)
    assert gpu.in_flight("model", now=12.0) == 2
    assert a.release(now=12.0) is True
    assert a.release(now=12.0) is False  # twice: frees nothing
    assert gpu.release("model", a.id, now=12.0) is False
    assert gpu.release("model", 123456789, now=12.0) is False  # never issued
    assert gpu.in_flight("model", now=12.0) == 1
    assert gpu.acquire("other", now=12.0) is not None  # keys are independent


def test_expired_leases_free_their_place_and_renew_keeps_one():
    gpu = InFlight(1, ttl=1.0)
    lease = gpu.acquire(now=0.0)
    assert gpu.acquire(now=0.5) is None
    assert lease.renew(now=0.9) is True  # now expires at 1.9
    assert gpu.acquire(now=1.5) is None
    assert gpu.acquire(now=1.9) is not None  # expired: the place is free
    assert lease.renew(now=2.0) is False
    assert lease.release(now=2.0) is False


def test_the_context_manager_releases_even_on_error():
    gpu = InFlight(1, ttl=30.0)
    with gpu.hold("k") as lease:
        assert gpu.in_flight("k") == 1
        with pytest.raises(InFlightFull) as e:
            gpu.hold("k")
        assert e.value.args[1].retry_after > 29.0
    assert gpu.in_flight("k") == 0 and lease.release() is False
    with pytest.raises(ValueError):
        with gpu.hold("k"):
            raise ValueError("boom")
    assert gpu.in_flight("k") == 0


def test_threads_never_exceed_n():
    gpu = InFlight(3, ttl=60.0)
    running, peak, lock = [0], [0], threading.Lock()

    def work():
        for _ in range(200):
            lease = gpu.acquire("k")
            if lease is None:
                continue
            with lease:
                with lock:
                    running[0] += 1
                    peak[0] = max(peak[0], running[0])
                time.sleep(0)
                with lock:
                    running[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] <= 3
    assert gpu.in_flight("k") == 0


@pytest.mark.parametrize(
    "args, kind, says",
    [
        ((0, 1.0), floodgate.ConfigError, "n"),
        ((1, 0.0), ValueError, "ttl"),
        ((1, float("nan")), ValueError, "ttl"),
        ((1, 1e9), floodgate.ConfigError, "ttl"),
        ((2_000_000, 1.0), floodgate.ConfigError, "max_in_flight"),
        (("2", 1.0), TypeError, "int"),
    ],
)
def test_bad_parameters_name_what_is_wrong(args, kind, says):
    with pytest.raises(kind) as e:
        InFlight(*args)
    assert says in str(e.value)


def test_bad_keys_and_times():
    gpu = InFlight(1, ttl=1.0)
    with pytest.raises(TypeError):
        gpu.acquire(5)
    with pytest.raises(ValueError):
        gpu.acquire("k", now=float("nan"))
    with pytest.raises(OverflowError):
        gpu.release("k", -1)
