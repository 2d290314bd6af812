"""The FastAPI app scripts/bench-python.sh serves under uvicorn, one limiter per run:

    BENCH_LIMITER = none | slowapi-memory | slowapi-redis | floodgate-memory | floodgate-redis
    BENCH_REDIS   = the Redis of the *-redis limiters (default redis://127.0.0.1:6379)
                    | headers-only (a pure-Python ASGI middleware adding two fixed fields:
                      what any middleware that adds headers costs, the floor to compare with)
    BENCH_RATE    = the limit, e.g. "10/minute" (binding) or "100000000/minute" (not binding)
    BENCH_PREFIX  = the Redis key prefix of the run (its keys are deleted by the script)

One endpoint, GET /item, returning a small JSON object; the limit is per client address
(the load generator's one address: binding means nearly every request denied). slowapi
runs as its documentation shows (`@limiter.limit` with a `request: Request` parameter,
its 429 handler, storage "memory://" or "redis://"); floodgate as its ASGI middleware on
a RequestLimiter with one GCRA policy of capacity = the rate's count, on the route."""

import os

from fastapi import FastAPI, Request

LIMITER = os.environ.get("BENCH_LIMITER", "none")
RATE = os.environ.get("BENCH_RATE", "10/minute")
PREFIX = os.environ.get("BENCH_PREFIX", "fgbench:")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")

app = FastAPI()

if LIMITER.startswith("slowapi"):
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    storage = "memory://" if LIMITER == "slowapi-memory" else REDIS
    options = {} if LIMITER == "slowapi-memory" else {"key_prefix": PREFIX}
    limiter = Limiter(key_func=get_remote_address, storage_uri=storage,
                      storage_options=options)
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/item")
    @limiter.limit(RATE)
    async def item_slowapi(request: Request):
        return {"id": 1, "name": "item"}

else:
    @app.get("/item")
    async def item(request: Request):
        return {"id": 1, "name": "item"}

    if LIMITER.startswith("floodgate"):
        from floodgate import Policy, RedisStore, RequestLimiter, Route
        from floodgate.asgi import RateLimitMiddleware

        count = int(RATE.split("/")[0])
        store = None if LIMITER == "floodgate-memory" else RedisStore(REDIS, prefix=PREFIX)
        limiter = RequestLimiter([Policy("item", RATE, algorithm="gcra", capacity=count, key="ip")],
                                 routes=[Route("/item", policies={"item": 1})], store=store)
        app.add_middleware(RateLimitMiddleware, limiter=limiter)
    elif LIMITER == "headers-only":
        FIELDS = [(b"ratelimit-policy", b'"item";q=100000000;w=60;floodgate-capacity=100000000'),
                  (b"ratelimit", b'"item";r=100000000;t=60')]

        class HeadersOnly:
            def __init__(self, app):
                self.app = app

            async def __call__(self, scope, receive, send):
                if scope["type"] != "http":
                    await self.app(scope, receive, send)
                    return

                async def send_with_headers(message):
                    if message["type"] == "http.response.start":
                        message = {**message,
                                   "headers": [*(message.get("headers") or ()), *FIELDS]}
                    await send(message)

                await self.app(scope, receive, send_with_headers)

        app.add_middleware(HeadersOnly)
    elif LIMITER != "none":
        raise SystemExit(f"BENCH_LIMITER: unknown {LIMITER!r}")
