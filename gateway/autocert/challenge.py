"""TLS-ALPN-01 (RFC 8737): the challenge types the ``acme`` package no longer ships,
the self-signed validation certificate, and the table of pending challenges that the
listener's ALPN callback consults."""

from __future__ import annotations

import datetime
import hashlib
import threading
from typing import Any

from acme import challenges
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ObjectIdentifier

ACME_TLS_1 = b"acme-tls/1"
ID_PE_ACME_IDENTIFIER = ObjectIdentifier("1.3.6.1.5.5.7.1.31")


@challenges.ChallengeResponse.register
class TLSALPN01Response(challenges.KeyAuthorizationChallengeResponse):
    typ = "tls-alpn-01"


@challenges.Challenge.register
class TLSALPN01(challenges.KeyAuthorizationChallenge):
    response_cls = TLSALPN01Response
    typ = response_cls.typ

    def validation(self, account_key: Any, **kwargs: Any) -> str:
        return str(self.key_authorization(account_key))


def self_signed(domain: str, days: int,
                extensions: tuple[tuple[x509.ExtensionType, bool], ...] = ()
                ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A P-256 self-signed certificate for ``domain`` (its only SAN), valid from five
    minutes ago for ``days``, with ``extensions`` (value, critical) added."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(key, hashes.SHA256()), key


def challenge_certificate(domain: str, key_authorization: str
                          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The self-signed certificate proving control of ``domain`` (RFC 8737 3): its only
    SAN is the domain, with the critical acmeIdentifier extension holding
    SHA-256(key authorization) as a DER OCTET STRING."""
    digest = hashlib.sha256(key_authorization.encode()).digest()
    return self_signed(domain, 1, ((x509.UnrecognizedExtension(
        ID_PE_ACME_IDENTIFIER, b"\x04\x20" + digest), True),))


class PendingChallenges:
    """Validation certificates by domain; written from the ACME thread, read by the
    TLS layer on the reactor thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._certs: dict[str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = {}

    def add(self, domain: str, key_authorization: str) -> None:
        pair = challenge_certificate(domain, key_authorization)
        with self._lock:
            self._certs[domain.lower()] = pair

    def remove(self, domain: str) -> None:
        with self._lock:
            self._certs.pop(domain.lower(), None)

    def get(self, domain: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
        with self._lock:
            return self._certs.get(domain.lower())
