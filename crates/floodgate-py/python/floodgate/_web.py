"""What the ASGI and WSGI middleware and the decorators share: calling a key function,
checking a limiter argument, turning header lists into the byte pairs a server takes,
and settling a cost from a response header. The decisions and every byte of a denial
come from the native `RequestLimiter` (the proxy's own procedure); nothing here renders
a header or a body."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Callable, Iterable

log = logging.getLogger("floodgate")

#: The longest key a key function may return, in bytes (UTF-8 for a str). The native
#: limiter takes the configured missing-key outcome for a longer one, as the proxy does.
MAX_KEY_BYTES = 256


def check_limiter(limiter: Any, what: str) -> None:
    """Raises TypeError unless `limiter` decides requests (a floodgate.RequestLimiter)."""
    if not (hasattr(limiter, "decide") and hasattr(limiter, "decide_async")):
        raise TypeError(
            f"{what}: limiter must be a floodgate.RequestLimiter, got {type(limiter).__name__}"
        )


def check_key_function(key: Any, what: str) -> None:
    """Raises TypeError unless `key` is None or callable."""
    if key is not None and not callable(key):
        raise TypeError(
            f"{what}: key must be a function of the request (or None), got {type(key).__name__}"
        )


def provided_key(key: Callable[[Any], Any], request: Any) -> str | bytes | None:
    """The key a key function gives for `request`, or None when it has none to give.

    None (the function raised, returned None, or returned something that is not a str or
    bytes) makes the native limiter take its configured missing-key outcome, as a missing
    header does in the proxy (400 by default): the middleware itself never answers 500
    for a key. Each failure is logged on the `floodgate` logger with what was wrong."""
    try:
        value = key(request)
    except Exception:  # noqa: BLE001 - any failure of user code is a missing key
        log.warning("floodgate: the key function raised; the request has no key", exc_info=True)
        return None
    if value is None or isinstance(value, (str, bytes)):
        return value
    log.warning(
        "floodgate: the key function returned %s, expected str, bytes or None; "
        "the request has no key",
        type(value).__name__,
    )
    return None


def latin1(value: str | bytes) -> bytes:
    """A header name or value as the bytes a server sends (the native limiter gives str)."""
    return value if isinstance(value, bytes) else value.encode("latin-1")


def byte_pairs(headers: Iterable[tuple[str | bytes, str | bytes]]) -> list[tuple[bytes, bytes]]:
    """(name, value) pairs as bytes, names lower-cased (what ASGI servers expect)."""
    return [(latin1(n).lower(), latin1(v)) for n, v in headers]


def str_pairs(headers: Iterable[tuple[str | bytes, str | bytes]]) -> list[tuple[str, str]]:
    """(name, value) pairs as latin-1 str (what WSGI's start_response takes)."""
    return [
        (n.decode("latin-1") if isinstance(n, bytes) else n,
         v.decode("latin-1") if isinstance(v, bytes) else v)
        for n, v in headers
    ]


def denial_parts(verdict: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """The verdict's whole response as (status, headers, body), with a `content-length`
    field added when the native headers leave it to the server (as hyper adds it for the
    proxy)."""
    status, headers, body = verdict.response
    body = bytes(body)
    pairs = str_pairs(headers)
    if not any(n.lower() == "content-length" for n, _ in pairs):
        pairs.append(("content-length", str(len(body))))
    return status, pairs, body


class Malformed:
    """The answer to a request the native limiter cannot read (a method, path or header
    value HTTP cannot carry): 400 with the reason, as an HTTP server answers a malformed
    request before any handler runs. Shaped as a denied `Verdict`."""

    allowed = False
    delay_s = 0.0
    headers: list = []
    policy = None
    outcome = None
    cost_header = None

    def __init__(self, reason: str) -> None:
        body = f"400 Bad Request: {reason}\n".encode()
        self.response = (400, [("content-type", "text/plain; charset=utf-8"),
                               ("cache-control", "no-store")], body)

    def finish(self) -> None:
        """Nothing is held."""


def _is_ip(host: Any) -> bool:
    try:
        ipaddress.ip_address(str(host).strip("[]"))
        return True
    except ValueError:
        return False


def decide(limiter: Any, method: str, path: Any, headers: Any, client: Any,
           keys: Any) -> Any:
    """`limiter.decide(...)`, never raising for the request's content: a client that is
    not an IP address (a test client's name, a Unix socket's path) is no client (the
    missing-key outcome for `ip` keys); anything else the limiter refuses is `Malformed`."""
    try:
        return limiter.decide(method, path, headers, client=client, keys=keys)
    except (ValueError, TypeError) as e:
        if client is not None and not _is_ip(client):
            return decide(limiter, method, path, headers, None, keys)
        log.warning("floodgate: request refused as malformed: %s", e)
        return Malformed(str(e))


async def decide_async(limiter: Any, method: str, path: Any, headers: Any, client: Any,
                       keys: Any) -> Any:
    """As `decide`, awaiting `limiter.decide_async(...)`."""
    try:
        return await limiter.decide_async(method, path, headers, client=client, keys=keys)
    except (ValueError, TypeError) as e:
        if client is not None and not _is_ip(client):
            return await decide_async(limiter, method, path, headers, None, keys)
        log.warning("floodgate: request refused as malformed: %s", e)
        return Malformed(str(e))
