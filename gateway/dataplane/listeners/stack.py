"""The main listener's stack: TCP on ``address``, the connection cap, then PROXY
protocol (when ``use_proxy_protocol``), then TLS (unless ``insecure_server``), then the
HTTP codecs
(TLS: ``tlsio``, Twisted's TLS layer with a lean data path).

The PROXY header precedes the TLS handshake on the wire, so it is the outermost wrapper.
The cap is no wrapper at all: it only decides, per accepted socket, whether a protocol
is built (no extra layer on the data path).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IProtocolFactory, IStreamServerEndpoint
from twisted.internet.protocol import Factory, Protocol

from gateway.config.values import parse_address
from gateway.dataplane.limit import ConnectionLimit
from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.dataplane.tlsio import FastTLSFactory
from gateway.tls.server import ServerTLS


def server_endpoint(reactor: Any, address: str) -> IStreamServerEndpoint:
    """TCP endpoint for ``address``; IPv6 when the host is an IPv6 literal."""
    host, port = parse_address(address)
    if ":" in host:
        return TCP6ServerEndpoint(reactor, port, interface=host)
    return TCP4ServerEndpoint(reactor, port, interface=host)


class LimitedFactory(Factory):
    """``inner``'s connections while ``limit`` admits them; past it ``buildProtocol``
    returns None, and Twisted closes the accepted socket at once."""

    noisy = False

    def __init__(self, inner: IProtocolFactory, limit: ConnectionLimit, clock: Any) -> None:
        self.inner = inner
        self.limit = limit
        self.clock = clock

    def logPrefix(self) -> str:
        """The wrapped factory's ("HTTPFactory (TLS) starting on 443"): the cap is not
        what an operator looks for in the start-up lines."""
        prefix = getattr(self.inner, "logPrefix", None)
        return str(prefix()) if callable(prefix) else type(self.inner).__name__

    def doStart(self) -> None:
        self.inner.doStart()

    def doStop(self) -> None:
        self.inner.doStop()

    def buildProtocol(self, addr: Any) -> Protocol | None:
        if not self.limit.admit(self.clock.seconds()):
            return None
        return self.inner.buildProtocol(addr)  # type: ignore[return-value]


def listener_factory(http: IProtocolFactory, tls: ServerTLS | None, proxy_protocol: bool,
                     clock: Any, limit: ConnectionLimit) -> IProtocolFactory:
    factory: Any = http
    if tls is not None:
        factory = FastTLSFactory(tls, factory)
    if proxy_protocol:
        factory = ProxyHeaderFactory(factory)
    return LimitedFactory(factory, limit, clock)
