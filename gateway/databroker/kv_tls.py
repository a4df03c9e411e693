"""TLS towards the kvstore (``kvstores://`` and friends).

``databroker_storage_ca_file`` replaces the system roots, ``databroker_storage_cert_file``
and ``_key_file`` present a client certificate (Redis ``tls-auth-clients yes``), and
``databroker_storage_tls_skip_verify`` accepts any server certificate and name. The
contexts are the data plane's upstream ones (``connection_creator``), without ALPN. Host
names are checked per connection because Sentinel names the master only at connect time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import txredisapi

from gateway.tls.client import TLSClientConfig, connection_creator

TLSFor = Callable[[str], Any]


def tls_for_hosts(
    ca_pem: bytes | None,
    client_certificate: tuple[bytes, bytes] | None,
    skip_verify: bool,
) -> TLSFor:
    """Return ``host -> connection creator`` for txredisapi's ``ssl_context_factory``."""
    cert, key = client_certificate or (None, None)
    config = TLSClientConfig("", skip_verify, ca_pem, cert, key, alpn=())
    return lambda host: connection_creator(config, host)


class _TLSSentinelEndpoint(txredisapi._SentinelEndpoint):  # type: ignore[misc]
    """txredisapi connects to the master Sentinel names in plain TCP; this adds TLS."""

    def __init__(self, factory: Any, tls_for: TLSFor) -> None:
        super().__init__(factory)
        self.tls_for = tls_for

    def _connect(self, addr: tuple[str, int], protocol_factory: Any) -> Any:
        host, port = addr
        endpoint = txredisapi._makeEndpoint(host, port, self.factory.maxDelay,
                                            self.tls_for(host))
        return endpoint.connect(protocol_factory)


class TLSSentinel(txredisapi.Sentinel):  # type: ignore[misc]
    """``kvstores+sentinel://``: TLS to the sentinels and to the master they name."""

    def __init__(self, addresses: list[tuple[str, int]], tls_for: TLSFor,
                 **connection_kwargs: Any) -> None:
        self.tls_for = tls_for
        self.sentinels = [
            txredisapi.lazyConnection(host, port, ssl_context_factory=tls_for(host),
                                      **connection_kwargs)
            for host, port in addresses]
        self.min_other_sentinels = 0

    def _connect_factory_and_return_handler(self, factory: Any) -> Any:
        factory.startConnecting(_TLSSentinelEndpoint(factory, self.tls_for))
        return factory.handler
