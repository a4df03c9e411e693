"""A server's host certificate (``ssh_upstream_host_ca``), checked as OpenSSH's client
checks one, and stricter where a gateway in front of many servers should be.

``check_host_certificate`` decides everything but whether the CA is one the route
trusts (the caller asks the route with ``HostCertificate.ca_blob``):

- the certificate is of the key type the key exchange negotiated, parses, is a host
  certificate, and its CA's signature verifies; an RSA CA must have signed with SHA-2
  (``rsa-sha2-256``/``-512``; OpenSSH refuses ``ssh-rsa`` CA signatures by default too);
- it is valid now: from ``valid_after`` (up to ``NOT_YET_VALID_SKEW`` early: a signer
  whose clock runs ahead) until ``valid_before`` (no grace: expired is expired);
- it has no critical options (none is defined for host certificates: an unknown one
  is refused, as OpenSSH does);
- one of its principals is the host the route's ``to:`` names, compared without
  case. An empty principal list, which OpenSSH reads as "any host", is refused: a
  certificate for every host lets any server holding one impersonate every other
  server under the same CA.

Bytes come from the server before anything authenticates; parsing is
cryptography's (``load_ssh_public_identity``), and every failure is one
``CertificateRefused``.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import ssh

from gateway.config.known_hosts import fingerprint

NOT_YET_VALID_SKEW = 60.0
MIN_RSA_BITS = 2048
# negotiated host key algorithm -> (the certificate blob's type, the key exchange's
# signature algorithm: a certificate's key signs as the plain key does)
CERTIFICATE_ALGORITHMS: dict[bytes, tuple[bytes, bytes]] = {
    b"ssh-ed25519-cert-v01@openssh.com": (b"ssh-ed25519-cert-v01@openssh.com",
                                          b"ssh-ed25519"),
    b"ecdsa-sha2-nistp256-cert-v01@openssh.com": (
        b"ecdsa-sha2-nistp256-cert-v01@openssh.com", b"ecdsa-sha2-nistp256"),
    b"ecdsa-sha2-nistp384-cert-v01@openssh.com": (
        b"ecdsa-sha2-nistp384-cert-v01@openssh.com", b"ecdsa-sha2-nistp384"),
    b"ecdsa-sha2-nistp521-cert-v01@openssh.com": (
        b"ecdsa-sha2-nistp521-cert-v01@openssh.com", b"ecdsa-sha2-nistp521"),
    b"rsa-sha2-512-cert-v01@openssh.com": (b"ssh-rsa-cert-v01@openssh.com",
                                           b"rsa-sha2-512"),
    b"rsa-sha2-256-cert-v01@openssh.com": (b"ssh-rsa-cert-v01@openssh.com",
                                           b"rsa-sha2-256"),
}
CA_SIGNATURES = (b"ssh-ed25519", b"ecdsa-sha2-nistp256", b"ecdsa-sha2-nistp384",
                 b"ecdsa-sha2-nistp521", b"rsa-sha2-512", b"rsa-sha2-256")


@dataclass(frozen=True, slots=True)
class HostCertificate:
    """A certificate that passed every check but its CA's trust."""

    key_id: str
    serial: int
    ca_blob: bytes  # the CA's public key blob, to be found among the route's CAs
    key_blob: bytes  # the certified key (plain), which signs the key exchange
    principals: tuple[str, ...]
    valid_after: int
    valid_before: int

    def identity(self) -> str:
        return _identity(self.key_id, self.serial, self.ca_blob)


class CertificateRefused(Exception):
    """Why a host certificate is refused; ``str``: the reason with the certificate's
    key id, serial and CA fingerprint where known (told to the person and logged)."""

    def __init__(self, reason: str, identity: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.identity = identity

    def __str__(self) -> str:
        return f"{self.reason} ({self.identity})" if self.identity else self.reason


def is_certificate(blob: bytes) -> bool:
    return _blob_type(blob).endswith(b"-cert-v01@openssh.com")


def check_host_certificate(blob: bytes, algorithm: bytes, host: str,
                           now: float) -> HostCertificate:
    """The certificate ``blob`` the server showed for host key ``algorithm``, checked
    for ``host`` at ``now``; raises CertificateRefused."""
    expected = CERTIFICATE_ALGORITHMS.get(algorithm)
    if expected is None:
        raise CertificateRefused(f"{algorithm.decode('ascii', 'replace')} is not a "
                                 "certificate algorithm")
    shown = _blob_type(blob)
    if shown != expected[0]:
        raise CertificateRefused(f"the server showed {_text(shown) or 'no key type'} for "
                                 f"{algorithm.decode()}")
    try:
        cert = ssh.load_ssh_public_identity(shown + b" " + base64.b64encode(blob))
        if not isinstance(cert, ssh.SSHCertificate):
            raise ValueError("not a certificate")
        # both keys are read lazily: a malformed one fails here, not later
        ca_key, key = cert.signature_key(), cert.public_key()
        ca_blob, key_blob = _blob(ca_key), _blob(key)
    except (ValueError, UnsupportedAlgorithm, NotImplementedError) as exc:
        # (NotImplementedError: cryptography's word for a compressed ECDSA point)
        raise CertificateRefused(f"the certificate does not parse ({exc})") from None
    identity = _identity(_text(cert.key_id), cert.serial, ca_blob)
    if cert.type is not ssh.SSHCertificateType.HOST:
        raise CertificateRefused("a user certificate, not a host certificate", identity)
    if not isinstance(ca_key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
                      | rsa.RSAPublicKey):
        raise CertificateRefused("its CA's key type is not supported", identity)
    for checked in (ca_key, key):
        if isinstance(checked, rsa.RSAPublicKey) and checked.key_size < MIN_RSA_BITS:
            raise CertificateRefused(f"an RSA key of {checked.key_size} bits (at least "
                                     f"{MIN_RSA_BITS})", identity)
    signed_with = ca_signature_type(blob, ca_blob)
    if signed_with not in CA_SIGNATURES:
        raise CertificateRefused(f"its CA signed with {_text(signed_with) or 'nothing'} "
                                 "(SHA-2 or ed25519 signatures only)", identity)
    try:
        cert.verify_cert_signature()
    except (InvalidSignature, ValueError):
        raise CertificateRefused("its CA signature does not verify", identity) from None
    if cert.critical_options:
        names = ", ".join(sorted(_text(k) for k in cert.critical_options))
        raise CertificateRefused(f"unknown critical option(s) {names}", identity)
    if now + NOT_YET_VALID_SKEW < cert.valid_after:
        raise CertificateRefused(f"not valid before {_when(cert.valid_after)}", identity)
    if now >= cert.valid_before:
        raise CertificateRefused(f"expired at {_when(cert.valid_before)}", identity)
    principals = tuple(_text(p) for p in cert.valid_principals)
    if not principals:
        raise CertificateRefused("it names no host (a certificate valid for any host is "
                                 "not accepted)", identity)
    wanted = host.strip("[]").lower()
    if wanted not in (p.lower() for p in principals):
        listed = ", ".join(principals[:8]) + (", ..." if len(principals) > 8 else "")
        raise CertificateRefused(f"it is not for {host} (its hosts: {listed})", identity)
    return HostCertificate(_text(cert.key_id), cert.serial, ca_blob, key_blob, principals,
                           cert.valid_after, cert.valid_before)


def ca_signature_type(blob: bytes, ca_blob: bytes) -> bytes:
    """The algorithm the CA signed ``blob`` with: a certificate ends with the CA's key
    blob and then the signature (``string(string(ALGORITHM) string(SIGNATURE))``), so
    what follows the last copy of the CA's key is that signature. (A signature is
    shorter than the key that made it, so it cannot hold a copy of the key.)"""
    at = blob.rfind(len(ca_blob).to_bytes(4, "big") + ca_blob)
    if at < 0:
        return b""
    rest = blob[at + 4 + len(ca_blob):]
    outer = int.from_bytes(rest[:4], "big")
    signature = rest[4:]
    if len(rest) < 8 or outer != len(signature):
        return b""
    size = int.from_bytes(signature[:4], "big")
    return signature[4:4 + size] if size <= len(signature) - 4 else b""


def _blob(key: ssh.SSHCertPublicKeyTypes) -> bytes:
    text = key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH)
    return base64.b64decode(text.split()[1])


def _blob_type(blob: bytes) -> bytes:
    if len(blob) < 4:
        return b""
    size = int.from_bytes(blob[:4], "big")
    return blob[4:4 + size] if size <= min(len(blob) - 4, 64) else b""


def _identity(key_id: str, serial: int, ca_blob: bytes) -> str:
    return f"key id {key_id[:100]!r}, serial {serial}, CA {fingerprint(ca_blob)}"


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _when(seconds: int) -> str:
    if seconds >= 2 ** 63:
        return "forever"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(seconds, 253402300799)))
