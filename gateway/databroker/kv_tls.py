"""TLS towards the kvstore (``kvstores://`` and friends).

``databroker_storage_ca_file`` replaces the system roots, ``databroker_storage_cert_file``
and ``_key_file`` present a client certificate (Redis ``tls-auth-clients yes``), and
``databroker_storage_tls_skip_verify`` accepts any server certificate and name. Host names
are checked per connection because Sentinel names the master only at connect time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import txredisapi
from twisted.internet import ssl

TLSFor = Callable[[str], Any]


def tls_for_hosts(
    ca_pem: bytes | None,
    client_certificate: tuple[bytes, bytes] | None,
    skip_verify: bool,
) -> TLSFor:
    """Return ``host -> connection creator`` for txredisapi's ``ssl_context_factory``."""
    client = (ssl.PrivateCertificate.loadPEM(client_certificate[0] + b"\n"
                                             + client_certificate[1])
              if client_certificate else None)
    if skip_verify:
        options = ssl.CertificateOptions(
            privateKey=client.privateKey.original if client else None,
            certificate=client.original if client else None,
            verify=False, raiseMinimumTo=ssl.TLSVersion.TLSv1_2)
        return lambda host: options
    trust: Any = None
    if ca_pem:
        trust = ssl.trustRootFromCertificates(
            [ssl.Certificate.loadPEM(pem) for pem in _split_pem(ca_pem)])

    def for_host(host: str) -> Any:
        return ssl.optionsForClientTLS(host, trustRoot=trust, clientCertificate=client)
    return for_host


def _split_pem(data: bytes) -> list[bytes]:
    end = b"-----END CERTIFICATE-----"
    return [chunk + end for chunk in data.split(end) if b"-----BEGIN CERTIFICATE-----" in chunk]


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
