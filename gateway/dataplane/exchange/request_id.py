"""``X-Request-Id``: the id that ties a request's access-log line, its upstream request,
its response and its error page together.

A client's (or a proxy in front's) id is kept when it looks like one: 1 to
``MAX_LENGTH`` characters of letters, digits and ``. _ : + / = -`` (UUIDs, hex, base64
ids). Anything else (too long, spaces, control characters, an empty value) is replaced,
so a header cannot inject text into logs or pages. A new id is 32 hex digits (128 random
bits, the shape of a W3C trace id), made without a system call.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

HEADER = b"x-request-id"
MAX_LENGTH = 128
_VALID = re.compile(rb"[A-Za-z0-9._:+/=-]{1,%d}" % MAX_LENGTH)
_random = random.Random().getrandbits  # its own generator, seeded from os.urandom


def new_request_id() -> str:
    return f"{_random(128):032x}"


def valid_request_id(value: bytes) -> bool:
    return _VALID.fullmatch(value) is not None


def request_id_for(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The first ``X-Request-Id`` of ``headers`` when it is valid, else a new id."""
    for name, value in headers:
        if len(name) == 12 and name.lower() == HEADER:
            if _VALID.fullmatch(value) is not None:
                return value.decode("ascii")
            break
    return new_request_id()
