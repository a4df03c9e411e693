"""``X-Request-Id``: the id that ties a request's access-log line, its upstream request,
its response and its error page together.

A client's (or a proxy in front's) id is kept when it looks like one: 1 to
``MAX_LENGTH`` characters of letters, digits and ``. _ : + / = -`` (UUIDs, hex, base64
ids). Anything else (too long, spaces, control characters, an empty value) is replaced,
so a header cannot inject text into logs or pages. A new id is 32 hex digits (128 bits
from ``os.urandom``, the shape of a W3C trace id); they are made 256 at a time, since
one system call and one ``hexlify`` per request would cost the proxy more.
"""

from __future__ import annotations

import os
import re
from binascii import hexlify
from collections.abc import Iterable

HEADER = b"x-request-id"
MAX_LENGTH = 128
_valid = re.compile(rb"[A-Za-z0-9._:+/=-]{1,%d}" % MAX_LENGTH).fullmatch
_BATCH = 256
_made: list[bytes] = []


def _refill() -> None:
    block = hexlify(os.urandom(16 * _BATCH))
    _made.extend(block[i:i + 32] for i in range(0, len(block), 32))


def new_request_id() -> bytes:
    if not _made:
        _refill()
    return _made.pop()


def checked_request_id(given: bytes | None) -> bytes:
    """``given`` (a client's header value) when it is a valid id, else a new id."""
    if given and _valid(given) is not None:  # (no regex run for the usual: none given)
        return given
    if not _made:
        _refill()
    return _made.pop()


def request_id_for(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The first ``X-Request-Id`` of ``headers`` when it is valid, else a new id."""
    for name, value in headers:
        if len(name) == 12 and name.lower() == HEADER:
            return checked_request_id(value)
    return new_request_id()
