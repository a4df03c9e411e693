"""A new connection until its first request byte: setup deadlines, then the codec.

The switch is every connection's first protocol. From the accept it is watched by the
core's watchdog (see ``setup_verdict``): the PROXY header and the TLS handshake must be
done within ``timeout_handshake``, and after that the first byte must come within
``timeout_idle`` (a new connection is an idle one). Its first bytes choose the codec:
with TLS the choice is ALPN's; in plain text an HTTP/2 client says so with the h2c
prior-knowledge preface. ``codec_type`` limits the choice: ``http1`` never speaks
HTTP/2, ``http2`` only HTTP/2, ``auto`` either. The chosen protocol replaces this one
on the transport, so it costs nothing after the first bytes.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.codecs.http2 import PREFACE, H2Connection
from gateway.dataplane.core import ProxyCore

SETUP_EXPIRED = "setup"  # PROXY header or TLS handshake not done in time
IDLE_EXPIRED = "idle"  # set up, but no request byte within timeout_idle


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

    def connectionMade(self) -> None:
        self.accepted = self.core.reactor.seconds()
        if not self.tls and not proxy_header_pending(self.transport):
            self.ready_at = self.accepted
        self.core.connections.add(self)

    def handshakeCompleted(self) -> None:
        self.ready_at = self.core.reactor.seconds()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.core.connections.discard(self)

    def check_deadlines(self, now: float) -> None:
        if self.ready_at is None and not self.tls and not proxy_header_pending(self.transport):
            self.ready_at = now  # plain text: set up once any PROXY header is in
        core = self.core
        verdict = setup_verdict(now, self.accepted, self.ready_at, core.timeout_handshake,
                                core.timeout_idle)
        transport: Any = self.transport
        if verdict is not None and transport is not None:
            self.core.connections.discard(self)
            transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
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
        self.core.connections.discard(self)
        self._become(H2Connection(self.core) if http2 else Http1Connection(self.core))

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
