"""``CertFacts`` of a client certificate: what the ``client_certificate`` criterion reads.

``fingerprint`` is the SHA-256 of the DER (``openssl x509 -outform DER | openssl dgst
-sha256``), ``spki_hash`` the base64 SHA-256 of the SubjectPublicKeyInfo, the SANs as
the certificate lists them. Remembered per certificate: a connection's requests share one.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.policy import CertFacts


@lru_cache(maxsize=1024)
def cert_facts(der: bytes) -> CertFacts:
    """The facts of the DER certificate ``der``; ``ValueError`` when it is none."""
    cert = x509.load_der_x509_certificate(der)
    try:
        spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        spki_hash = base64.b64encode(hashlib.sha256(spki).digest()).decode()
    except (ValueError, TypeError):  # a key type this cryptography cannot load
        spki_hash = ""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return CertFacts(hashlib.sha256(der).hexdigest(), spki_hash)
    return CertFacts(
        hashlib.sha256(der).hexdigest(), spki_hash,
        san_email=tuple(names.get_values_for_type(x509.RFC822Name)),
        san_dns=tuple(names.get_values_for_type(x509.DNSName)),
        san_uri=tuple(names.get_values_for_type(x509.UniformResourceIdentifier)))


def presented_cert(der: bytes) -> CertFacts | None:
    """The facts of the client certificate a request presented (``None``: none, or not a
    certificate, which matches no certificate criterion)."""
    if not der:
        return None
    try:
        return cert_facts(der)
    except ValueError:
        return None
