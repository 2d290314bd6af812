"""Per-endpoint limits as decorators, the way slowapi, Flask-Limiter and django-ratelimit
are used:

    from floodgate.decorators import RateLimiter

    limiter = RateLimiter(key="ip")

    @app.get("/search")                      # FastAPI / Starlette: async or sync endpoints
    @limiter.limit("10/minute")
    async def search(q: str): ...

    @app.route("/report")                    # Flask view
    @limiter.limit("100 per hour; 5/s", key=lambda request: request.headers.get("x-api-key"))
    def report(): ...

    @limiter.limit("5/s", cost=2)            # Django view (function of the HttpRequest)
    def export(request): ...

Each `limit(...)` is one native `RequestLimiter` of its own (the decision procedure of
`floodgate proxy`) with one policy per rate in the string, decided all-or-nothing; the
denial is its response as the native code rendered it (status, headers, body), converted
to the framework's response type without changing a byte; an allowed request gets the
verdict's headers on the endpoint's response, and its leases are released when the
endpoint returns or raises.

Finding the request: a Starlette/FastAPI `Request` or a Django `HttpRequest` among the
endpoint's arguments, else Flask's `request` of the current request context. A FastAPI
endpoint that does not declare `request: Request` gets it anyway: the decorator adds
keyword-only parameters for the request and the response to the signature FastAPI reads.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import sys
import time
from typing import Any, Callable

from floodgate._web import (
    byte_pairs,
    check_key_function,
    decide,
    decide_async,
    denial_parts,
    provided_key,
    str_pairs,
)

_REQUEST_PARAM = "floodgate_request_"
_RESPONSE_PARAM = "floodgate_response_"
_SPLIT = re.compile(r"\s*[;,]\s*")


def split_limits(limits: str) -> list[str]:
    """`"100/hour; 5/s"` -> `["100/hour", "5/s"]` (`;` or `,` between rates, as the
    `limits` package writes several)."""
    if not isinstance(limits, str):
        raise TypeError(f"limit: expected a rate string such as \"10/minute\", got {limits!r}")
    parts = [p for p in _SPLIT.split(limits.strip()) if p]
    if not parts:
        raise ValueError(f"limit: no rate in {limits!r}; expected e.g. \"10/minute\" or \"100 per hour\"")
    return parts


class RateLimiter:
    """Decorators limiting single endpoints.

    `key`: the default key of every `limit()`: `"ip"` (the client address, with
    `trusted_proxies`), `"global"`, `"route"`, `"header:NAME"`, or a function of the
    framework's request returning a str or bytes. `store`: None (in process) or a
    `floodgate.RedisStore`. Any other keyword (`trusted_proxies`, `deny_status`,
    `on_store_failure`, `retry_after_jitter_s`, ...) goes to every `RequestLimiter`."""

    def __init__(self, *, key: str | Callable[[Any], Any] = "ip", store: Any = None,
                 **options: Any) -> None:
        _check_key(key)
        self.key = key
        self.store = store
        self.options = options

    def limit(self, limits: str, *, key: str | Callable[[Any], Any] | None = None,
              cost: int = 1, name: str | None = None, algorithm: str = "gcra",
              burst: int | None = None, capacity: int | None = None,
              cost_header: str | None = None) -> Callable:
        """A decorator limiting the endpoint at `limits` ("10/minute", "100 per hour",
        "5/s"; several separated by `;`). Each rate admits its whole count at once from
        rest (capacity = the count, as the `limits` package's windows do), then requests
        at the rate; `burst` or `capacity` sets another shape. `cost`: units each request
        takes under every rate; `cost_header`: settle the cost after the response from
        this response header. `name`: the policy name shown in the RateLimit fields
        (default: the function's name, with `-2`, `-3`... for its second and third
        rates). Errors in the rate or the shape raise floodgate.ConfigError here, at
        decoration."""
        from floodgate import Policy, RequestLimiter, Route

        rates = split_limits(limits)
        key = self.key if key is None else key
        _check_key(key)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ValueError(f"limit: cost must be a whole number >= 0, got {cost!r}")
        key_fn = key if callable(key) else None
        policy_key = "provided" if key_fn is not None else key

        def decorate(func: Callable) -> Callable:
            base = name or func.__name__
            names = [base if i == 0 else f"{base}-{i + 1}" for i in range(len(rates))]
            policies = [Policy(n, r, algorithm=algorithm, key=policy_key,
                               **_shape(r, burst, capacity))
                        for n, r in zip(names, rates)]
            route = Route("/", policies={n: cost for n in names}, cost_header=cost_header)
            lim = RequestLimiter(policies, routes=[route], store=self.store, **self.options)
            return _wrap(func, lim, key_fn)

        return decorate


_COUNT = re.compile(r"\s*([0-9]+)")


def _shape(rate: str, burst: int | None, capacity: int | None) -> dict:
    """The shape keywords of one rate's Policy: the ones given, else capacity = the
    rate's count (the native parser checks the rest of the string)."""
    if burst is not None or capacity is not None:
        return {"burst": burst, "capacity": capacity}
    m = _COUNT.match(rate)
    return {"capacity": int(m.group(1))} if m and int(m.group(1)) > 0 else {}


def _check_key(key: Any) -> None:
    if isinstance(key, str):
        return
    check_key_function(key, "RateLimiter")


def _wrap(func: Callable, lim: Any, key_fn: Callable | None) -> Callable:
    injected = _fastapi_signature(func)

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_endpoint(*args: Any, **kwargs: Any) -> Any:
            kw = {k: v for k, v in kwargs.items() if k not in (_REQUEST_PARAM, _RESPONSE_PARAM)}
            adapter = _adapter(args, kwargs)
            request = (*adapter.decide_args(), _keys(key_fn, adapter.request))
            try:  # the common case first: no call through decide()'s recovery
                verdict = (await lim.decide_async(*request)) if lim.waits else lim.decide(*request)
            except (ValueError, TypeError):
                verdict = (await decide_async(lim, *request)) if lim.waits else decide(lim, *request)
            try:
                if not verdict.allowed:
                    return adapter.denial(verdict)
                if verdict.delay_s > 0:
                    await asyncio.sleep(verdict.delay_s)
                result = await func(*args, **kw)
                return adapter.add_headers(result, verdict, kwargs.get(_RESPONSE_PARAM))
            finally:
                verdict.finish()

        endpoint = async_endpoint
    else:
        @functools.wraps(func)
        def sync_endpoint(*args: Any, **kwargs: Any) -> Any:
            kw = {k: v for k, v in kwargs.items() if k not in (_REQUEST_PARAM, _RESPONSE_PARAM)}
            adapter = _adapter(args, kwargs)
            request = (*adapter.decide_args(), _keys(key_fn, adapter.request))
            try:  # the common case first: no call through decide()'s recovery
                verdict = lim.decide(*request)
            except (ValueError, TypeError):
                verdict = decide(lim, *request)
            try:
                if not verdict.allowed:
                    return adapter.denial(verdict)
                if verdict.delay_s > 0:
                    time.sleep(verdict.delay_s)
                result = func(*args, **kw)
                return adapter.add_headers(result, verdict, kwargs.get(_RESPONSE_PARAM))
            finally:
                verdict.finish()

        endpoint = sync_endpoint
    if injected is not None:
        endpoint.__signature__ = injected  # type: ignore[attr-defined]
    endpoint.floodgate_limiter = lim  # type: ignore[attr-defined]
    return endpoint


def _keys(key_fn: Callable | None, request: Any) -> str | bytes | None:
    return provided_key(key_fn, request) if key_fn is not None else None


def _fastapi_signature(func: Callable) -> inspect.Signature | None:
    """For FastAPI (when it is imported): the endpoint's signature with a `Request` and a
    `Response` parameter added (keyword-only, default None) where it declares none, so
    FastAPI passes them; None when FastAPI is not in use or nothing is to add."""
    if "fastapi" not in sys.modules:
        return None
    from starlette.requests import Request
    from starlette.responses import Response

    try:
        sig = inspect.signature(func, eval_str=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: leave the signature alone
        sig = inspect.signature(func)
    params = list(sig.parameters.values())

    def declares(cls: type) -> bool:
        return any(isinstance(p.annotation, type) and issubclass(p.annotation, cls)
                   for p in params)

    extra = []
    if not declares(Request):
        extra.append(inspect.Parameter(_REQUEST_PARAM, inspect.Parameter.KEYWORD_ONLY,
                                       default=None, annotation=Request))
    if not declares(Response):
        extra.append(inspect.Parameter(_RESPONSE_PARAM, inspect.Parameter.KEYWORD_ONLY,
                                       default=None, annotation=Response))
    if not extra:
        return None
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    rest = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return sig.replace(parameters=rest + extra + var_kw)


def _adapter(args: tuple, kwargs: dict) -> Any:
    """The framework of the request among the arguments (or Flask's current request)."""
    starlette = sys.modules.get("starlette.requests")
    django = sys.modules.get("django.http")
    for value in (*args, *kwargs.values()):
        if starlette is not None and isinstance(value, starlette.Request):
            return _Starlette(value)
        if django is not None and isinstance(value, django.HttpRequest):
            return _Django(value)
    flask = sys.modules.get("flask")
    if flask is not None and flask.has_request_context():
        return _Flask(flask.request)
    raise TypeError(
        "floodgate: a limited endpoint found no request: declare a starlette/FastAPI "
        "`request: Request` parameter, take Django's HttpRequest, or run in a Flask request")


class _Starlette:
    def __init__(self, request: Any) -> None:
        self.request = request

    def decide_args(self) -> tuple:
        from floodgate.asgi import client_host, request_path

        scope = self.request.scope
        return (scope["method"], request_path(scope), scope.get("headers") or [],
                client_host(scope))

    def denial(self, verdict: Any) -> Any:
        from starlette.responses import Response

        status, headers, body = denial_parts(verdict)
        resp = Response(content=body, status_code=status)
        resp.raw_headers = byte_pairs(headers)
        return resp

    def add_headers(self, result: Any, verdict: Any, temporal: Any) -> Any:
        from starlette.responses import Response

        target = result if isinstance(result, Response) else temporal
        if target is None:
            return result
        for n, v in str_pairs(_after_settle(verdict, target.headers.items())):
            target.headers.append(n, v)
        return result


class _Environ:
    """Flask and Django: the request's WSGI environ (Django's META) gives the decision's
    arguments, as in floodgate.wsgi."""

    request: Any

    def environ(self) -> dict:
        raise NotImplementedError

    def decide_args(self) -> tuple:
        from floodgate.wsgi import request_headers, request_path

        env = self.environ()
        return (env.get("REQUEST_METHOD", "GET"), request_path(env), request_headers(env),
                env.get("REMOTE_ADDR") or None)


class _Flask(_Environ):
    def __init__(self, request: Any) -> None:
        self.request = request

    def environ(self) -> dict:
        return self.request.environ

    def denial(self, verdict: Any) -> Any:
        import flask

        status, headers, body = denial_parts(verdict)
        return flask.Response(body, status=status, headers=headers)

    def add_headers(self, result: Any, verdict: Any, temporal: Any) -> Any:
        import flask

        resp = flask.make_response(result)
        for n, v in str_pairs(_after_settle(verdict, resp.headers.items())):
            resp.headers.add(n, v)
        return resp


class _Django(_Environ):
    def __init__(self, request: Any) -> None:
        self.request = request

    def environ(self) -> dict:
        return self.request.META

    def denial(self, verdict: Any) -> Any:
        from django.http import HttpResponse

        status, headers, body = denial_parts(verdict)
        resp = HttpResponse(body, status=status)
        for n, v in headers:
            resp.headers[n] = v
        return resp

    def add_headers(self, result: Any, verdict: Any, temporal: Any) -> Any:
        for n, v in str_pairs(_after_settle(verdict, result.items())):
            result.headers[n] = v
        return result


def _after_settle(verdict: Any, response_headers: Any) -> Any:
    """The headers to add: the verdict's, or, where its route settles the cost from a
    response header, the ones after settling at that header's value."""
    if getattr(verdict, "cost_header", None) is None:
        return verdict.headers
    return verdict.settle_from_response(list(response_headers))
