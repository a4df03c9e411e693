"""Client certificates checked per route after routing (mTLS downstream).

The handshake asks for a certificate but accepts anything; the route then requires one
valid for its CA (``tls_downstream_client_ca``, else the global ``client_ca``), not
revoked by ``client_crl``. Verification is OpenSSL's path validation (what nginx's
``ssl_verify_client`` does), not the web-PKI profile, so private-CA client
certificates without SANs work.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509
from OpenSSL import crypto

from gateway.tls.pem import add_pem_certs


@dataclass(eq=False)
class ClientCertPolicy:
    """The trust a route requires of client certificates."""

    store: crypto.X509Store

    @classmethod
    def build(cls, ca_pem: bytes, crl_pem: bytes | None) -> ClientCertPolicy:
        store = crypto.X509Store()
        add_pem_certs(store, ca_pem)
        if crl_pem:
            store.add_crl(x509.load_pem_x509_crl(crl_pem))
            store.set_flags(crypto.X509StoreFlags.CRL_CHECK)
        return cls(store)

    def check(self, chain: list[x509.Certificate]) -> str | None:
        """None when the chain's leaf is valid; otherwise why not (for logs)."""
        if not chain:
            return "no client certificate"
        leaf = crypto.X509.from_cryptography(chain[0])
        intermediates = [crypto.X509.from_cryptography(c) for c in chain[1:]]
        try:
            crypto.X509StoreContext(self.store, leaf, intermediates).verify_certificate()
        except crypto.X509StoreContextError as exc:
            return f"client certificate rejected: {exc}"
        return None
