"""What the ASGI and WSGI middleware and the decorators share: calling a key function,
checking a limiter argument, turning header lists into the byte pairs a server takes,
and settling a cost from a response header. The decisions and every byte of a denial
come from the native `RequestLimiter` (the proxy's own procedure); nothing here renders
a header or a body."""

from __future__ import annotations

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
