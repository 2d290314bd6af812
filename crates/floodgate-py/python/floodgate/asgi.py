"""floodgate as pure ASGI middleware (Starlette, FastAPI, any ASGI 3 application).

    from floodgate import Policy, RequestLimiter
    from floodgate.asgi import RateLimitMiddleware

    app.add_middleware(RateLimitMiddleware, limiter=RequestLimiter([Policy("per-ip", "10/s")]))

Every HTTP request is decided by the native `RequestLimiter`, the decision procedure of
`floodgate proxy` (routes, keys, trusted proxies, store, fault policy): awaited on a
Redis store (the event loop runs on meanwhile), called directly in process (where a
decision never waits):

* denied: the verdict's response is sent as it is (status, headers, body: 429 with
  problem+json or text by `Accept`, jittered `Retry-After`, RateLimit fields), and the
  application is not called;
* allowed: after the verdict's delay (an `asyncio.sleep`: no thread blocks) the
  application runs, and the verdict's headers are added to its `http.response.start`;
  on a route with a `cost_header`, the cost is settled from that response header before
  the head is sent, and the headers are those after the settle; the verdict's leases are
  released when the application returns, also when it raises or the client disconnects.

`lifespan` and `websocket` scopes go to the application untouched: a websocket is not
limited here (limit its handshake route with a decorator, or in front with the proxy).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, MutableMapping

from floodgate._web import (
    byte_pairs,
    check_key_function,
    check_limiter,
    decide,
    decide_async,
    denial_parts,
    provided_key,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_path(scope: Scope) -> bytes | str:
    """The request's path as sent, without its query: `raw_path` (the bytes on the wire,
    as the proxy sees them) when the server gives it, else `path` (decoded; the native
    limiter percent-encodes what is not visible ASCII)."""
    raw = scope.get("raw_path")
    if raw:
        return raw.split(b"?", 1)[0]
    return scope.get("path") or "/"


def client_host(scope: Scope) -> str | None:
    """The peer's address (`scope["client"][0]`), or None when the server gives none
    (a Unix socket, some test clients): the native limiter then takes its missing-key
    outcome for `ip` keys."""
    client = scope.get("client")
    if not client:
        return None
    host = client[0]
    return host if isinstance(host, str) and host else None


def request_parts(scope: Scope) -> tuple[str, bytes | str, Any, str | None]:
    """`(method, path, headers, client)` of the scope, as `decide` takes them."""
    return scope["method"], request_path(scope), scope.get("headers") or [], client_host(scope)


async def send_denial(verdict: Any, send: Send) -> None:
    """Sends the verdict's whole response: status, headers and body as rendered by the
    native limiter."""
    status, headers, body = denial_parts(verdict)
    await send({"type": "http.response.start", "status": status,
                "headers": byte_pairs(headers)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class RateLimitMiddleware:
    """ASGI middleware deciding every HTTP request with a `floodgate.RequestLimiter`.

    `key`: a function of the ASGI scope returning the request's key (str or bytes) for
    the policies declared with `key="provided"`; when it raises or returns None, the
    limiter's missing-key outcome applies (400 by default), never a 500."""

    def __init__(self, app: ASGIApp, limiter: Any, *,
                 key: Callable[[Scope], str | bytes | None] | None = None) -> None:
        check_limiter(limiter, "floodgate.asgi.RateLimitMiddleware")
        check_key_function(key, "floodgate.asgi.RateLimitMiddleware")
        self.app = app
        self.limiter = limiter
        self.key = key
        # in process a decision never waits: the direct call costs less than a hand-off
        # to the I/O threads and back to the event loop
        self.direct = not limiter.waits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        keys = provided_key(self.key, scope) if self.key is not None else None
        limiter = self.limiter
        # one native call reads the scope and decides: the fields to add (a list) when the
        # request passes at once holding nothing, else the verdict to act on
        if self.direct:
            try:  # the common case first: no call through decide()'s recovery
                decided = limiter.decide_scope(scope, keys)
            except (ValueError, TypeError):
                decided = decide(limiter, *request_parts(scope), keys)
        else:
            try:  # the scope is read before anything is awaited: a retry is safe
                decided = await limiter.decide_scope_async(scope, keys)
            except (ValueError, TypeError):
                decided = await decide_async(limiter, *request_parts(scope), keys)
        if type(decided) is not list:
            await run_with_verdict(self.app, decided, scope, receive, send)
            return
        if not decided:
            await self.app(scope, receive, send)
            return

        def send_with_headers(message: Message) -> Awaitable[None]:
            # a plain function returning send's awaitable: no coroutine of its own to make
            # and drive for each message
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or ()), *decided]}
            return send(message)

        await self.app(scope, receive, send_with_headers)


async def run_with_verdict(app: ASGIApp, verdict: Any, scope: Scope, receive: Receive,
                           send: Send) -> None:
    """Answers a decided request: the denial, or the application with the verdict's
    headers, settled cost and leases released at its end."""
    if not verdict.allowed:
        try:
            await send_denial(verdict, send)
        finally:
            verdict.finish()
        return
    try:
        if verdict.delay_s > 0:
            await asyncio.sleep(verdict.delay_s)
        # the native limiter gives (name, value) bytes pairs, names lower case
        added = verdict.header_bytes
        cost_header = verdict.cost_header
        if not added and cost_header is None:
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                extra = added
                if cost_header is not None:
                    extra = byte_pairs(await verdict.settle_from_response_async(headers))
                message = dict(message)
                message["headers"] = headers + extra
            await send(message)

        await app(scope, receive, send_with_headers)
    finally:
        verdict.finish()
