"""Which requests are well-formed: RFC 9113's rules (8.1.1, 8.2, 8.3), which the engine
enforces with RST_STREAM, and the stricter HTTP/1.1 ones (RFC 9110) the codec answers
with 400, since every request is forwarded to an HTTP/1.1 upstream.

Each check runs one regular expression over all the names or all the values joined: a
request has a dozen fields, and a call per field would cost more than the check.
"""

from __future__ import annotations

import re

Header = tuple[bytes, bytes]

# Fields that only mean something to one HTTP/1.1 connection (RFC 9113 8.2.2): refused
# in a request, and left out of a response made from an upstream's head (with ``te``,
# which a request may carry as "trailers" only, and a response never).
CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection",
                                 b"transfer-encoding", b"upgrade"})
NOT_FORWARDED = CONNECTION_SPECIFIC | {b"te"}

_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":authority", b":path"})
# the names the walk looks at more closely (the rest are only collected)
_SPECIAL = NOT_FORWARDED | {b"host", b"content-length"}
_EDGE = (0x20, 0x09)  # white space a field value may not start or end with
# RFC 9113 8.2.1: field names hold no upper case, controls, space or DEL (nor 0x80+),
# and but for pseudo-headers no colon; no field value holds NUL, CR or LF.
_H2_BAD_NAME = re.compile(rb"[\x00-\x20:A-Z\x7f-\xff]")
_NUL_CR_LF = re.compile(rb"[\x00\r\n]")

# RFC 9110 5.6.2 token, lower case (HTTP/2 has refused upper case). HTTP/2 only refuses
# controls, spaces, ':' and non-ASCII in names: ";x" or "a(b)" would reach the upstream
# as a header line it cannot parse.
_TOKENS = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
# The method goes into the upstream's request line: a token (RFC 9110 9.1).
_METHOD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What an authority may hold (RFC 3986 3.2: reg-name, IP literal, port); it becomes the
# route's host and X-Forwarded-Host.
_AUTHORITY = re.compile(rb"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%@]*")
# Control characters HTTP/1.1 field values may not hold (RFC 9110 5.5; a tab may);
# HTTP/2 refuses only NUL, CR and LF.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def request_problem(headers: list[Header]) -> tuple[str | None, int | None]:
    """Why a request's header list is malformed (RFC 9113 8.2, 8.3.1), or None; and the
    body length its content-length declares (None: not declared).

    One walk over the fields: the few that need a second look (Host, content-length)
    are collected on the way."""
    pseudo: dict[bytes, bytes] = {}
    count = len(headers)
    index = 0
    while index < count:  # the pseudo-headers come first (RFC 9113 8.3)
        name, value = headers[index]
        if not name or name[0] != 0x3A:
            break
        if name not in _REQUEST_PSEUDO:
            return f"the pseudo-header {name[:40]!r} is not one of a request", None
        if name in pseudo:
            return f"{name.decode()} appears twice", None
        pseudo[name] = value
        index += 1
    seen: list[Header] = []
    problem = fields_problem(headers, index, seen)
    if problem is not None:
        return problem, None
    method = pseudo.get(b":method")
    if method is None:
        return "no :method", None
    if method == b"CONNECT":
        if b":scheme" in pseudo or b":path" in pseudo:  # RFC 9113 8.5
            return "CONNECT with :scheme or :path", None
    else:
        path = pseudo.get(b":path")
        if path is None or b":scheme" not in pseudo:
            return "no :scheme or no :path", None
        if not path:
            return "an empty :path", None
    if not seen:  # the common request
        return None, None
    authority = pseudo.get(b":authority")
    if authority is not None and any(
            name == b"host" and value != authority for name, value in seen):
        return "host and :authority differ", None
    length = content_length(seen)
    if length == -1:
        return "an invalid content-length", None
    return None, length


def fields_problem(headers: list[Header], start: int = 0,
                   seen: list[Header] | None = None) -> str | None:
    """Why the regular fields ``headers[start:]`` (of a request, or its trailers) are
    malformed (RFC 9113 8.2), or None; Host and content-length fields are added to
    ``seen``."""
    names: list[bytes] = []
    for name, value in headers[start:]:
        if not name:
            return "an empty field name"
        if name[0] == 0x3A:
            return "a pseudo-header after a regular field"
        names.append(name)
        if name in _SPECIAL:
            if name == b"te":
                if value != b"trailers":
                    return "te other than 'trailers'"
            elif name == b"host" or name == b"content-length":
                if seen is not None:
                    seen.append((name, value))
            else:
                return f"the connection-specific field {name.decode()!r}"
        if value and (value[0] in _EDGE or value[-1] in _EDGE):
            return "a field value starts or ends with white space"
    if names and _H2_BAD_NAME.search(b",".join(names)):
        return "a field name holds upper case or a character HTTP/2 forbids"
    if _NUL_CR_LF.search(b"\t".join([value for _, value in headers])):
        return "a field value holds NUL, CR or LF"
    return None


def content_length(headers: list[Header]) -> int | None:
    """The declared body length, None if absent; -1 if invalid or contradictory."""
    found: int | None = None
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit() or len(value) > 18:
                return -1
            length = int(value)
            if found is not None and found != length:
                return -1
            found = length
    return found


def forwarding_problem(method: bytes, authority: bytes, headers: list[Header] | None
                       ) -> str | None:
    """Why a request HTTP/2 accepts cannot go to an HTTP/1.1 upstream (a 400), or None:
    its method, its authority and its regular ``headers`` (``None`` for a CONNECT,
    whose fields go nowhere).

    The fields' names are lower case and none is empty (the engine has checked); the
    names are joined by "!", a token character, the values by a tab, which a value may
    hold."""
    if not _METHOD.fullmatch(method):
        return "the method is not a token"
    if not _AUTHORITY.fullmatch(authority):
        return "the authority holds a character a host name cannot"
    if headers is None:
        return None
    if headers and not _TOKENS.fullmatch(b"!".join([name for name, _ in headers])):
        return "a header name is not a valid token"
    if _CONTROL.search(b"\t".join([value for _, value in headers])):
        return "a header value holds a control character"
    return None
