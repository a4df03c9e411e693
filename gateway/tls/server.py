"""The listener's TLS: one connection creator whose certificate store can be swapped.

Every new connection starts on the default certificate's context; the SNI callback
moves it to the certificate for the requested name. The chosen name and certificate
are remembered on the TLS transport for the HTTP layer (421 checks, client
certificates). ``swap`` installs the store of a reloaded snapshot: connections made
afterwards use the new material, open ones keep theirs.
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from zope.interface import implementer

from gateway.tls.store import CertificateStore, ServerCertificate
from gateway.twisted_ext.tlsio import tls_connection


@implementer(IOpenSSLServerConnectionCreator)
class ServerTLS:
    def __init__(self, store: CertificateStore) -> None:
        self.store = store
        self._prepare(store)

    def swap(self, store: CertificateStore) -> None:
        self._prepare(store)
        self.store = store

    def _prepare(self, store: CertificateStore) -> None:
        def on_server_name(connection: SSL.Connection) -> None:
            raw = connection.get_servername()
            name = raw.decode("ascii", "replace") if raw else ""
            entry = store.lookup(name)
            if entry is not store.default:
                connection.set_context(entry.context)
            protocol = connection.get_app_data()
            protocol.gateway_sni = name.lower()
            protocol.gateway_certificate = entry

        for entry in store.certificates:
            entry.context.set_tlsext_servername_callback(on_server_name)

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        store = self.store
        connection = SSL.Connection(store.default.context, None)
        connection.set_app_data(tlsProtocol)
        tlsProtocol.gateway_sni = ""
        tlsProtocol.gateway_certificate = store.default
        tlsProtocol.gateway_store = store
        return connection


def connection_tls(transport: Any) -> tuple[str, ServerCertificate | None, Any]:
    """(SNI name, certificate served, store) of a TLS transport; ("", None, None) in
    plain text. A PROXY-protocol wrapper in between is looked through."""
    inner = getattr(transport, "wrappedProtocol", None)
    for candidate in (transport, inner, getattr(transport, "transport", None)):
        if candidate is not None and hasattr(candidate, "gateway_certificate"):
            return (candidate.gateway_sni, candidate.gateway_certificate,
                    candidate.gateway_store)
    return "", None, None


def peer_chain(transport: Any) -> list[x509.Certificate]:
    """The client's certificate chain (leaf first), empty when it sent none."""
    for candidate in (transport, getattr(transport, "transport", None)):
        connection = tls_connection(candidate)
        if connection is not None:
            leaf = connection.get_peer_certificate(as_cryptography=True)
            if leaf is None:
                return []
            # On a server, OpenSSL's peer chain leaves the client's own certificate out.
            rest = list(connection.get_peer_cert_chain(as_cryptography=True) or [])
            return rest if rest and rest[0] == leaf else [leaf, *rest]
    return []
