"""floodgate as WSGI middleware (Flask, Django's WSGI handler, any PEP 3333 application).

    from floodgate import Policy, RequestLimiter
    from floodgate.wsgi import RateLimitMiddleware

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=RequestLimiter([Policy("per-ip", "10/s")]))

Every request is decided by the native `RequestLimiter` (the decision procedure of
`floodgate proxy`; in process with the GIL held, as a decision there never waits; on a
Redis store the GIL is released during the round trip):

* denied: the verdict's response is returned as it is (status, headers, body), and the
  application is not called;
* allowed: after the verdict's delay (`time.sleep`: WSGI holds a thread per request
  anyway) the application runs, and the verdict's headers are added to the ones it passes
  to `start_response`; on a route with a `cost_header`, the cost is settled from that
  response header first, and the headers are those after the settle; the verdict's leases
  are released when the server closes the response iterable (PEP 3333's `close()`), also
  when the application raises.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any, Callable, Iterable, Iterator

from floodgate._web import (
    check_key_function,
    check_limiter,
    decide,
    denial_parts,
    provided_key,
    str_pairs,
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def status_line(status: int) -> str:
    """`429 Too Many Requests`: the status line start_response takes."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def request_path(environ: Environ) -> bytes:
    """The request's path as sent, without its query: `RAW_URI` or `REQUEST_URI` when the
    server gives it (gunicorn, uWSGI), else SCRIPT_NAME + PATH_INFO; as bytes (WSGI's
    strings are latin-1 decoded; the native limiter percent-encodes what is not visible
    ASCII)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        path = raw.split("?", 1)[0]
    else:
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    return path.encode("latin-1", "replace") or b"/"


def request_headers(environ: Environ) -> list[tuple[str, bytes]]:
    """The request's header fields from the environ's HTTP_* keys (and CONTENT_TYPE,
    CONTENT_LENGTH): names lower-cased with dashes, values as the bytes received."""
    out = []
    for k, v in environ.items():
        if k.startswith("HTTP_"):
            out.append((k[5:].replace("_", "-").lower(), v.encode("latin-1", "replace")))
        elif k in ("CONTENT_TYPE", "CONTENT_LENGTH") and v:
            out.append((k.replace("_", "-").lower(), v.encode("latin-1", "replace")))
    return out


def denial(verdict: Any, start_response: StartResponse) -> list[bytes]:
    """Starts and returns the verdict's whole response, as rendered by the native limiter."""
    status, headers, body = denial_parts(verdict)
    start_response(status_line(status), headers)
    return [body]


class RateLimitMiddleware:
    """WSGI middleware deciding every request with a `floodgate.RequestLimiter`.

    `key`: a function of the WSGI environ returning the request's key (str or bytes) for
    the policies declared with `key="provided"`; when it raises or returns None, the
    limiter's missing-key outcome applies (400 by default), never a 500."""

    def __init__(self, app: WSGIApp, limiter: Any, *,
                 key: Callable[[Environ], str | bytes | None] | None = None) -> None:
        check_limiter(limiter, "floodgate.wsgi.RateLimitMiddleware")
        check_key_function(key, "floodgate.wsgi.RateLimitMiddleware")
        self.app = app
        self.limiter = limiter
        self.key = key

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        keys = provided_key(self.key, environ) if self.key is not None else None
        limiter, method = self.limiter, environ.get("REQUEST_METHOD", "GET")
        path, headers = request_path(environ), request_headers(environ)
        client = environ.get("REMOTE_ADDR") or None
        try:  # the common case first: no call through decide()'s recovery
            verdict = limiter.decide(method, path, headers, client, keys)
        except (ValueError, TypeError):
            verdict = decide(limiter, method, path, headers, client, keys)
        return run_with_verdict(self.app, verdict, environ, start_response)


def run_with_verdict(app: WSGIApp, verdict: Any, environ: Environ,
                     start_response: StartResponse) -> Iterable[bytes]:
    """Answers a decided request: the denial, or the application with the verdict's
    headers, settled cost, and leases released when the response is closed."""
    if not verdict.allowed:
        try:
            return denial(verdict, start_response)
        finally:
            verdict.finish()
    try:
        if verdict.delay_s > 0:
            time.sleep(verdict.delay_s)
        # the native limiter gives (name, value) str pairs, as start_response takes them
        added = verdict.headers
        cost_header = verdict.cost_header
        if not added and cost_header is None:
            body = app(environ, start_response)
        else:
            def start_with_headers(status: str, headers: list, exc_info: Any = None) -> Any:
                extra = added
                if cost_header is not None:
                    extra = str_pairs(verdict.settle_from_response(headers))
                return start_response(status, [*headers, *extra], exc_info)

            body = app(environ, start_with_headers)
    except BaseException:
        verdict.finish()
        raise
    return ClosingBody(body, verdict)


class ClosingBody:
    """The application's response iterable; `close()` closes it, then releases the
    verdict's leases (once)."""

    def __init__(self, body: Iterable[bytes], verdict: Any) -> None:
        self.body = body
        self.verdict = verdict

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.verdict.finish()
