"""What a codec hands an exchange: the request head, and the facts of its connection.

A codec builds one ``RequestHead`` per request, once the head is read and checked, and
one ``ConnectionFacts`` per connection; the exchange reads both and writes neither. They
are the whole of what crosses from a codec into an exchange (besides the body, fed with
``request_body`` / ``request_complete``): a codec never writes an exchange's fields.
"""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from gateway.tls.client_certs import ClientCertPolicy
from gateway.tls.server import connection_tls, peer_chain

Header = tuple[bytes, bytes]

BODY_NONE, BODY_LENGTH, BODY_CHUNKED = 0, 1, 2
NO_NAMES: frozenset[bytes] = frozenset()  # (one shared empty set, not one per request)


class RequestHead:
    """One request's head as the codec read it (HTTP/1.1 or HTTP/2).

    ``method``, ``target`` (as sent), ``version`` (``b"1.1"``, ``b"2"``), ``headers``
    (HTTP/2's cookies joined into one; an absolute-form target's authority as Host),
    where it goes (``host`` lower case, ``path`` normalised without the last segment's
    ``;`` parameters, which are ``path_parameters``, ``query`` with its ``?``), and its
    framing: ``framing`` (``BODY_*``: how the body that follows is delimited),
    ``complete`` (nothing follows the head: the request is whole), ``keep_alive``,
    ``expect_continue``, ``upgrade`` (the protocol an upgrade asks for; a CONNECT's
    Upgrade value), ``connect`` (CONNECT to a tcp+https route: a tunnel, not a request),
    ``connection_tokens`` (the names ``Connection`` lists) and ``trace_context`` (a
    trace header came, so tracing searches for a parent), ``request_id`` (the first
    ``X-Request-Id`` value, b"" when none came; None for a head refused before it was
    read whole).

    Slotted, and without an ``__init__``: one is built per request, on the hottest
    path, where the codecs fill a bare ``RequestHead()`` slot by slot (in CPython 3.11
    a Python ``__init__`` taking the seventeen fields cost 0.18 µs more a request, of
    some 15 µs in ``bench/inproc.py``: its call is not specialised).
    ``test_codec_handover`` holds that the codecs set every slot; elsewhere (a refused
    head, tests) ``request_head`` builds one."""

    __slots__ = ("complete", "connect", "connection_tokens", "expect_continue", "framing",
                 "headers", "host", "keep_alive", "method", "path", "path_parameters",
                 "query", "request_id", "target", "trace_context", "upgrade", "version")

    method: bytes
    target: bytes
    version: bytes
    headers: list[Header]
    host: str
    path: str
    path_parameters: str
    query: bytes
    framing: int
    complete: bool
    keep_alive: bool
    expect_continue: bool
    upgrade: bytes
    connect: bool
    connection_tokens: frozenset[bytes]
    trace_context: bool
    request_id: bytes | None


def request_head(method: bytes, target: bytes, version: bytes, headers: list[Header],
                 host: str = "", path: str = "/", path_parameters: str = "",
                 query: bytes = b"", framing: int = BODY_NONE, complete: bool = False,
                 keep_alive: bool = True, expect_continue: bool = False,
                 upgrade: bytes = b"", connect: bool = False,
                 connection_tokens: frozenset[bytes] = NO_NAMES,
                 trace_context: bool = False, request_id: bytes | None = None) -> RequestHead:
    """A ``RequestHead`` of these fields (off the hot path: see ``RequestHead``)."""
    head = RequestHead()
    head.method = method
    head.target = target
    head.version = version
    head.headers = headers
    head.host = host
    head.path = path
    head.path_parameters = path_parameters
    head.query = query
    head.framing = framing
    head.complete = complete
    head.keep_alive = keep_alive
    head.expect_continue = expect_continue
    head.upgrade = upgrade
    head.connect = connect
    head.connection_tokens = connection_tokens
    head.trace_context = trace_context
    head.request_id = request_id
    return head


# An exchange whose head has not been read yet (HTTP/1.1 makes the exchange at the
# request's first byte, so that a request cut off or refused mid-head is logged).
NO_HEAD = request_head(b"", b"", b"", [])


class ConnectionFacts:
    """What a request's decisions may know of its connection, one per connection:
    ``peer`` (the client's address: the PROXY header's source when the listener reads
    one, else the TCP peer's), and over TLS the SNI, the certificate chosen for it and
    the client's certificate with the verdicts of the routes' client-certificate
    policies. TLS facts are read once, on first use (the handshake is over once a
    request arrives); a plain connection has none."""

    __slots__ = ("_tls", "_verdicts", "mcp_buffered", "peer", "served", "transport")

    def __init__(self, peer: str, transport: Any = None) -> None:
        self.peer = peer
        self.transport = transport
        self._tls: tuple[str, Any, Any] | None = None if transport is not None \
            else ("", None, None)
        # by the policy object itself (hashed by identity, and held: a reload's new
        # policy can never be taken for an old one whose id it reuses on a connection
        # that outlives the reload); a few policies per connection at most
        self._verdicts: dict[ClientCertPolicy, str | None] | None = None
        # the last routed Host found to be servable on this connection: routing asks
        # ``misdirected`` only about another (the same host again is the usual request)
        self.served = ""
        # the bytes of MCP request bodies being read on this connection, together
        # (HTTP/2 reads many at once: ``exchange.mcp_request``'s per-connection budget)
        self.mcp_buffered = 0

    def tls_info(self) -> tuple[str, Any, Any]:
        """(SNI, the certificate chosen for it, the store it came from)."""
        if self._tls is None:
            self._tls = connection_tls(self.transport)
        return self._tls

    def misdirected(self, host: str, routed: bool) -> str:
        """The host name (without port) when this connection may not serve ``host`` (a
        421), else "". The SNI's own name is served, and, for a routed host, any name
        the certificate chosen for the SNI would also be chosen for. An answer for a
        routed host holds for the connection's life: SNI and certificate do not change."""
        if routed and host == self.served:
            return ""
        sni, certificate, store = self.tls_info()
        if sni and store is not None and host != sni:  # (equal: the usual case, port 443)
            name = _hostname(host)
            if name != sni and (not routed or (
                    certificate is not None and not store.covers(certificate, name))):
                return name
        if routed:
            self.served = host
        return ""

    def client_certificate(self) -> bytes:
        """The client's certificate (DER), empty when it sent none; checked only by a
        route's ``client_cert_problem``."""
        if self.transport is None:
            return b""
        chain = peer_chain(self.transport)
        return chain[0].public_bytes(Encoding.DER) if chain else b""

    def client_cert_problem(self, policy: ClientCertPolicy) -> str | None:
        """Why the client's certificate fails ``policy``, or None; one verdict per policy
        for the connection's life."""
        verdicts = self._verdicts
        if verdicts is None:
            verdicts = self._verdicts = {}
        if policy not in verdicts:
            chain = peer_chain(self.transport) if self.transport is not None else []
            verdicts[policy] = policy.check(chain)
        return verdicts[policy]


def _hostname(host: str) -> str:
    """The Host value without its port (IPv6 literals keep their brackets)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
