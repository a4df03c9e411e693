"""autocert without a CA: the RFC 8737 certificate, storage, renewal timing, backoff,
domains, the ALPN responder on the listener's contexts."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import stat
import tempfile
from typing import Any

import trustme
from cryptography import x509
from OpenSSL import SSL
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.autocert.challenge import (
    ID_PE_ACME_IDENTIFIER,
    PendingChallenges,
    challenge_certificate,
)
from gateway.autocert.issue import STAGING, AcmeError, certificate_request
from gateway.autocert.service import AutocertService, acme_settings, wanted_domains
from gateway.autocert.storage import CertificateFiles, new_certificate_key
from gateway.tls.store import build_store

from .config.helpers import IDENTITY, base_config, load


def snapshot(**extra: Any) -> Any:
    config = base_config(autocert=True, autocert_dir=tempfile.mkdtemp(), **extra)
    del config["insecure_server"]
    return load(config)


class ChallengeTests(SynchronousTestCase):
    def test_validation_certificate(self) -> None:
        """Self-signed, the domain as only SAN, critical acmeIdentifier = SHA-256(keyauth)."""
        cert, _ = challenge_certificate("app.example.com", "token.thumbprint")
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(san.get_values_for_type(x509.DNSName), ["app.example.com"])
        ext = cert.extensions.get_extension_for_oid(ID_PE_ACME_IDENTIFIER)
        self.assertTrue(ext.critical)
        digest = hashlib.sha256(b"token.thumbprint").digest()
        self.assertEqual(ext.value.value, b"\x04\x20" + digest)
        self.assertEqual(cert.issuer, cert.subject)

    def test_pending_table(self) -> None:
        """Names are case-insensitive; removal forgets them."""
        pending = PendingChallenges()
        pending.add("App.Example.com", "k")
        self.assertIsNotNone(pending.get("app.example.com"))
        pending.remove("APP.example.com")
        self.assertIsNone(pending.get("app.example.com"))


class RequestTests(SynchronousTestCase):
    def test_must_staple_in_csr(self) -> None:
        """autocert_must_staple asks for status_request; without it there is none."""
        key = new_certificate_key()
        csr = x509.load_pem_x509_csr(certificate_request("a.example.com", key, True))
        feature = csr.extensions.get_extension_for_class(x509.TLSFeature).value
        self.assertIn(x509.TLSFeatureType.status_request, list(feature))
        plain = x509.load_pem_x509_csr(certificate_request("a.example.com", key, False))
        self.assertRaises(x509.ExtensionNotFound,
                          plain.extensions.get_extension_for_class, x509.TLSFeature)


class StorageTests(SynchronousTestCase):
    def test_private_atomic_files(self) -> None:
        """Keys and chains are written 0600 and read back with their validity."""
        files = CertificateFiles(tempfile.mkdtemp())
        leaf = trustme.CA().issue_cert("app.example.com")
        stored = files.save("app.example.com", leaf.cert_chain_pems[0].bytes(),
                            leaf.private_key_pem.bytes())
        key_path = files.root / "certs" / "app.example.com.key"
        self.assertEqual(stat.S_IMODE(key_path.stat().st_mode), 0o600)
        self.assertEqual(files.load("app.example.com"), stored)
        self.assertIsNone(files.load("missing.example.com"))
        account = files.account_key()
        self.assertEqual(files.account_key().private_numbers(), account.private_numbers())

    def test_renewal_point(self) -> None:
        """Renewal starts a third of the lifetime before expiry, at most 30 days."""
        files = CertificateFiles(tempfile.mkdtemp())
        leaf = trustme.CA().issue_cert("a.example.com")
        stored = files.save("a.example.com", leaf.cert_chain_pems[0].bytes(),
                            leaf.private_key_pem.bytes())
        self.assertEqual(stored.not_after - stored.renew_at(), datetime.timedelta(days=30))


class ServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.calls: list[str] = []
        self.results: list[Deferred[tuple[bytes, bytes]]] = []
        self.changes = 0

    def service(self, snap: Any) -> AutocertService:
        def run(function: Any, *args: Any) -> Any:
            if len(args) == 1:  # the OCSP stapler: this CA has no OCSP
                return succeed(None)
            self.calls.append(args[-1])
            return self.results.pop(0) if self.results else fail(AcmeError("nope"))

        def changed() -> None:
            self.changes += 1

        service = AutocertService(self.clock, snap, PendingChallenges(), changed, run=run)
        service.startService()
        self.addCleanup(service.stopService)
        return service

    def test_domains(self) -> None:
        """Route hosts and the authenticate host, not IPs, once each."""
        snap = snapshot(policy=[
            {"from": "https://a.example.com", "to": "http://x",
             "allow_public_unauthenticated_access": True},
            {"from": "https://a.example.com", "to": "http://x", "prefix": "/p",
             "allow_public_unauthenticated_access": True},
            {"from": "https://127.0.0.1:8443", "to": "http://x",
             "allow_public_unauthenticated_access": True}], **IDENTITY)
        self.assertEqual(wanted_domains(snap), ["a.example.com", "authenticate.example.com"])

    def test_directory_choice(self) -> None:
        """autocert_ca wins; otherwise staging or production."""
        self.assertEqual(acme_settings(snapshot(autocert_use_staging=True), None).directory,
                         STAGING)
        self.assertEqual(acme_settings(snapshot(autocert_ca="https://ca.test/dir"), None)
                         .directory, "https://ca.test/dir")
        self.assertTrue(acme_settings(snapshot(autocert_must_staple=True), None).must_staple)

    def test_issue_store_notify(self) -> None:
        """A missing certificate is ordered at start, stored and announced once."""
        leaf = trustme.CA().issue_cert("app.example.com")
        self.results.append(succeed((leaf.cert_chain_pems[0].bytes(),
                                     leaf.private_key_pem.bytes())))
        service = self.service(snapshot())
        self.assertEqual(self.calls, ["app.example.com"])
        self.assertEqual(self.changes, 1)
        self.assertEqual(len(service.pairs()), 1)
        self.clock.advance(60)
        self.assertEqual(self.calls, ["app.example.com"])  # valid: no new order

    def test_backoff_doubles(self) -> None:
        """A failed order is retried after 30 s, then 60 s, 120 s..."""
        self.service(snapshot())
        self.assertEqual(len(self.calls), 1)
        self.flushLoggedErrors()
        for expected, wait in ((1, 29), (2, 2), (2, 58), (3, 2)):
            self.clock.advance(wait)
            self.clock.advance(0)
            self.assertEqual(len(self.calls), expected, wait)

    def test_renewal_when_due(self) -> None:
        """A stored certificate past its renewal point is ordered again."""
        snap = snapshot()
        files = CertificateFiles(snap.options.autocert_dir)
        soon = trustme.CA().issue_cert("app.example.com",
                                       not_after=datetime.datetime.now(datetime.UTC)
                                       + datetime.timedelta(days=10))
        files.save("app.example.com", soon.cert_chain_pems[0].bytes(),
                   soon.private_key_pem.bytes())
        self.service(snap)
        self.assertEqual(self.calls, ["app.example.com"])


class ResponderTests(SynchronousTestCase):
    def test_placeholder_and_alpn_responder(self) -> None:
        """Without certificates the store has a placeholder; an acme-tls/1 handshake for a
        pending name gets the validation certificate, other clients the normal one."""
        pending = PendingChallenges()
        pending.add("app.example.com", "keyauth")
        store = build_store(snapshot(), (), pending)
        assert store is not None
        self.assertEqual(store.default.names, ["gateway.invalid"])
        server = SSL.Connection(store.default.context, None)
        server.set_accept_state()
        for alpn, expect_challenge in ((b"acme-tls/1", True), (b"http/1.1", False)):
            ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
            ctx.set_alpn_protos([alpn])
            client = SSL.Connection(ctx, None)
            client.set_tlsext_host_name(b"app.example.com")
            client.set_connect_state()
            server = SSL.Connection(store.default.context, None)
            server.set_accept_state()
            for _ in range(10):
                for src, dst in ((client, server), (server, client)):
                    with contextlib.suppress(SSL.WantReadError):
                        src.do_handshake()
                    with contextlib.suppress(SSL.WantReadError):
                        dst.bio_write(src.bio_read(65536))
            peer = client.get_peer_certificate(as_cryptography=True)
            assert peer is not None
            has_ext = any(e.oid == ID_PE_ACME_IDENTIFIER for e in peer.extensions)
            self.assertEqual(has_ext, expect_challenge, alpn)
