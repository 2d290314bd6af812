"""Reserve at an estimate, settle the actual cost: debt, refunds, the context manager,
and bad input refused without changing anything."""

import pytest

from floodgate import KeyedLimiter, Reservation, TokenBucket


def budget():
    # 1,000 tokens a minute
    return KeyedLimiter(TokenBucket(capacity=1000, refill_per_s=1000 / 60))


def test_settle_charges_a_debt_and_refunds_an_overestimate():
    lim = budget()
    r = lim.reserve("alice", estimate=1, now=10.0)
    assert isinstance(r, Reservation) and r.allowed
    assert r.decision.remaining == 999
    d = r.settle(1300, now=10.0)
    assert (r.charged, r.refunded, d.remaining) == (1299, 0, 0)
    # in debt: even an estimate of 0 waits
    assert not lim.reserve("alice", estimate=0, now=10.0).allowed
    r = lim.reserve("bob", estimate=400, now=10.0)
    assert r.settle(50, now=10.0).remaining == 950
    assert r.refunded == 350


def test_a_reservation_settles_once_and_a_denied_one_not_at_all():
    lim = budget()
    r = lim.reserve("k", estimate=10, now=1.0)
    r.settle(10, now=1.0)
    with pytest.raises(ValueError, match="settled already"):
        r.settle(5, now=1.0)
    denied = lim.reserve("k", estimate=5000, now=1.0)
    assert not denied.allowed
    with pytest.raises(ValueError, match="not admitted"):
        denied.settle(1)


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), "300", 2**64, None])
def test_bad_actual_costs_change_nothing(bad):
    lim = budget()
    r = lim.reserve("k", estimate=100, now=1.0)
    with pytest.raises((ValueError, TypeError)):
        r.settle(bad, now=1.0)
    assert lim.peek("k", now=1.0, cost=0).remaining == 900
    # the reservation is still open
    assert r.settle(100, now=1.0).remaining == 900


def test_the_context_manager_settles_the_cost_set_in_the_block():
    lim = budget()
    with lim.reserve("ctx", estimate=1, now=5.0) as r:
        assert r.allowed
        r.cost = 250
    assert r.charged == 249
    assert lim.peek("ctx", now=5.0, cost=0).remaining == 750
    # no cost set (the holder failed): the estimate stays
    with pytest.raises(RuntimeError):
        with lim.reserve("ctx", estimate=10, now=5.0) as r:
            raise RuntimeError("the handler failed")
    assert r.charged is None
    assert lim.peek("ctx", now=5.0, cost=0).remaining == 740
    with pytest.raises(ValueError):
        r.cost = -3
