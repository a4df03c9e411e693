"""The main listener's stack: TCP on ``address``, the connection cap, then PROXY
protocol (when ``use_proxy_protocol``), then TLS (unless ``insecure_server``), then the
HTTP codecs
(TLS: ``tlsio``, Twisted's TLS layer with a lean data path).

The PROXY header precedes the TLS handshake on the wire, so it is the outermost wrapper.
The cap is no wrapper at all: it only decides, per accepted socket, whether a protocol
is built (no extra layer on the data path). So do the penalties (``penalty``) when the
peer is the client: an address whose HTTP/2 connections keep being cut is closed at the
accept, before any TLS work, and held unread for a while (``tarpit``; behind a
PROXY-protocol balancer the HTTP/2 codec checks the address from the header instead).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IProtocolFactory, IStreamServerEndpoint
from twisted.internet.protocol import Factory, Protocol

from gateway.config.values import parse_address
from gateway.dataplane.limit import ConnectionLimit
from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.dataplane.listeners.tarpit import Tarpit
from gateway.dataplane.penalty import Penalties
from gateway.tls.server import ServerTLS
from gateway.twisted_ext.tlsio import FastTLSFactory


def server_endpoint(reactor: Any, address: str) -> IStreamServerEndpoint:
    """TCP endpoint for ``address``; IPv6 when the host is an IPv6 literal."""
    host, port = parse_address(address)
    if ":" in host:
        return TCP6ServerEndpoint(reactor, port, interface=host)
    return TCP4ServerEndpoint(reactor, port, interface=host)


class LimitedFactory(Factory):
    """``inner``'s connections while ``limit`` admits them and ``penalties`` (if given)
    do not refuse the peer; otherwise ``buildProtocol`` returns None, and Twisted closes
    the accepted socket at once (a refused peer's connection is held unread for a
    while first: ``tarpit``)."""

    noisy = False

    def __init__(self, inner: IProtocolFactory, limit: ConnectionLimit, clock: Any,
                 penalties: Penalties | None = None) -> None:
        self.inner = inner
        self.limit = limit
        self.clock = clock
        self.penalties = penalties
        self.tarpit = Tarpit(clock)

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
        now = self.clock.seconds()
        if self.penalties is not None:
            host = getattr(addr, "host", "")
            if self.penalties.refuses(host, now):
                return self.tarpit.protocol(host)
        if not self.limit.admit(now):
            return None
        return self.inner.buildProtocol(addr)  # type: ignore[return-value]


def listener_factory(http: IProtocolFactory, tls: ServerTLS | None, proxy_protocol: bool,
                     clock: Any, limit: ConnectionLimit,
                     penalties: Penalties | None = None) -> IProtocolFactory:
    factory: Any = http
    if tls is not None:
        factory = FastTLSFactory(tls, factory)
    if proxy_protocol:
        factory = ProxyHeaderFactory(factory)
    return LimitedFactory(factory, limit, clock, None if proxy_protocol else penalties)
