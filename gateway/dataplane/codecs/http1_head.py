"""What the HTTP/1.1 codec reads in a request head itself, as plain functions: the
framing fields (Host, content-length, chunked, Expect, Upgrade, Connection, a trace
context) and where the request goes (RFC 9112 3.2), into one ``RequestHead``. A head
the gateway will not serve raises ``Refused`` with the status to answer.
"""

from __future__ import annotations

from gateway.dataplane.exchange.head import (
    BODY_CHUNKED,
    BODY_LENGTH,
    BODY_NONE,
    NO_NAMES,
    RequestHead,
    request_head,
)
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
(_HOST, _CONTENT_LENGTH, _TRANSFER_ENCODING, _EXPECT, _UPGRADE, _CONNECTION, _CONTEXT,
 _REQUEST_ID) = range(8)
_FRAMING_FIELDS = {
    **dict.fromkeys(CONTEXT_NAMES, _CONTEXT),
    b"host": _HOST, b"content-length": _CONTENT_LENGTH,
    b"transfer-encoding": _TRANSFER_ENCODING, b"expect": _EXPECT, b"upgrade": _UPGRADE,
    b"connection": _CONNECTION, b"x-request-id": _REQUEST_ID,
}


class Refused(Exception):
    """A request head the gateway answers itself with ``status`` (and ``headers``)."""

    def __init__(self, status: int, detail: str, headers: tuple[Header, ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


def read_head(method: bytes, target: bytes, headers: list[Header],
              reject_parameters: bool = False, keep_alive: bool = True,
              upgrading: bool = False) -> RequestHead:
    """The request head (an absolute-form target's authority replaces Host in its
    headers); ``Refused`` for one the gateway answers itself. A ``CONNECT``'s host is
    its authority, its path empty. ``reject_parameters``: ``path_with_parameters_action:
    reject``; ``keep_alive`` and ``upgrading``: what llhttp found (an Upgrade without
    ``Connection: upgrade`` is ignored, h2c included: not offered here, the request is
    answered in HTTP/1.1)."""
    host = upgrade = request_id = b""
    given_id = False
    hosts = 0
    lengths: set[bytes] | None = None
    chunked = expect_continue = trace_context = False
    tokens = NO_NAMES
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
        elif field == _REQUEST_ID:
            if not given_id:
                given_id = True
                request_id = value
        else:
            trace_context = True
    body_kind = BODY_CHUNKED if chunked else BODY_NONE
    if lengths is not None:
        if len(lengths) > 1 or chunked:
            raise Refused(400, "ambiguous message framing")
        if lengths != {b"0"}:
            body_kind = BODY_LENGTH
    if method == b"CONNECT":
        authority = connect_target(target, host, hosts, body_kind != BODY_NONE)
        return request_head(method, target, b"1.1", headers, authority, "", "", b"", BODY_NONE,
                            False, False, expect_continue, upgrade, True, tokens,
                            trace_context, request_id)
    # where the request goes (RFC 9112 3.2): an absolute-form target's authority
    # replaces the Host header, for the upstream as much as for routing
    absolute = absolute_form(target) if not target.startswith(b"/") else None
    if absolute is not None:
        host, target = absolute
        headers = [(n, v) for n, v in headers if n.lower() != b"host"]
        headers.append((b"Host", host))
    elif hosts != 1:
        raise Refused(400, "exactly one Host header is required")
    if not host:
        raise Refused(400, "the Host header is empty")
    try:
        path, parameters, query = normalise_target(target, reject_parameters)
    except BadTarget as exc:
        raise Refused(400, str(exc)) from None
    if upgrading:
        keep_alive = False  # after an upgrade attempt the parser is spent
    else:
        upgrade = b""
    made = RequestHead()  # every request's: filled in slot by slot (see ``RequestHead``)
    made.method = method
    made.target = target
    made.version = b"1.1"
    made.headers = headers
    made.host = host.decode("latin-1").lower()
    made.path = path.decode("latin-1")
    made.path_parameters = parameters.decode("latin-1") if parameters else ""
    made.query = query
    made.framing = body_kind
    made.complete = not body_kind and not upgrade
    made.keep_alive = keep_alive
    made.expect_continue = expect_continue
    made.upgrade = upgrade
    made.connect = False
    made.connection_tokens = tokens
    made.trace_context = trace_context
    made.request_id = request_id
    return made


def absolute_form(target: bytes) -> tuple[bytes, bytes] | None:
    """(authority, origin-form target) of an absolute-form target, else None."""
    try:
        return split_absolute(target)
    except BadTarget as exc:  # a client's bad target, not a server error
        raise Refused(400, str(exc)) from None


def connect_target(target: bytes, host: bytes, hosts: int, has_body: bool) -> str:
    """The authority of ``CONNECT host:port`` (a tunnel to a tcp+https route): an
    authority target, one Host naming the same one, and no body (what follows the head
    belongs to the tunnel)."""
    try:
        authority = connect_authority(target)
    except BadTarget as exc:
        raise Refused(400, str(exc)) from None
    if hosts != 1:
        raise Refused(400, "exactly one Host header is required")
    if normalise_host(host.decode("latin-1")) != authority:
        raise Refused(400, "the Host header must name the CONNECT authority")
    if has_body:
        raise Refused(400, "a CONNECT request has no body")
    return authority
