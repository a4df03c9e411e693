"""What the HTTP/1.1 codec reads in a request head itself, as plain functions: the
framing fields (Host, content-length, chunked, Expect, Upgrade, Connection, a trace
context) and where the request goes (RFC 9112 3.2). A head the gateway will not
serve raises ``Refused`` with the status to answer.
"""

from __future__ import annotations

from gateway.dataplane.routing.router import normalise_host
from gateway.observability.tracing.propagation import CONTEXT_NAMES
from gateway.wire.headers import NAME_INFO, learn_name, named_tokens
from gateway.wire.normalize import (
    BadTarget,
    connect_authority,
    normalise_target,
    split_absolute,
)

Header = tuple[bytes, bytes]

# The request fields the codec reads itself, by lower-case name (one lookup per field
# instead of a chain of comparisons; most names are none of these).
_HOST, _CONTENT_LENGTH, _TRANSFER_ENCODING, _EXPECT, _UPGRADE, _CONNECTION, _CONTEXT = range(7)
_FRAMING_FIELDS = {
    **dict.fromkeys(CONTEXT_NAMES, _CONTEXT),
    b"host": _HOST, b"content-length": _CONTENT_LENGTH,
    b"transfer-encoding": _TRANSFER_ENCODING, b"expect": _EXPECT, b"upgrade": _UPGRADE,
    b"connection": _CONNECTION,
}


class Refused(Exception):
    """A request head the gateway answers itself with ``status`` (and ``headers``)."""

    def __init__(self, status: int, detail: str, headers: tuple[Header, ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


class Framing:
    """The fields of one request head that the codec acts on."""

    __slots__ = ("chunked", "connection_tokens", "expect_continue", "has_body", "host",
                 "hosts", "trace_context", "upgrade")

    def __init__(self, host: bytes, hosts: int, chunked: bool, has_body: bool,
                 expect_continue: bool, upgrade: bytes, connection_tokens: frozenset[bytes],
                 trace_context: bool) -> None:
        self.host = host  # the last Host value
        self.hosts = hosts  # how many Host fields
        self.chunked = chunked
        self.has_body = has_body  # chunked, or a content-length other than 0
        self.expect_continue = expect_continue
        self.upgrade = upgrade
        self.connection_tokens = connection_tokens
        self.trace_context = trace_context


def read_framing(headers: list[Header]) -> Framing:
    """The framing fields of ``headers``; ``Refused`` (400) when they are ambiguous or
    name a transfer coding other than chunked. (Locals in the loop, one object at the
    end: this runs for every HTTP/1.1 request.)"""
    host = upgrade = b""
    hosts = 0
    lengths: set[bytes] | None = None
    chunked = expect_continue = trace_context = False
    tokens: frozenset[bytes] = frozenset()
    names = NAME_INFO
    for name, value in headers:
        info = names.get(name)
        if info is None:
            info = learn_name(name)
        field = _FRAMING_FIELDS.get(info[0])
        if field is None:
            continue
        if field == _HOST:
            hosts += 1
            host = value
        elif field == _CONTENT_LENGTH:
            if lengths is None:
                lengths = set()
            lengths.add(value.strip())
        elif field == _TRANSFER_ENCODING:
            chunked = True
            if value.strip().lower() != b"chunked":
                raise Refused(400, "only 'Transfer-Encoding: chunked' is accepted")
        elif field == _EXPECT:
            if value.strip().lower() == b"100-continue":
                expect_continue = True
        elif field == _UPGRADE:
            upgrade = value.strip()
        elif field == _CONNECTION:
            tokens = tokens | named_tokens(value)
        else:
            trace_context = True
    has_body = chunked
    if lengths is not None:
        if len(lengths) > 1 or chunked:
            raise Refused(400, "ambiguous message framing")
        has_body = lengths != {b"0"}
    return Framing(host, hosts, chunked, has_body, expect_continue, upgrade, tokens,
                   trace_context)


def origin(target: bytes, framing: Framing, headers: list[Header]
           ) -> tuple[bytes, bytes, bytes, list[Header]]:
    """Host, normalised path and query of a request that is not CONNECT, and its header
    list: an absolute-form target's authority replaces the Host header (RFC 9112 3.2.2),
    for the upstream as much as for routing."""
    host = framing.host
    try:
        absolute = split_absolute(target) if not target.startswith(b"/") else None
    except BadTarget as exc:  # a client's bad target, not a server error
        raise Refused(400, str(exc)) from None
    if absolute is not None:
        host, target = absolute
        headers = [(n, v) for n, v in headers if n.lower() != b"host"]
        headers.append((b"Host", host))
    elif framing.hosts != 1:
        raise Refused(400, "exactly one Host header is required")
    if not host:
        raise Refused(400, "the Host header is empty")
    try:
        path, query = normalise_target(target)
    except BadTarget as exc:
        raise Refused(400, str(exc)) from None
    return host, path, query, headers


def connect_target(target: bytes, framing: Framing) -> str:
    """The authority of ``CONNECT host:port`` (a tunnel to a tcp+https route): an
    authority target, one Host naming the same one, and no body (what follows the head
    belongs to the tunnel)."""
    try:
        authority = connect_authority(target)
    except BadTarget as exc:
        raise Refused(400, str(exc)) from None
    if framing.hosts != 1:
        raise Refused(400, "exactly one Host header is required")
    if normalise_host(framing.host.decode("latin-1")) != authority:
        raise Refused(400, "the Host header must name the CONNECT authority")
    if framing.has_body:
        raise Refused(400, "a CONNECT request has no body")
    return authority
