"""``Facts`` from the gateway's own objects: a caller (a session as decisions see it,
``caller_of``), what a request or an SSH login asks, a client certificate; and the one
decision, ``decide``."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from types import MappingProxyType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import NameOID
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller, caller_of
from gateway.authorize.certificates import cert_facts
from gateway.authorize.decide import (
    SSH_METHOD,
    Asked,
    caller_facts,
    decide,
    facts_of,
    http_asked,
    is_cors_preflight,
    method_text,
    ssh_asked,
)
from gateway.authorize.hook import RequestInfo
from gateway.config.errors import Problems
from gateway.policy import Facts, Policy, parse_document
from gateway.sessions.model import Session

NOW = 1_800_000_000.0
SESSION = Session("sid", "u-1", "Ada@Example.com", NOW - 60, NOW + 3600,
                  claims=MappingProxyType({"dept": ("ops",)}), groups=("eng",))


def caller(session: Session | None, groups_available: bool) -> Caller | None:
    return None if session is None else caller_of(
        session, allow_unverified_email=False, groups_available=groups_available)


def facts_for(request: RequestInfo, session: Session | None, now: float, *,
              groups_available: bool, client_cert: Any = None, internal: bool = False,
              path: str | None = None) -> Facts:
    """The facts the HTTP entrance decides on: the session's caller asking ``request``."""
    return facts_of(caller(session, groups_available),
                    http_asked(request, now, client_cert=client_cert, internal=internal,
                               path=path))


def identity_facts(session: Session | None, now: float, *, groups_available: bool) -> Facts:
    return caller_facts(caller(session, groups_available), now)


def request(method: bytes = b"GET", headers: list[tuple[bytes, bytes]] | None = None,
            path: str = "/docs") -> RequestInfo:
    return RequestInfo(method, "https", "app.example.com", path, b"", headers or [],
                       "192.0.2.1")


def certificate() -> tuple[bytes, bytes]:
    """A self-signed certificate with three kinds of SAN: (DER, its SPKI DER)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ada")])
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(7).not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.RFC822Name("ada@example.com"), x509.DNSName("ada.example.com"),
                x509.UniformResourceIdentifier("spiffe://example.com/ada")]), critical=False)
            .sign(key, hashes.SHA256()))
    spki = key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return cert.public_bytes(Encoding.DER), spki


class FactsForTests(SynchronousTestCase):
    def test_signed_in(self) -> None:
        facts = facts_for(request(), SESSION, NOW, groups_available=True)
        self.assertEqual((facts.authenticated, facts.user_id, facts.email, facts.domain),
                         (True, "u-1", "ada@example.com", "example.com"))
        self.assertEqual((facts.groups, facts.groups_available, dict(facts.claims)),
                         (("eng",), True, {"dept": ("ops",)}))
        self.assertEqual((facts.method, facts.path, facts.client_ip, facts.now),
                         ("GET", "/docs", "192.0.2.1", NOW))

    def test_no_session_expired_or_without_user(self) -> None:
        """Someone not signed in, whatever the session object still holds."""
        for session in (None, Session("sid", "u-1", "a@b.test", NOW - 60, NOW),
                        Session("sid", "", "a@b.test", NOW - 60, NOW + 60)):
            facts = facts_for(request(), session, NOW, groups_available=True)
            self.assertEqual((facts.authenticated, facts.user_id, facts.email, facts.groups,
                              dict(facts.claims)), (False, "", "", (), {}))
            self.assertEqual(facts.path, "/docs")

    def test_method_and_path(self) -> None:
        self.assertEqual(facts_for(request(b"delete"), None, NOW,
                                   groups_available=False).method, "DELETE")
        self.assertEqual(facts_for(request(b"CONNECT"), None, NOW, groups_available=False,
                                   path="").path, "")
        self.assertIs(method_text(b"GET"), method_text(b"GET"))
        self.assertEqual(method_text(b"PROPFIND"), "PROPFIND")

    def test_cors_preflight(self) -> None:
        headers = [(b"origin", b"https://x.test"), (b"access-control-request-method", b"PUT")]
        self.assertTrue(facts_for(request(b"OPTIONS", headers), None, NOW,
                                  groups_available=False).cors_preflight)
        self.assertFalse(facts_for(request(b"GET", headers), None, NOW,
                                   groups_available=False).cors_preflight)
        self.assertFalse(facts_for(request(b"OPTIONS", headers[:1]), None, NOW,
                                   groups_available=False).cors_preflight)

    def test_internal_and_certificate(self) -> None:
        der, _ = certificate()
        facts = facts_for(request(), SESSION, NOW, groups_available=False, internal=True,
                          client_cert=cert_facts(der))
        self.assertTrue(facts.internal)
        self.assertIsNotNone(facts.client_cert)

    def test_domain_of_no_mailbox(self) -> None:
        self.assertEqual(Facts(email="a@b@c.test").domain, "")
        self.assertEqual(Facts(email="@c.test").domain, "")
        self.assertEqual(Facts(email="").domain, "")


class CallerTests(SynchronousTestCase):
    """``caller_of`` is the one place a session becomes the person decisions see; a
    caller needs no session (a bearer token's, issue 42) and is decided alike."""

    def test_of_a_session(self) -> None:
        who = caller_of(SESSION, allow_unverified_email=False, groups_available=True)
        self.assertEqual((who.user_id, who.email, who.groups, dict(who.claims)),
                         ("u-1", "Ada@Example.com", ("eng",), {"dept": ("ops",)}))
        self.assertEqual((who.session_id, who.provider, who.expires_at, who.who),
                         ("sid", "default", NOW + 3600, "Ada@Example.com"))  # idp_*
        self.assertTrue(who.signed_in(NOW) and not who.signed_in(NOW + 3600))

    def test_refused_email_and_directory_groups(self) -> None:
        """A refused address is no address (nor claim); the directory's groups are
        looked up with the address decisions use."""
        asked: list[tuple[str, str]] = []

        class Directory:
            version = 1
            provider = "default"

            def groups_for(self, user_id: str, email: str) -> tuple[str, ...]:
                asked.append((user_id, email))
                return ("dir",)

        record = Session("sid", "u-1", "a@b.test", NOW - 60, NOW + 60, claims=MappingProxyType(
            {"email": ("a@b.test",), "email_verified": ("false",)}), groups=("idp",))
        who = caller_of(record, allow_unverified_email=False, groups_available=True,
                        directory=Directory())
        self.assertEqual((who.email, who.claimed_email, who.email_refusal, who.groups),
                         ("", "a@b.test", "email-unverified", ("dir",)))
        self.assertNotIn("email", who.claims)
        self.assertEqual(asked, [("u-1", "")])

    def test_without_a_session(self) -> None:
        """A caller with no session behind it is decided on what it is."""
        policy = compiled({"allow": {"and": [{"claim/repository": "example/app"}]}})
        bot = Caller("repo:example/app", "", (), MappingProxyType(
            {"repository": ("example/app",)}), NOW + 60, provider="github-actions")
        self.assertTrue(decide(policy, bot, Asked(NOW)).allowed)
        self.assertFalse(decide(policy, bot, Asked(NOW + 60)).allowed)
        self.assertFalse(decide(policy, None, Asked(NOW)).allowed)


class DecideTests(SynchronousTestCase):
    def test_ssh_login(self) -> None:
        """An SSH login asks with the method ``SSH``, no path, the login name."""
        asked = ssh_asked("deploy", "192.0.2.1", NOW)
        self.assertEqual((asked.method, asked.path, asked.ssh_username, asked.client_ip),
                         (SSH_METHOD, "", "deploy", "192.0.2.1"))
        policy = compiled({"allow": {"and": [{"ssh_username": "deploy"},
                                             {"user": "u-1"}]}})
        who = caller(SESSION, True)
        self.assertTrue(decide(policy, who, asked).allowed)
        self.assertFalse(decide(policy, who, ssh_asked("root", "192.0.2.1", NOW)).allowed)
        self.assertFalse(decide(policy, who, http_asked(request(), NOW)).allowed)


def compiled(rules: dict[str, Any]) -> Policy:
    problems = Problems()
    document = parse_document(rules, "policy", problems)
    assert document is not None, problems.errors
    return Policy(document)


class IdentityFactsTests(SynchronousTestCase):
    """A remembered decision keeps the person's facts (``identity_facts``) and builds a
    request's from them (``Facts.for_request``, which a specialised policy calls for a
    criterion it does not write inline): exactly ``facts_for``'s facts."""

    def test_same_facts_as_facts_for(self) -> None:
        der, _ = certificate()
        preflight = [(b"origin", b"https://x.test"), (b"access-control-request-method", b"PUT")]
        expired = Session("sid", "u-1", "a@b.test", NOW - 60, NOW)
        for session in (SESSION, None, expired):
            for req, cert in ((request(), None), (request(b"delete", path="/x"), cert_facts(der)),
                              (request(b"OPTIONS", preflight), None)):
                kept = identity_facts(session, NOW, groups_available=True)
                again = kept.for_request(method_text(req.method), req.path, req.client_ip, cert,
                                         is_cors_preflight(req.method, req.headers), False,
                                         NOW + 5)
                fresh = facts_for(req, session, NOW + 5, groups_available=True, client_cert=cert)
                self.assertEqual(repr(again), repr(fresh))

    def test_kept_facts_are_not_changed(self) -> None:
        kept = identity_facts(SESSION, NOW, groups_available=False)
        kept.for_request("POST", "/y", "192.0.2.1", None, False, False, NOW + 1)
        self.assertEqual((kept.method, kept.path, kept.now), ("GET", "/", NOW))


class CertFactsTests(SynchronousTestCase):
    def test_hashes_and_names(self) -> None:
        der, spki = certificate()
        facts = cert_facts(der)
        self.assertEqual(facts.fingerprint, hashlib.sha256(der).hexdigest())
        self.assertEqual(facts.spki_hash,
                         base64.b64encode(hashlib.sha256(spki).digest()).decode())
        self.assertEqual((facts.san_email, facts.san_dns, facts.san_uri),
                         (("ada@example.com",), ("ada.example.com",),
                          ("spiffe://example.com/ada",)))
        self.assertIs(cert_facts(der), facts)

    def test_matches_as_configured(self) -> None:
        """The fingerprint and SPKI hash as ``openssl`` prints them match the policy."""
        der, spki = certificate()
        long_form = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
        spki_hash = base64.b64encode(hashlib.sha256(spki).digest()).decode()
        problems = Problems()
        document = parse_document({"allow": {"and": [
            {"client_certificate": {"fingerprint": long_form, "spki_hash": spki_hash,
                                    "san_uri": {"ends_with": "/ada"}}}]}}, "policy", problems)
        assert document is not None, problems.errors
        self.assertTrue(Policy(document).evaluate(Facts(client_cert=cert_facts(der))).allowed)

    def test_not_a_certificate(self) -> None:
        self.assertRaises(ValueError, cert_facts, b"\x30\x03junk")
