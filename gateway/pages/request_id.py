"""The request id a person quotes to an administrator, for code that has only the
request's headers (the identity layer's pages): the data plane's rule
(``gateway.wire.request_id``) applied to them, and a new id added to them,
so that everything reading them later (the exchange, its access log) sees the same id.
"""

from __future__ import annotations

from gateway.wire.request_id import HEADER, checked_request_id, new_request_id


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's id: its ``X-Request-Id`` when that is a valid one, else a new one,
    which then replaces any unusable incoming value in ``headers``."""
    for name, value in headers:
        if name.lower() == HEADER:
            if checked_request_id(value) is value:
                return value.decode("ascii")
            headers[:] = [(n, v) for n, v in headers if n.lower() != HEADER]
            break
    rid = new_request_id()
    headers.append((HEADER, rid))
    return rid.decode("ascii")
