"""What the HTTP/2 codec reads in a request's HEADERS block, as a plain function: the
pseudo-headers, the fields the exchange needs to know of (Host, content-length, a trace
context, X-Request-Id) and where the request goes, into one ``RequestHead``, with why a
head is refused (answered 400 on its stream). The counterpart of ``codecs.http1_head``.
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
from gateway.dataplane.http2.fields import forwarding_problem
from gateway.observability.tracing.propagation import CONTEXT_NAMES
from gateway.wire.normalize import BadTarget, connect_authority, normalise_target

Header = tuple[bytes, bytes]


def read_head(fields: list[Header], ended: bool,
              reject_parameters: bool) -> tuple[RequestHead, str]:
    """The request head of a HEADERS block (``ended``: END_STREAM came with it), and why
    it is refused ("" if it is not): the head of a refused one is what it was read as,
    for its answer and log. ``reject_parameters``: ``path_with_parameters_action:
    reject``."""
    headers: list[Header] = []
    cookies: list[bytes] = []
    method = target = authority = host = request_id = b""
    given_id = False
    has_length = trace_context = False
    for name, value in fields:
        if name == b":method":
            method = value
        elif name == b":path":
            target = value
        elif name == b":authority":
            authority = value
        elif name.startswith(b":"):
            continue
        elif name == b"cookie":
            cookies.append(value)
        else:
            if name == b"host":
                host = value
            elif name == b"content-length":
                has_length = True
            elif name in CONTEXT_NAMES:  # HTTP/2 names are lower case
                trace_context = True
            elif name == b"x-request-id" and not given_id:
                given_id = True
                request_id = value
            headers.append((name, value))
    if cookies:
        headers.append((b"cookie", b"; ".join(cookies)))  # RFC 9113 8.2.3
    where = (authority or host).decode("latin-1").lower()
    framing = BODY_NONE if ended else (BODY_LENGTH if has_length else BODY_CHUNKED)
    connect = method == b"CONNECT"
    problem = forwarding_problem(method, authority or host, None if connect else headers)
    if problem is None and connect:
        # RFC 9113 8.5: ``:authority`` host:port and no ``:scheme``/``:path``
        if target:
            problem = "CONNECT takes no :path (RFC 9113 8.5)"
        else:
            try:
                where = connect_authority(authority)
            except BadTarget as exc:
                problem = str(exc)
            else:
                return request_head(method, target, b"2", headers, where, "", "", b"",
                                    BODY_NONE, True, True, False, b"", True, NO_NAMES,
                                    trace_context, request_id), ""
    elif problem is None and not where:
        problem = "the request has no authority"
    elif problem is None:
        try:
            path, parameters, query = normalise_target(target, reject_parameters)
        except BadTarget as exc:
            problem = str(exc)
        else:
            made = RequestHead()  # every request's: filled in slot by slot (see its doc)
            made.method = method
            made.target = target
            made.version = b"2"
            made.headers = headers
            made.host = where
            made.path = path.decode("latin-1")
            made.path_parameters = parameters.decode("latin-1") if parameters else ""
            made.query = query
            made.framing = framing
            made.complete = ended
            made.keep_alive = True
            made.expect_continue = False
            made.upgrade = b""
            made.connect = False
            made.connection_tokens = NO_NAMES
            made.trace_context = trace_context
            made.request_id = request_id
            return made, ""
    return request_head(method, target, b"2", headers, where, "/", "", b"", framing, ended,
                        True, False, b"", False, NO_NAMES, trace_context,
                        request_id), problem or ""
