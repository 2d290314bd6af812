"""The two snippets of the Python module's guide, verbatim, with their commented results asserted."""


def test_fixed_window_boundary_snippet(capsys):
    from rate_limiter import FixedWindow
    lim = FixedWindow(limit=100, window_s=60.0)
    allowed = 0
    for _ in range(100):
        allowed += lim.allow(59.9)
    for _ in range(100):
        allowed += lim.allow(60.1)
    print(allowed)  # 200

    assert capsys.readouterr().out == "200\n"
    assert type(allowed) is int


def test_token_bucket_refill_snippet_real_clock():
    import time
    from rate_limiter import TokenBucket
    b = TokenBucket(capacity=10, refill_per_s=2.0)
    burst = sum(b.allow() for _ in range(15))   # 10
    time.sleep(3.0)
    after = sum(b.allow() for _ in range(10))   # 6

    assert (burst, after) == (10, 6)
    assert type(burst) is int and type(after) is int


def test_rate_limiter_is_floodgate():
    import floodgate
    import rate_limiter

    for name in floodgate.__all__:
        assert getattr(rate_limiter, name) is getattr(floodgate, name), name
