"""The certificate the gateway logs into a server with: an OpenSSH user certificate for
a key made for this one connection, signed by the user CA (``ssh_user_ca_key``).

Principal: the login name; validity: from a minute ago (clock skew) to the route's
``ssh_certificate_ttl`` from now; key id: the person's e-mail and session id (sshd logs
it); extensions: ``permit-pty`` only, and ``permit-port-forwarding`` when the route
allows local forwards (sshd refuses them otherwise); never agent or X11 forwarding.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import (
    SSHCertificate,
    SSHCertificateBuilder,
    SSHCertificateType,
)

from gateway.config.ssh import SigningKey

SKEW = 60


@dataclass(frozen=True, slots=True)
class Issued:
    key: ed25519.Ed25519PrivateKey  # the connection's own key
    certificate: bytes  # the certificate's wire blob
    serial: int
    valid_before: int

    @property
    def algorithm(self) -> bytes:
        return b"ssh-ed25519-cert-v01@openssh.com"


def issue(ca: SigningKey, login: str, key_id: str, ttl: float, now: float,
          port_forwarding: bool = False) -> Issued:
    key = ed25519.Ed25519PrivateKey.generate()
    serial = int.from_bytes(os.urandom(8), "big")
    valid_after = max(int(now) - SKEW, 0)
    valid_before = int(now + ttl)
    builder = (SSHCertificateBuilder()
               .public_key(key.public_key())
               .serial(serial)
               .type(SSHCertificateType.USER)
               .key_id(key_id.encode())
               .valid_principals([login.encode()])
               .valid_after(valid_after)
               .valid_before(valid_before)
               .add_extension(b"permit-pty", b""))
    if port_forwarding:
        builder = builder.add_extension(b"permit-port-forwarding", b"")
    cert: SSHCertificate = builder.sign(ca)
    blob = cert.public_bytes().split()[1]
    return Issued(key, base64.b64decode(blob), serial, valid_before)


def ca_public_line(ca: SigningKey) -> str:
    """The CA's public key as one ``authorized_keys``/``TrustedUserCAKeys`` line."""
    return ca.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                        serialization.PublicFormat.OpenSSH).decode()
