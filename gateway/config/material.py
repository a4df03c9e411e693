"""Loading PEM material given inline (base64) or as a file, and checking it parses.

Every file read is recorded so the config source can watch it for hot reload.
Relative file locations are resolved against the configuration file's directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from gateway.config.errors import Problems
from gateway.config.values import decode_base64

_MAX_FILE = 4 * 1024 * 1024


class Pem(Enum):
    """What a piece of material must contain."""

    CERTS = "certificate"
    KEY = "private key"
    CRL = "certificate revocation list"


@dataclass
class Reader:
    """Resolves and reads referenced files, remembering each one."""

    base_dir: str
    files: set[str] = field(default_factory=set)
    contents: dict[str, bytes] = field(default_factory=dict)  # for the checksum

    def resolve(self, location: str) -> str:
        path = os.path.expanduser(location)
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.base_dir, path))

    def read(self, location: str) -> bytes:
        if "\0" in location:  # open() would raise ValueError, not the OSError expected
            raise OSError(f"{location!r}: a file name cannot hold a NUL character")
        path = self.resolve(location)
        self.files.add(path)
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE + 1)
        if len(data) > _MAX_FILE:
            raise OSError(f"{path} is larger than {_MAX_FILE} bytes")
        self.contents[path] = data
        return data


def check_pem(data: bytes, kind: Pem) -> str | None:
    """Return why ``data`` is not valid ``kind`` PEM, or None."""
    try:
        if kind is Pem.CERTS:
            x509.load_pem_x509_certificates(data)
        elif kind is Pem.KEY:
            serialization.load_pem_private_key(data, password=None)
        elif kind is Pem.CRL:
            x509.load_pem_x509_crl(data)
    except (ValueError, TypeError) as exc:
        return f"not a valid PEM {kind.value}: {exc}"
    return None


def load_key(data: bytes) -> PrivateKeyTypes:
    return serialization.load_pem_private_key(data, password=None)


def load_material(
    reader: Reader,
    problems: Problems,
    *,
    inline_key: str,
    inline: str,
    file_key: str,
    file: str,
    kind: Pem,
    exclusive: bool = True,
) -> bytes | None:
    """Load ``inline`` (base64) or ``file``; report under the key that was given.

    Both given is an error when ``exclusive`` (the reference's ``X`` / ``X_file`` pairs).
    """
    if inline and file and exclusive:
        problems.error(file_key, f"specified both `{inline_key}` and `{file_key}`; set only one")
        return None
    data: bytes | None = None
    where = inline_key
    if inline:
        try:
            data = decode_base64(inline)
        except ValueError as exc:
            name = inline_key.rsplit(".", 1)[-1]
            problems.error(inline_key, f"config: couldn't decode {name}: {exc}")
            return None
    elif file:
        where = file_key
        try:
            data = reader.read(file)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            problems.error(file_key, f"config: couldn't load {kind.value} file {file!r}: {reason}")
            return None
    if data is None:
        return None
    invalid = check_pem(data, kind)
    if invalid:
        problems.error(where, f"config: {invalid}")
        return None
    return data


def key_matches_certificate(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificates(cert_pem)[0]
    key = load_key(key_pem)
    pub = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    mine = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pub == mine
