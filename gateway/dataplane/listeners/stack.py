"""The main listener's stack: TCP on ``address``, then PROXY protocol (when
``use_proxy_protocol``), then TLS (unless ``insecure_server``), then the HTTP codecs.

The PROXY header precedes the TLS handshake on the wire, so it is the outermost wrapper.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IProtocolFactory, IStreamServerEndpoint
from twisted.protocols.tls import TLSMemoryBIOFactory

from gateway.config.values import parse_address
from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.tls.server import ServerTLS


def server_endpoint(reactor: Any, address: str) -> IStreamServerEndpoint:
    """TCP endpoint for ``address``; IPv6 when the host is an IPv6 literal."""
    host, port = parse_address(address)
    if ":" in host:
        return TCP6ServerEndpoint(reactor, port, interface=host)
    return TCP4ServerEndpoint(reactor, port, interface=host)


def listener_factory(http: IProtocolFactory, tls: ServerTLS | None, proxy_protocol: bool,
                     clock: Any) -> IProtocolFactory:
    factory: Any = http
    if tls is not None:
        factory = TLSMemoryBIOFactory(tls, False, factory)
    if proxy_protocol:
        factory = ProxyHeaderFactory(factory)
    return factory  # type: ignore[no-any-return]
