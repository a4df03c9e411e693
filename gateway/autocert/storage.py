"""Certificates and the ACME account key under ``autocert_dir``, written atomically
with private files (0600), shared by every instance that mounts the directory."""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.private_dirs import make_private_dirs

_SAFE = re.compile(r"[^a-z0-9.\-_]")


@dataclass(frozen=True)
class StoredCertificate:
    domain: str
    chain_pem: bytes
    key_pem: bytes
    not_before: datetime.datetime
    not_after: datetime.datetime

    def renew_at(self) -> datetime.datetime:
        """When to renew: a third of the lifetime before expiry, at most 30 days."""
        lifetime = self.not_after - self.not_before
        return self.not_after - min(lifetime / 3, datetime.timedelta(days=30))


def _write_private(path: Path, data: bytes) -> None:
    make_private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class CertificateFiles:
    def __init__(self, directory: str) -> None:
        self.root = Path(directory)

    def account_key(self) -> rsa.RSAPrivateKey:
        """The ACME account key, created on first use."""
        path = self.root / "account.key"
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), None)
            if isinstance(key, rsa.RSAPrivateKey):
                return key
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(path, key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return key

    def write_trusted_ca(self, bundle: bytes) -> str:
        path = self.root / "trusted-ca.pem"
        if not path.exists() or path.read_bytes() != bundle:
            _write_private(path, bundle)
        return str(path)

    def _paths(self, domain: str) -> tuple[Path, Path]:
        name = _SAFE.sub("_", domain.lower())
        return self.root / "certs" / f"{name}.crt", self.root / "certs" / f"{name}.key"

    def load(self, domain: str) -> StoredCertificate | None:
        cert_path, key_path = self._paths(domain)
        try:
            chain_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
            leaf = x509.load_pem_x509_certificates(chain_pem)[0]
        except (OSError, ValueError, IndexError):
            return None
        return StoredCertificate(domain, chain_pem, key_pem, leaf.not_valid_before_utc,
                                 leaf.not_valid_after_utc)

    def save(self, domain: str, chain_pem: bytes, key_pem: bytes) -> StoredCertificate:
        cert_path, key_path = self._paths(domain)
        _write_private(key_path, key_pem)
        _write_private(cert_path, chain_pem)
        stored = self.load(domain)
        assert stored is not None
        return stored


def new_certificate_key() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
