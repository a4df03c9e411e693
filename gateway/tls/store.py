"""Server certificates chosen by SNI: exact name, then wildcard, then the default.

A ``CertificateStore`` is built from a snapshot's material (all ``certificates`` pairs
and the ``certificate``/``_file`` pair) and holds one pyOpenSSL context per certificate,
each with the listener's ALPN protocols, TLS 1.2 or newer and a modern cipher list.
When ``client_ca`` or any route's ``tls_downstream_client_ca`` is set, contexts ask for
a client certificate during the handshake without failing it; the route decides later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.x509.oid import NameOID
from OpenSSL import SSL

from gateway.autocert.challenge import ACME_TLS_1, PendingChallenges
from gateway.config.snapshot import Snapshot
from gateway.tls.pem import use_chain

# Mozilla "intermediate" TLS 1.2 suites (TLS 1.3 suites are OpenSSL's defaults).
CIPHERS = (
    b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    b"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    b"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
)


def alpn_protocols(codec: str) -> list[bytes]:
    return {"http1": [b"http/1.1"], "http2": [b"h2"]}.get(codec, [b"h2", b"http/1.1"])


def certificate_names(cert: x509.Certificate) -> list[str]:
    """DNS names of the subject alternative names (the common name if there are none)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = [n.lower().rstrip(".") for n in san.value.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    if not names:
        names = [str(a.value).lower() for a in
                 cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return names


@dataclass(eq=False)
class ServerCertificate:
    chain: list[x509.Certificate]
    names: list[str]
    context: SSL.Context


@dataclass(eq=False)
class CertificateStore:
    certificates: list[ServerCertificate]
    exact: dict[str, ServerCertificate] = field(default_factory=dict)
    wildcard: dict[str, ServerCertificate] = field(default_factory=dict)
    override_name: str = ""

    @property
    def default(self) -> ServerCertificate:
        return self.certificates[0]

    def lookup(self, server_name: str) -> ServerCertificate:
        """The certificate for an SNI name (``override_certificate_name`` wins when set)."""
        name = (self.override_name or server_name).lower().rstrip(".")
        found = self.exact.get(name)
        if found is None and "." in name:
            found = self.wildcard.get(name.split(".", 1)[1])
        return found or self.default

    def covers(self, certificate: ServerCertificate, host: str) -> bool:
        """Whether ``certificate`` would be chosen for ``host`` (HTTP/2 reuse check)."""
        return self.lookup(host) is certificate


def server_context(chain: Sequence[x509.Certificate], key_pem: bytes) -> SSL.Context:
    """A server context with the gateway's protocol floor, options and ciphers, serving
    ``chain`` (leaf first) with ``key_pem``."""
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE
                    | SSL.OP_NO_RENEGOTIATION)
    ctx.set_cipher_list(CIPHERS)
    use_chain(ctx, chain, key_pem)
    ctx.check_privatekey()
    return ctx


def _context(chain: Sequence[x509.Certificate], key_pem: bytes, alpn: list[bytes],
             request_client_cert: bool, challenges: PendingChallenges | None = None,
             staple: bytes | None = None) -> SSL.Context:
    ctx = server_context(chain, key_pem)

    def select(connection: SSL.Connection, offered: list[bytes]) -> bytes:
        if ACME_TLS_1 in offered:
            # TLS-ALPN-01 validation: answer with the challenge certificate for the name,
            # on this same listener, without disturbing ordinary clients of that name.
            raw = connection.get_servername()
            pair = challenges.get(raw.decode("ascii", "replace")) if (
                challenges is not None and raw) else None
            if pair is None:
                return SSL.NO_OVERLAPPING_PROTOCOLS  # type: ignore[return-value]
            connection.use_certificate(pair[0])
            connection.use_privatekey(pair[1])
            return ACME_TLS_1
        for protocol in alpn:
            if protocol in offered:
                return protocol
        return SSL.NO_OVERLAPPING_PROTOCOLS  # type: ignore[return-value]

    ctx.set_alpn_select_callback(select)
    if request_client_cert:
        # Ask, accept anything at the TLS layer; the route checks it (495 if bad).
        ctx.set_verify(SSL.VERIFY_PEER, lambda conn, cert, errno, depth, ok: True)
    if staple:
        # Answer a client's status_request with the CA's OCSP response.
        ctx.set_ocsp_server_callback(lambda connection, data: staple)
    ctx.set_session_id(b"gateway")
    return ctx


def build_store(snapshot: Snapshot, extra: Sequence[tuple[bytes, bytes, bytes | None]] = (),
                challenges: PendingChallenges | None = None) -> CertificateStore | None:
    """The store for a snapshot plus ``extra`` (autocert) pairs, or None without any.

    With autocert and no certificate yet, a self-signed placeholder lets the listener
    start, so the CA can validate and ordinary clients get a handshake (and a warning)
    rather than a refused connection."""
    material = snapshot.material
    pairs: list[tuple[bytes, bytes, bytes | None]] = [
        (cert, key, None) for cert, key in material.certificates]
    pairs.extend(extra)
    if not pairs and snapshot.options.autocert:
        pairs = [(*_placeholder(), None)]
    if not pairs:
        return None
    options = snapshot.options
    alpn = alpn_protocols(options.codec_type)
    wants_client = bool(material.client_ca) or any(
        r.tls_downstream_client_ca for r in snapshot.routes)
    store = CertificateStore([], override_name=options.override_certificate_name)
    for cert_pem, key_pem, staple in pairs:
        chain = x509.load_pem_x509_certificates(cert_pem)
        names = certificate_names(chain[0])
        entry = ServerCertificate(chain, names, _context(chain, key_pem, alpn, wants_client,
                                                         challenges, staple))
        store.certificates.append(entry)
        for name in names:
            if name.startswith("*."):
                store.wildcard.setdefault(name[2:], entry)
            else:
                store.exact.setdefault(name, entry)
    return store


def _placeholder() -> tuple[bytes, bytes]:
    """A self-signed certificate for ``gateway.invalid`` (until autocert has one)."""
    from cryptography.hazmat.primitives import serialization

    from gateway.autocert.challenge import self_signed

    cert, key = self_signed("gateway.invalid", 7)
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
