"""A new connection until its first request byte: setup deadlines, then the codec.

The switch is every connection's first protocol. From the accept it is watched by the
core's watchdog (see ``setup_verdict``): the PROXY header and the TLS handshake must be
done within ``timeout_handshake``, and after that the first byte must come within
``timeout_idle`` (a new connection is an idle one). Its first bytes choose the codec:
with TLS the choice is ALPN's; in plain text an HTTP/2 client says so with the h2c
prior-knowledge preface. ``codec_type`` limits the choice: ``http1`` never speaks
HTTP/2, ``http2`` only HTTP/2, ``auto`` either. The chosen protocol replaces this one
on the transport, so it costs nothing after the first bytes.

In plain text with ``auto``, bytes that are neither the preface nor an HTTP/1 request
line are a failed HTTP/2 preface, not a bad HTTP/1.1 request (see ``first_line``).
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.codecs.http1 import MAX_TARGET, Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.http2.protocol import GOAWAY, PREFACE, SETTINGS, ErrorCode, frame
from gateway.net.pipe import CLOSE_GRACE

SETUP_EXPIRED = "setup"  # PROXY header or TLS handshake not done in time
IDLE_EXPIRED = "idle"  # set up, but no request byte within timeout_idle
HTTP1 = "http1"
NOT_HTTP1 = "not-http1"
# RFC 9110 5.6.2: a method is a token
_METHOD = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]*")
# What a failed HTTP/2 preface is answered with (RFC 9113 3.4, 5.4.1): the server
# preface (an empty SETTINGS), then GOAWAY PROTOCOL_ERROR naming no stream, with a
# reason a person who typed at the port can read.
FAILED_PREFACE = frame(SETTINGS, 0, 0) + frame(
    GOAWAY, 0, 0, bytes(4) + ErrorCode.PROTOCOL_ERROR.to_bytes(4, "big")
    + b"neither an HTTP/1.1 request line nor the HTTP/2 preface")
log = Logger()


def first_line(data: bytes) -> str | None:
    """Whether the first bytes of a plain-text ``auto`` connection, which are not the
    HTTP/2 preface, begin an HTTP/1 request: ``HTTP1``, ``NOT_HTTP1``, or None while
    the bytes so far could still be either.

    An HTTP/1 request line is a method, white space, and a target followed by an
    ``HTTP/`` version (``GET / HTTP/1.1``), or by nothing (HTTP/0.9's ``GET /``). Only
    what cannot be one is NOT_HTTP1: a first byte that is no method character (a TLS
    ClientHello), a line that ends after the method or names something else than a
    version (``INVALID CONNECTION PREFACE``), and the method ``PRI``, which is HTTP/2's
    preface and "never used by an actual client" (RFC 7540 11.6). Whatever names
    ``HTTP/`` is HTTP1, however malformed otherwise: the HTTP/1.1 codec answers it as
    before (400, 414, 426). Empty lines before a request line are HTTP/1's (RFC 9112
    2.2), so a leading CR or LF is HTTP1 at once."""
    if data[0] in b"\r\n":
        return HTTP1
    method = _METHOD.match(data)
    pos = method.end() if method else 0
    if pos == len(data):
        return None  # the method is still arriving
    if not pos or data[pos] not in b" \t" or data[:pos] == b"PRI":
        return NOT_HTTP1
    ends = [i for i in (data.find(b"\r", pos), data.find(b"\n", pos)) if i >= 0]
    rest = data[pos:min(ends)] if ends else data[pos:]
    if b"HTTP/" in rest:
        return HTTP1
    if not ends:
        return None
    return HTTP1 if len(rest.split()) == 1 else NOT_HTTP1


def setup_verdict(now: float, accepted: float, ready_at: float | None,
                  handshake_timeout: float, idle_timeout: float) -> str | None:
    """Why a connection that has not sent a request byte yet must end now, or None.
    ``ready_at`` is when its setup (PROXY header, TLS handshake) finished, None if not yet."""
    if ready_at is None:
        return SETUP_EXPIRED if now - accepted > handshake_timeout else None
    if idle_timeout and now - ready_at > idle_timeout:
        return IDLE_EXPIRED
    return None


def proxy_header_pending(transport: Any) -> bool:
    """Whether a PROXY-protocol wrapper below this transport still waits for its header."""
    while transport is not None:
        pending = getattr(transport, "header_pending", None)
        if pending is not None:
            return bool(pending)
        transport = getattr(transport, "transport", None)
    return False


@implementer(IHandshakeListener)
class ProtocolSwitch(Protocol):
    def __init__(self, core: ProxyCore, codec: str, tls: bool) -> None:
        self.core = core
        self.codec = codec
        self.tls = tls
        self.buffer = b""
        self.accepted = 0.0
        self.ready_at: float | None = None
        # plain-text auto only: since when a request line that may be HTTP/1 is arriving
        self.line_since: float | None = None
        self.refused_at: float | None = None  # when a failed HTTP/2 preface was answered

    def connectionMade(self) -> None:
        self.accepted = self.core.reactor.seconds()
        if not self.tls and not proxy_header_pending(self.transport):
            self.ready_at = self.accepted
        self.core.connections.add(self)

    def handshakeCompleted(self) -> None:
        self.ready_at = self.core.reactor.seconds()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.core.connections.discard(self)

    def drain(self) -> None:
        """The gateway is stopping (``services.drain``): a connection that has sent no
        request byte yet is idle, and closed; one whose first bytes are in becomes its
        codec with them, and drains there."""
        transport: Any = self.transport
        if not self.buffer and transport is not None:
            self.core.connections.discard(self)
            transport.abortConnection()

    def check_deadlines(self, now: float) -> None:
        transport: Any = self.transport
        core = self.core
        if self.refused_at is not None:
            if now - self.refused_at > CLOSE_GRACE and transport is not None:
                core.connections.discard(self)
                transport.abortConnection()
            return
        if self.line_since is not None:
            # The request line's first bytes are in: the HTTP/1.1 codec would have had
            # them, and its read deadline runs (it answers 408 when handed them now).
            if core.timeout_read and now - self.line_since > core.timeout_read:
                self._become_http1(b"").check_deadlines(now)
            return
        if self.ready_at is None and not self.tls and not proxy_header_pending(self.transport):
            self.ready_at = now  # plain text: set up once any PROXY header is in
        verdict = setup_verdict(now, self.accepted, self.ready_at, core.timeout_handshake,
                                core.timeout_idle)
        if verdict is not None and transport is not None:
            self.core.connections.discard(self)
            transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.refused_at is not None:
            return
        self.buffer += data
        if self.codec == "http1":
            http2 = False
        elif self.tls:
            negotiated = getattr(self.transport, "negotiatedProtocol", None)
            http2 = negotiated == b"h2" or self.codec == "http2"
        elif self.codec == "http2":
            http2 = True
        else:
            head = self.buffer[: len(PREFACE)]
            if PREFACE.startswith(head) and len(head) < len(PREFACE):
                return  # not enough bytes to tell yet
            http2 = head == PREFACE
            if not http2:
                kind = first_line(self.buffer)
                if kind is None and len(self.buffer) <= MAX_TARGET:
                    if self.line_since is None:
                        self.line_since = self.core.reactor.seconds()
                    return
                if kind == NOT_HTTP1:
                    self._refuse()
                else:
                    self._become_http1(data)
                return
        self.core.connections.discard(self)
        self._become(H2Connection(self.core) if http2 else Http1Connection(self.core))

    def _become_http1(self, new: bytes) -> Http1Connection:
        """Hand the bytes to the HTTP/1.1 codec. Those that waited here for the rest of
        the request line (since ``line_since``) go first and alone: they begin the first
        request, whose read deadline then runs from their arrival, as if the codec had
        had them at once. ``new`` (the end of the buffer, just received) follows."""
        self.core.connections.discard(self)
        codec = Http1Connection(self.core)
        since = self.line_since
        if since is not None:
            self.buffer = self.buffer[: len(self.buffer) - len(new)]
        self._become(codec)
        if since is not None:
            if codec.current is not None:
                codec.request_started = since
            if new:
                codec.dataReceived(new)
        return codec

    def _refuse(self) -> None:
        """Neither the HTTP/2 preface nor an HTTP/1 request line: a client that meant
        HTTP/2 (h2c by prior knowledge) and failed its preface, which RFC 9113 3.4 makes
        a connection error PROTOCOL_ERROR, or one that speaks neither. Both are answered
        with SETTINGS and GOAWAY, and the connection closed; nothing else is read. No
        ``H2Connection`` is made for it (it would count a strike against the address,
        see ``penalty``: a TLS client at this plain port is a mistake, not an attack)."""
        transport: Any = self.transport
        self.refused_at = self.core.reactor.seconds()
        self.buffer = b""
        log.info("connection from {client} refused: neither an HTTP/1.1 request line "
                 "nor the HTTP/2 preface", client=getattr(transport.getPeer(), "host", ""))
        transport.write(FAILED_PREFACE)
        transport.loseConnection()

    def _become(self, protocol: Protocol) -> None:
        transport: Any = self.transport
        if hasattr(transport, "wrappedProtocol"):
            transport.wrappedProtocol = protocol  # TLS (or another wrapper) in front
        else:
            transport.protocol = protocol
        protocol.makeConnection(transport)
        data, self.buffer = self.buffer, b""
        protocol.dataReceived(data)


class HTTPFactory(Factory):
    """Connections of one listener, each starting as a ``ProtocolSwitch``."""

    noisy = False

    def __init__(self, core: ProxyCore, codec: str, tls: bool) -> None:
        self.core = core
        self.codec = codec
        self.tls = tls

    def buildProtocol(self, addr: Any) -> Protocol:
        return ProtocolSwitch(self.core, self.codec, self.tls)

    def startFactory(self) -> None:
        self.core.start()

    def stopFactory(self) -> None:
        self.core.stop()
