"""The bearer JWT of a request: ``Authorization: Bearer <token>`` (RFC 6750 2.1), where
the token is not the gateway's own (``Bearer Gateway-...``, ``sessions/bearer.py``).

Pure. ``""`` when the request carries no outside bearer token; a ``Refused`` for one
that cannot be a single token: two ``Authorization`` headers (which one is the caller?)
or characters outside RFC 6750's ``b64token``.
"""

from __future__ import annotations

import re

from gateway.bearer_jwt.jws import MALFORMED
from gateway.bearer_jwt.verify import Refused

_B64TOKEN = re.compile(rb"[A-Za-z0-9\-._~+/]+=*")


def bearer_jwt(headers: list[tuple[bytes, bytes]]) -> str | Refused:
    found: list[bytes] = []
    for name, value in headers:
        if len(name) == 13 and name.lower() == b"authorization":
            found.append(value.strip())
    bearer = [v for v in found if v[:7].lower() == b"bearer "]
    if not bearer:
        return ""
    if len(found) > 1:
        return Refused(MALFORMED, "the request has more than one Authorization header")
    token = bearer[0][7:].strip()
    if token[:8].lower() == b"gateway-":
        return ""  # the gateway's own programmatic token
    if _B64TOKEN.fullmatch(token) is None:
        return Refused(MALFORMED, "the bearer token is not one token")
    return token.decode("ascii")
