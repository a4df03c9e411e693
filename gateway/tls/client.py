"""TLS toward upstreams (and the kvstore, LDAP): SNI, verification (system roots or
``tls_custom_ca``), client certificates, or no verification at all with
``tls_skip_verify``.

Contexts are built once per distinct route TLS setting and reused by every connection.
Material is passed to pyOpenSSL as ``cryptography`` objects (its own are deprecated).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from zope.interface import implementer

from gateway.tls.pem import add_pem_certs, use_chain
from gateway.twisted_ext.client_tls import ClientTLSOptions


@dataclass(frozen=True, slots=True)
class TLSClientConfig:
    """How to speak TLS to a route's https upstreams, or to the kvstore (hashable: it keys
    the pool and the context cache)."""

    server_name: str
    skip_verify: bool
    custom_ca: bytes | None
    client_cert: bytes | None
    client_key: bytes | None
    alpn: tuple[bytes, ...] = (b"http/1.1",)


_contexts: dict[TLSClientConfig, SSL.Context] = {}


def _context(config: TLSClientConfig) -> SSL.Context:
    ctx = _contexts.get(config)
    if ctx is not None:
        return ctx
    ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_options(SSL.OP_NO_COMPRESSION)
    if config.alpn:
        ctx.set_alpn_protos(list(config.alpn))
    if config.skip_verify:
        ctx.set_verify(SSL.VERIFY_NONE)
    else:
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT)
        if config.custom_ca:
            store = ctx.get_cert_store()
            assert store is not None
            add_pem_certs(store, config.custom_ca)  # replaces the system roots
        else:
            ctx.set_default_verify_paths()
    if config.client_cert and config.client_key:
        use_chain(ctx, x509.load_pem_x509_certificates(config.client_cert), config.client_key)
    _contexts[config] = ctx
    return ctx


@implementer(IOpenSSLClientConnectionCreator)
class _SNIOnly:
    """``tls_skip_verify``: send SNI, accept any certificate and name."""

    def __init__(self, ctx: SSL.Context, server_name: str) -> None:
        self._ctx = ctx
        # no SNI for an IP literal (RFC 6066), decided once, not per connection
        self._sni = server_name.encode("idna") if server_name and \
            not is_ip_literal(server_name) else b""

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        connection = SSL.Connection(self._ctx, None)
        connection.set_app_data(tlsProtocol)
        if self._sni:
            connection.set_tlsext_host_name(self._sni)
        return connection


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def connection_creator(config: TLSClientConfig, host: str) -> IOpenSSLClientConnectionCreator:
    """The creator for one upstream host: ``tls_server_name`` overrides the name used
    for SNI and for checking the certificate."""
    ctx = _context(config)
    name = config.server_name or host
    if config.skip_verify:
        return _SNIOnly(ctx, name)

    def create(tls_protocol: Any) -> SSL.Connection:
        connection = SSL.Connection(ctx, None)
        connection.set_app_data(tls_protocol)
        return connection

    return ClientTLSOptions(create, name)
