"""Choosing the codec of a new connection: HTTP/1.1 or HTTP/2.

With TLS the choice is ALPN's; in plain text an HTTP/2 client says so with the h2c
prior-knowledge preface. ``codec_type`` limits the choice: ``http1`` never speaks
HTTP/2, ``http2`` only HTTP/2, ``auto`` either. The chosen protocol replaces this one
on the transport, so it costs nothing after the first bytes.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.protocol import Factory, Protocol

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.codecs.http2 import PREFACE, H2Connection
from gateway.dataplane.core import ProxyCore


class ProtocolSwitch(Protocol):
    def __init__(self, core: ProxyCore, codec: str, tls: bool) -> None:
        self.core = core
        self.codec = codec
        self.tls = tls
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        if self.tls:
            negotiated = getattr(self.transport, "negotiatedProtocol", None)
            http2 = negotiated == b"h2" or self.codec == "http2"
        elif self.codec == "http2":
            http2 = True
        else:
            head = self.buffer[: len(PREFACE)]
            if PREFACE.startswith(head) and len(head) < len(PREFACE):
                return  # not enough bytes to tell yet
            http2 = head == PREFACE
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
    """Connections of one listener: HTTP/1.1 directly, or a switch when HTTP/2 may be
    spoken."""

    noisy = False

    def __init__(self, core: ProxyCore, codec: str, tls: bool) -> None:
        self.core = core
        self.codec = codec
        self.tls = tls

    def buildProtocol(self, addr: Any) -> Protocol:
        if self.codec == "http1":
            return Http1Connection(self.core)
        return ProtocolSwitch(self.core, self.codec, self.tls)

    def startFactory(self) -> None:
        self.core.start()

    def stopFactory(self) -> None:
        self.core.stop()
