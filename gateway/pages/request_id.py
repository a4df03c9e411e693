"""The request id a person quotes to an administrator.

No id is made on the hot path: an error page asks for one, and only then is it read from
the request (an ``X-Request-Id`` that a front proxy, or the access-log/upstream code,
already set) or generated and added to the request's headers, so that everything
reading them later (access log, upstream) sees the same id.
"""

from __future__ import annotations

import re
import secrets

HEADER = b"x-request-id"
# what an incoming id may look like to be reused (it is shown on a page and logged)
_SAFE = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def new_request_id() -> str:
    """Twelve characters of URL-safe randomness: short enough to read out, 72 bits."""
    return secrets.token_urlsafe(9)


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's id: its ``X-Request-Id`` when that is a short plain token, else a new
    one, which is then added to ``headers`` (the exchange's own list)."""
    for name, value in headers:
        if name.lower() == HEADER:
            if _SAFE.fullmatch(value.strip()):
                return value.strip().decode("ascii")
            break
    rid = new_request_id()
    kept = [(n, v) for n, v in headers if n.lower() != HEADER]
    if len(kept) != len(headers):
        headers[:] = kept  # an unusable incoming id is replaced, not kept beside ours
    headers.append((HEADER, rid.encode("ascii")))
    return rid
