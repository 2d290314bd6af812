"""throttle(): redis-cell's CL.THROTTLE through the floodgate-redis GCRA script, against the
shared Redis on 127.0.0.1:6379 (unique keys per run, deleted afterwards; nothing else on
that server is touched)."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

import floodgate
from floodgate import GCRA, RedisError, RedisTimeoutError, throttle
from web_servers import free_port, own_redis  # noqa: F401 - own_redis is a fixture

RUN = uuid.uuid4().hex


def redis_cli(*args):
    return subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", *args],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout


@pytest.fixture(scope="module", autouse=True)
def cleanup():
    yield
    if shutil.which("redis-cli"):
        keys = redis_cli("--scan", "--pattern", f"*{RUN}*").split()
        if keys:
            redis_cli("DEL", *keys)
        assert redis_cli("--scan", "--pattern", f"*{RUN}*").split() == []


def key(name):
    return f"{name}-{RUN}"


def test_fresh_key_matches_redis_cell_reference():
    # CL.THROTTLE user123 15 30 60 on a fresh key answers [0, 16, 15, -1, 2]; again at once,
    # [0, 16, 14, -1, 3]: 3.99... s to full capacity, truncated as redis-cell truncates
    assert throttle(key("user123"), 15, 30, 60) == (0, 16, 15, -1, 2)
    assert throttle(key("user123"), 15, 30, 60, 1) == (0, 16, 14, -1, 3)


def test_burst_then_limited_like_the_core():
    k = key("burst")
    replies = [throttle(k, 4, 1, 10) for _ in range(6)]  # 1 per 10 s, bursts of 5
    assert [r[0] for r in replies] == [0, 0, 0, 0, 0, 1]
    assert [r[2] for r in replies[:5]] == [4, 3, 2, 1, 0]
    limited = replies[5]
    assert limited[1] == 5 and limited[2] == 0
    # 10 s and 50 s less the time since the burst began, truncated
    assert limited[3] == 9 and limited[4] == 49
    # the in-process GCRA with the same parameters gives the same sequence
    local = GCRA.from_cell(4, 1, 10)
    expected = [local.check(1000.0).throttle_reply() for _ in range(6)]
    assert [r[:3] for r in replies] == [e[:3] for e in expected]


def test_quantity_zero_peeks_and_above_limit_never():
    k = key("quantity")
    assert throttle(k, 2, 1, 60, 0) == (0, 3, 3, -1, 0)
    assert throttle(k, 2, 1, 60, 3)[:3] == (0, 3, 0)
    assert throttle(k, 2, 1, 60, 0)[:3] == (0, 3, 0)
    limited, limit, remaining, retry, _ = throttle(key("big"), 2, 1, 60, 4)
    assert (limited, limit, retry) == (1, 3, -1)  # can never pass: no retry-after


def test_bytes_and_str_keys_and_prefix():
    k = key("same")
    assert throttle(k, 0, 1, 60)[0] == 0
    assert throttle(k.encode(), 0, 1, 60)[0] == 1  # the same key
    assert throttle(k, 0, 1, 60, prefix=f"fgpy-{RUN}:")[0] == 0  # another key space
    assert redis_cli("--scan", "--pattern", f"fgpy-{RUN}:*").split()


def test_key_expires_when_back_at_full_capacity():
    k = key("ttl")
    throttle(k, 0, 1, 2)
    keys = redis_cli("--scan", "--pattern", f"floodgate:*{k}").split()
    assert len(keys) == 1
    pttl = int(redis_cli("PTTL", keys[0]))
    assert 0 < pttl <= 2000


def test_eight_threads_on_one_key_admit_exactly_the_burst():
    k = key("threads")
    barrier = threading.Barrier(8)
    admitted = [0] * 8

    def run(i):
        barrier.wait()
        for _ in range(30):
            admitted[i] += throttle(k, 99, 1, 3600, timeout_s=5.0)[0] == 0

    ts = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert sum(admitted) == 100  # max_burst + 1, out of 240 calls


@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        ((0, 15, 0, 60), {}, TypeError, "key must be str or bytes, not int"),
        (("k", 15, 0, 60), {}, ValueError, "zero rates are not supported (count is 0)"),
        (("k", 15, 30, 0), {}, ValueError, "zero rates are not supported (period is 0)"),
        (("k", -1, 30, 60), {}, ValueError, "max_burst must be a whole number >= 0, got -1"),
        (("k", 15, 30, 60, -1), {}, ValueError, "quantity must be a whole number >= 0"),
        (("k", 15, 30, 60, 1.5), {}, TypeError, "argument 'quantity': must be an int, not float"),
        (("k", 2**63, 30, 60), {}, ValueError, "max_burst must be an integer"),
        (("k", 15, 30.0, 60), {}, TypeError, "count must be an int, not float"),
        (("k", 15, 30, 60), {"timeout_s": 0.0}, ValueError, "timeout_s must be a positive"),
        (("k", 15, 30, 60), {"url": "http://127.0.0.1:6379"}, ValueError, "invalid Redis URL"),
        (("k", 15, 30, 60), {"prefix": "bad{prefix"}, ValueError, "invalid key prefix"),
        (("k" * 2000, 15, 30, 60), {}, ValueError, "longer than the maximum"),
    ],
)
def test_bad_arguments(args, kwargs, exc, message):
    with pytest.raises(exc) as info:
        throttle(*args, **kwargs)
    assert message in str(info.value)


def test_unreachable_redis_raises_redis_error():
    port = free_port()  # nothing listens there
    with pytest.raises(RedisError) as info:
        throttle(key("x"), 1, 1, 1, url=f"redis://127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in str(info.value)
    assert isinstance(info.value, ConnectionError)


def test_silent_server_raises_a_timeout_or_not_redis():
    # A listener that accepts and never answers: the handshake cannot complete.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    try:
        with pytest.raises(RedisError) as info:
            throttle(key("x"), 1, 1, 1, url=f"redis://127.0.0.1:{port}", timeout_s=0.2)
        assert "Redis" in str(info.value)
    finally:
        srv.close()
    assert issubclass(RedisTimeoutError, RedisError)


def test_the_gil_is_released_while_waiting_for_redis():
    # A listener that never answers: the call waits for its 1 s connect timeout, during
    # which this thread must keep running Python code.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    errors = []

    def blocked():
        try:
            throttle(key("gil"), 1, 1, 1, url=f"redis://127.0.0.1:{port}")
        except RedisError as e:
            errors.append(e)

    try:
        th = threading.Thread(target=blocked)
        th.start()
        time.sleep(0.05)
        spins, t0 = 0, time.monotonic()
        while th.is_alive() and time.monotonic() - t0 < 0.5:
            spins += 1
        assert th.is_alive(), "the call should still be waiting"
        assert spins > 10_000, spins
        th.join(timeout=10)
    finally:
        srv.close()
    assert errors and "does not speak Redis" in str(errors[0])


def test_paused_redis_times_out_then_recovers(own_redis):
    # Our own redis-server (never the shared one): paused with SIGSTOP mid-test.
    proc, url = own_redis
    assert throttle("paused", 5, 1, 60, url=url, timeout_s=2.0)[0] == 0
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(RedisTimeoutError) as info:
            throttle("paused", 5, 1, 60, url=url, timeout_s=0.2)
        assert "did not answer within 200ms" in str(info.value)
        assert time.monotonic() - t0 < 2.0
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    # the kept connection recovers: the next answers count both admitted calls or one
    reply = throttle("paused", 5, 1, 60, url=url, timeout_s=5.0)
    assert reply[0] == 0 and reply[2] in (3, 4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_connection():
    # The parent's I/O thread does not exist in a forked child (gunicorn pre-fork,
    # multiprocessing): the child must notice and connect again instead of hanging.
    k = key("fork")
    assert throttle(k, 9, 1, 60)[2] == 9
    pid = os.fork()
    if pid == 0:  # child: exit 0 only if throttle answers correctly
        code = 1
        try:
            code = 0 if throttle(k, 9, 1, 60, timeout_s=5.0)[2] == 8 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in throttle()")
        time.sleep(0.02)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert throttle(k, 9, 1, 60)[2] == 7  # the parent's connection still works


def test_exported_under_both_names():
    import rate_limiter

    assert rate_limiter.throttle is floodgate.throttle
