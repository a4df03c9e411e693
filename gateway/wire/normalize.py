"""Request-target normalisation: the path the policy sees is the path the upstream gets.

Applied once, before routing. The path is split from the query; percent-encoded
unreserved characters are decoded (``%2e`` is ``.``); dot segments are removed (RFC 3986
5.2.4) and runs of slashes merged, so ``/public/../admin``, ``/public/%2e%2e/admin`` and
``//admin`` all become ``/admin`` and are routed (and authorized) as such. What cannot be
normalised safely is refused: encoded slashes and backslashes (``%2f``, ``%5c``), a raw
backslash, encoded or raw control characters, malformed percent escapes, and targets
that are not in origin form. Other escapes are kept as they are, upper-cased.

Path parameters (issue 39): Tomcat, Jetty and Spring drop ``;params`` from every segment
before they map the path, so ``/private;x/admin/x`` is ``/private/admin/x`` to them and
``/public/..;x/admin`` is ``/admin``. The gateway reads a path as they do, and so does
every other upstream, because it forwards what it read:

- a segment that is ``.`` or ``..`` once its parameters are removed is refused (such a
  server would resolve it as a dot segment, where an RFC 3986 one would not);
- parameters (from ``;`` or ``%3B`` to the end of the segment) are removed from every
  segment but the last, for routing, policy and the upstream alike; a segment left empty
  is dropped as ``//`` is. ``path_with_parameters_action: reject`` refuses such a path
  instead;
- the last segment's parameters (``/app;jsessionid=1``) are split off: routing and policy
  see ``/app``, and the upstream gets them back after the path (session ids in URLs).

``%3B`` counts as ``;`` although Tomcat and Jetty read it as a literal ``;``: a segment
``a%3Bb`` is ``a`` to the gateway and a missing ``a;b`` to them, never another resource.
"""

from __future__ import annotations

import re

_HEX = frozenset(b"0123456789abcdefABCDEF")
_UNRESERVED = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
# Bytes allowed raw in a path (RFC 3986 pchar + "/"), besides "%".
_PATH_SAFE = frozenset(b"!$&'()*+,;=:@/") | _UNRESERVED
# One character class, no nested repetition: ``(?:[...]+/?)*`` backtracked exponentially
# on a long segment followed by a byte outside the class (``/aaaa...a%41``: seconds at 24
# bytes, the reactor stuck for good at 40). ``//`` is kept off the fast path by the caller.
# ``;`` is left out of the path's class: a path with parameters is never returned as is.
_FAST_PATH = re.compile(rb"^/[A-Za-z0-9\-._~!$&'()*+,=:@/]*(?:\?[^\x00-\x20\x7f#]*)?")
# The same with ``;``: a path it matches (without "/." or "//") is normalised already and
# only needs its parameters split off (``/app/page;jsessionid=1``), at a fifth of the cost
# of the general path.
_FAST_PARAMETERS = re.compile(
    rb"^/[A-Za-z0-9\-._~!$&'()*+,;=:@/]*(?:\?[^\x00-\x20\x7f#]*)?"
)


class BadTarget(ValueError):
    """The request target is refused; the message says why (shown to the client)."""


def split_target(target: bytes) -> tuple[bytes, bytes]:
    """``/p?q`` into (path, query-with-?); the fragment, if a client sent one, dropped."""
    target = target.split(b"#", 1)[0]
    path, sep, query = target.partition(b"?")
    return path, (sep + query if sep else b"")


def normalise_target(
    target: bytes, reject_parameters: bool = False
) -> tuple[bytes, bytes, bytes]:
    """(path, last-segment parameters, query) of an origin-form target, or ``BadTarget``.

    The path is what routing and policy see, without any ``;`` parameters; the upstream
    gets the path (after route rewrites) followed by the parameters (``;jsessionid=1``
    or ``b""``). ``reject_parameters``: parameters on another segment than the last are
    refused rather than removed. The common case (no dots, ``;``, escapes or doubled
    slashes) costs one regex match.
    """
    if _FAST_PATH.fullmatch(target) and b"/." not in target and b"//" not in target:
        path, query = split_target(target)
        return path, b"", query
    if (b";" in target and _FAST_PARAMETERS.fullmatch(target) and b"/." not in target
            and b"//" not in target):
        path, query = split_target(target)
        path, parameters = split_parameters(path, reject_parameters)
        return path, parameters, query
    if not target.startswith(b"/"):
        raise BadTarget("the request target must be a path starting with '/'")
    path, query = split_target(target)
    for byte in query:
        if byte < 0x21 or byte == 0x7F:
            raise BadTarget("control characters in the query string")
    path, parameters = _normalise_path(path, reject_parameters)
    return path, parameters, query


def _normalise_path(path: bytes, reject_parameters: bool = False) -> tuple[bytes, bytes]:
    decoded = bytearray()
    i, n = 0, len(path)
    while i < n:
        byte = path[i]
        if byte == 0x25:  # "%"
            if i + 2 >= n:
                raise BadTarget("malformed percent-encoding in the path")
            h1, h2 = path[i + 1], path[i + 2]
            if h1 not in _HEX or h2 not in _HEX:
                raise BadTarget("malformed percent-encoding in the path")
            value = int(path[i + 1 : i + 3], 16)
            if value in (0x2F, 0x5C):
                raise BadTarget("encoded slash or backslash in the path")
            if value < 0x20 or value == 0x7F:
                raise BadTarget("encoded control character in the path")
            if value in _UNRESERVED:
                decoded.append(value)
            else:
                decoded += b"%" + path[i + 1 : i + 3].upper()
            i += 3
            continue
        if byte == 0x5C:
            raise BadTarget("backslash in the path")
        if byte < 0x21 or byte == 0x7F:
            raise BadTarget("control character or space in the path")
        if byte >= 0x80:
            decoded += b"%%%02X" % byte
        elif byte in _PATH_SAFE:
            decoded.append(byte)
        else:
            decoded += b"%%%02X" % byte
        i += 1
    normalised = remove_dot_segments(bytes(decoded))
    if b";" in normalised or b"%3B" in normalised:
        return split_parameters(normalised, reject_parameters)
    return normalised, b""


_PARAMETERS = re.compile(rb";|%3B")


def split_parameters(path: bytes, reject_parameters: bool = False) -> tuple[bytes, bytes]:
    """A normalised path as (path without parameters, the last segment's parameters).

    ``BadTarget`` for a segment that is ``.`` or ``..`` once its parameters are removed,
    and with ``reject_parameters`` for parameters on any segment but the last.
    """
    segments = path.split(b"/")
    last = len(segments) - 1
    kept = [b""]
    parameters = b""
    for index in range(1, last + 1):
        segment = segments[index]
        found = _PARAMETERS.search(segment)
        if found is None:
            kept.append(segment)
            continue
        base = segment[: found.start()]
        if base in (b".", b".."):
            raise BadTarget(
                "a path segment that is '.' or '..' followed by ';' parameters is refused "
                "(servers that drop path parameters would read it as a dot segment)"
            )
        if index == last:
            parameters = segment[found.start() :]
            kept.append(base)
        elif reject_parameters:
            raise BadTarget(
                "';' parameters are refused in a path segment other than the last "
                "(path_with_parameters_action: reject)"
            )
        elif base:  # an emptied segment goes, as "//" does
            kept.append(base)
    return b"/".join(kept) or b"/", parameters


def remove_dot_segments(path: bytes) -> bytes:
    """RFC 3986 5.2.4 on an absolute path, with runs of ``/`` merged into one.

    A trailing ``/`` is kept (``/a/b/..`` -> ``/a/``); ``..`` never climbs above ``/``.
    """
    segments = path.split(b"/")[1:]
    out: list[bytes] = []
    trailing = False
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if segment in (b"", b"."):
            trailing = index == last
        elif segment == b"..":
            if out:
                out.pop()
            trailing = index == last
        else:
            out.append(segment)
            trailing = False
    if not out:
        return b"/"
    return b"/" + b"/".join(out) + (b"/" if trailing else b"")


def split_absolute(target: bytes) -> tuple[bytes, bytes] | None:
    """An absolute-form target (``http://host/p?q``) as (authority, origin-form target).

    RFC 9112 3.2.2: a server must accept it, and its authority replaces the Host header.
    """
    low = target[:8].lower()
    if low.startswith(b"http://"):
        rest = target[7:]
    elif low.startswith(b"https://"):
        rest = target[8:]
    else:
        return None
    cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
    authority, origin = rest[:cut], rest[cut:]
    if not authority or b"@" in authority:
        raise BadTarget("the absolute request target has no valid authority")
    if not origin.startswith(b"/"):
        origin = b"/" + origin
    return authority, origin


_AUTHORITY = re.compile(rb"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})")


def connect_authority(target: bytes) -> str:
    """The ``host:port`` of a CONNECT target (RFC 9110 9.3.6: authority-form only),
    lower-cased, without a trailing dot; ``BadTarget`` for anything else."""
    match = _AUTHORITY.fullmatch(target)
    if match is None:
        raise BadTarget("CONNECT needs a target of the form host:port")
    port = int(match.group(2))
    if not 0 < port < 65536:
        raise BadTarget("CONNECT needs a port between 1 and 65535")
    host = match.group(1).decode("ascii").lower().rstrip(".")
    return f"{host}:{port}"
