"""How the client reaches the gateway: a TCP endpoint (TLS-wrapped for ``https://``),
shared by the tunnel connections and the sign-in request.

Names under ``.localhost`` go to 127.0.0.1 without a DNS lookup, as browsers and curl do
(RFC 6761 6.3): the sign-in page a browser opens and the tunnel then reach the same
local gateway.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.endpoints import (
    wrapClientTLS,
)
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IStreamClientEndpoint
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

from gateway.cli.tcp.options import GatewayURL
from gateway.net.endpoints import client_endpoint
from gateway.tls.client import TLSClientConfig, connection_creator

CONNECT_TIMEOUT = 10.0  # seconds to establish the TCP connection to the gateway


def tls_creator(gateway: GatewayURL, ca_pem: bytes | None, verify: bool
                ) -> IOpenSSLClientConnectionCreator:
    """TLS toward the gateway: its name checked against the system's CAs (or only
    ``ca_pem``'s), HTTP/1.1 offered by ALPN (a tunnel is one HTTP/1.1 CONNECT)."""
    config = TLSClientConfig(server_name=gateway.host, skip_verify=not verify,
                             custom_ca=ca_pem, client_cert=None, client_key=None,
                             alpn=(b"http/1.1",))
    return connection_creator(config, gateway.host)


def tcp_endpoint(reactor: Any, host: str, port: int,
                 timeout: float = CONNECT_TIMEOUT) -> IStreamClientEndpoint:
    """Names under ``.localhost`` are 127.0.0.1 without DNS, as in browsers."""
    return client_endpoint(reactor, "127.0.0.1" if host.endswith(".localhost") else host,
                           port, timeout)


class GatewayEndpoints:
    """Endpoints to one gateway, with its TLS settings."""

    def __init__(self, reactor: Any, gateway: GatewayURL,
                 creator: IOpenSSLClientConnectionCreator | None) -> None:
        self.reactor = reactor
        self.gateway = gateway
        self.creator = creator

    def endpoint(self) -> IStreamClientEndpoint:
        tcp = tcp_endpoint(self.reactor, self.gateway.host, self.gateway.port)
        if self.creator is None:
            return tcp
        return wrapClientTLS(self.creator, tcp)


@implementer(IAgentEndpointFactory)
class AgentEndpoints:
    """For treq's ``Agent``: every request goes to the gateway, over its TLS settings."""

    def __init__(self, endpoints: GatewayEndpoints) -> None:
        self.endpoints = endpoints

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        return self.endpoints.endpoint()
