"""Keys and OpenSSH host certificates for the host CA tests, made with cryptography
(``test_ssh_host_ca``, ``test_ssh_host_ca_settings``)."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import ssh
from twisted.conch.ssh.common import NS

NOW = 1_800_000_000
ED_CERT = b"ssh-ed25519-cert-v01@openssh.com"
HOST = "db.example.test"
_RSA: dict[int, rsa.RSAPrivateKey] = {}


def rsa_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    if bits not in _RSA:  # one per size: generating them is the slow part
        _RSA[bits] = rsa.generate_private_key(65537, bits)
    return _RSA[bits]


def public_line(key: Any) -> str:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()


def blob_of(key: Any) -> bytes:
    return base64.b64decode(public_line(key).split()[1])


def certificate(ca: Any, key: Any, *, principals: tuple[bytes, ...] = (HOST.encode(),),
                kind: ssh.SSHCertificateType = ssh.SSHCertificateType.HOST,
                after: int = NOW - 60, before: int = NOW + 3600,
                critical: dict[bytes, bytes] | None = None) -> bytes:
    builder = (ssh.SSHCertificateBuilder().public_key(key.public_key()).serial(7)
               .type(kind).key_id(b"web host").valid_after(after).valid_before(before))
    builder = builder.valid_principals(list(principals)) if principals \
        else builder.valid_for_all_principals()
    for name, value in (critical or {}).items():
        builder = builder.add_critical_option(name, value)
    return base64.b64decode(builder.sign(ca).public_bytes().split()[1])


def resigned_sha1(blob: bytes, ca: rsa.RSAPrivateKey) -> bytes:
    """``blob`` (an RSA CA's certificate) signed again the way ``ssh-keygen -t ssh-rsa``
    does: SHA-1."""
    ca_blob = blob_of(ca)
    at = blob.rfind(NS(ca_blob)) + len(NS(ca_blob))
    body = blob[:at]
    signature = ca.sign(body, padding.PKCS1v15(), hashes.SHA1())
    return body + NS(NS(b"ssh-rsa") + NS(signature))
