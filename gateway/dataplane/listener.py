"""Endpoints for the main listener: TCP or TLS on ``address``, optionally PROXY protocol.

TLS uses the first configured certificate until the listeners issue adds SNI selection
among all of them; contexts are built from ``cryptography`` objects (pyOpenSSL's own
X509/PKey objects are deprecated).
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from twisted.internet import ssl
from twisted.internet.endpoints import (
    SSL4ServerEndpoint,
    TCP4ServerEndpoint,
    TCP6ServerEndpoint,
)
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.protocols.haproxy import proxyEndpoint

from gateway.config.snapshot import Snapshot
from gateway.config.values import parse_address


def tls_options(snapshot: Snapshot) -> ssl.CertificateOptions | None:
    """Server TLS options from the first certificate pair, or None without one."""
    if not snapshot.material.certificates:
        return None
    cert_pem, key_pem = snapshot.material.certificates[0]
    chain = x509.load_pem_x509_certificates(cert_pem)
    protocols = {"http1": [b"http/1.1"], "http2": [b"h2"]}.get(
        snapshot.options.codec_type, [b"h2", b"http/1.1"])
    # Twisted's annotations name pyOpenSSL types, but it takes cryptography objects too
    # (and pyOpenSSL's own are deprecated).
    return ssl.CertificateOptions(
        privateKey=load_pem_private_key(key_pem, None),  # type: ignore[arg-type]
        certificate=chain[0],  # type: ignore[arg-type]
        extraCertChain=chain[1:],  # type: ignore[arg-type]
        acceptableProtocols=protocols,
        raiseMinimumTo=ssl.TLSVersion.TLSv1_2,
    )


def server_endpoint(reactor: Any, address: str, snapshot: Snapshot,
                    tls: ssl.CertificateOptions | None) -> IStreamServerEndpoint:
    """The endpoint for ``address``; IPv6 when the host is an IPv6 literal."""
    host, port = parse_address(address)
    endpoint: IStreamServerEndpoint
    if tls is not None:
        endpoint = SSL4ServerEndpoint(reactor, port, tls, interface=host)
    elif ":" in host:
        endpoint = TCP6ServerEndpoint(reactor, port, interface=host)
    else:
        endpoint = TCP4ServerEndpoint(reactor, port, interface=host)
    if snapshot.options.use_proxy_protocol:
        endpoint = proxyEndpoint(endpoint)
    return endpoint
