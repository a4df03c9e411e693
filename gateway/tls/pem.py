"""PEM material into pyOpenSSL objects, shared by every TLS context the gateway builds
(listeners, the metrics endpoint, upstreams, client-certificate checks)."""

from __future__ import annotations

from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from OpenSSL import SSL, crypto


def add_pem_certs(store: crypto.X509Store, pem: bytes) -> None:
    """Trust every certificate in ``pem``."""
    for cert in x509.load_pem_x509_certificates(pem):
        store.add_cert(crypto.X509.from_cryptography(cert))


def use_chain(ctx: SSL.Context, chain: Sequence[x509.Certificate], key_pem: bytes) -> None:
    """Present ``chain`` (leaf first) with the key in ``key_pem``."""
    ctx.use_certificate(chain[0])
    for extra in chain[1:]:
        ctx.add_extra_chain_cert(extra)
    ctx.use_privatekey(load_pem_private_key(key_pem, None))  # type: ignore[arg-type]
