"""Every criterion and matcher of the policy language, on ``Facts`` built by hand."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.policy import CertFacts, Facts, Policy, parse_document

FINGERPRINT = "17859273e8a980631d367b2d5a6a6635412b0f22835f69e47b3f65624546a704"
SPKI = "FsDbM0rUYIiL3V339eIKqiz6HPSB+Pz2WeAWhqlqh8U="
CERT = CertFacts(FINGERPRINT, SPKI, san_email=("ada@example.com",),
                 san_dns=("ada.example.com", "host.internal"), san_uri=("spiffe://x/ada",))
SIGNED: dict[str, Any] = {
    "authenticated": True, "user_id": "u-1", "provider": "corp", "email": "Ada@Example.com",
    "groups": ("eng",), "groups_available": True,
    "claims": MappingProxyType({"dept": ("r&d", "ops"), "address.country": ("DE",),
                                "level": ("2",), "admin": ("true",)}),
    "method": "GET", "path": "/docs/a.json", "client_ip": "192.0.2.10", "now": 1.8e9,
}


def compiled(text: str) -> Policy:
    problems = Problems()
    document = parse_document(yaml.safe_load(text), "policy", problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document)


def allows(criterion: str, **changes: Any) -> bool:
    """Whether ``allow: {or: [CRITERION]}`` lets a signed-in user (changed by
    ``changes``) in."""
    facts = dict(SIGNED)
    facts.update(changes)
    return compiled(f"allow: {{or: [{criterion}]}}").evaluate(Facts(**facts)).allowed


ANONYMOUS = {"authenticated": False, "user_id": "", "email": "", "groups": (),
             "claims": MappingProxyType({})}


class FlagTests(SynchronousTestCase):
    def test_accept_and_reject(self) -> None:
        self.assertTrue(allows("{accept: true}"))
        self.assertTrue(allows("{accept: true}", **ANONYMOUS))
        self.assertFalse(allows("{reject: true}"))
        self.assertFalse(allows("{reject: true}", **ANONYMOUS))

    def test_authenticated_user(self) -> None:
        self.assertTrue(allows("{authenticated_user: true}"))
        self.assertFalse(allows("{authenticated_user: true}", **ANONYMOUS))

    def test_identity_needs_sign_in(self) -> None:
        """Facts of someone not signed in never match an identity criterion, even if the
        caller left identity in them."""
        for criterion in ("{user: u-1}", "{email: ada@example.com}", "{domain: example.com}",
                          "{groups: eng}", "{claim/dept: ops}", "{email: {not_in: [x@y.z]}}",
                          "{provider: corp}", "{provider: {not_in: [partners]}}"):
            self.assertTrue(allows(criterion), criterion)
            self.assertFalse(allows(criterion, authenticated=False), criterion)

    def test_cors_preflight(self) -> None:
        self.assertTrue(allows("{cors_preflight: true}", cors_preflight=True, **ANONYMOUS))
        self.assertFalse(allows("{cors_preflight: true}"))

    def test_gateway_routes(self) -> None:
        self.assertTrue(allows("{gateway_routes: true}", internal=True))
        self.assertFalse(allows("{gateway_routes: true}"))


class StringMatcherTests(SynchronousTestCase):
    def test_user(self) -> None:
        self.assertTrue(allows("{user: u-1}"))
        self.assertTrue(allows("{user: {is: u-1}}"))
        self.assertFalse(allows("{user: U-1}"))  # ids compare exactly
        self.assertTrue(allows("{user: {in: [u-0, u-1]}}"))
        self.assertFalse(allows("{user: {not_in: [u-0, u-1]}}"))
        self.assertTrue(allows("{user: {starts_with: u-}}"))

    def test_each_operator(self) -> None:
        for matcher, expected in (("{is: /docs/a.json}", True), ("{is: /docs}", False),
                                  ("{starts_with: /docs/}", True),
                                  ("{starts_with: /admin}", False),
                                  ("{ends_with: .json}", True), ("{ends_with: .html}", False),
                                  ("{contains: cs/a}", True), ("{contains: admin}", False),
                                  ("{in: [/x, /docs/a.json]}", True), ("{in: [/x]}", False),
                                  ("{not_in: [/x]}", True),
                                  ("{not_in: [/x, /docs/a.json]}", False)):
            self.assertEqual(allows(f"{{http_path: {matcher}}}"), expected, matcher)

    def test_several_operators_all_hold(self) -> None:
        self.assertTrue(allows("{http_path: {starts_with: /docs, ends_with: .json}}"))
        self.assertFalse(allows("{http_path: {starts_with: /docs, ends_with: .html}}"))

    def test_email_is_case_insensitive(self) -> None:
        self.assertTrue(allows("{email: ADA@example.COM}"))
        self.assertTrue(allows("{email: {ends_with: '@EXAMPLE.com'}}"))
        self.assertTrue(allows("{email: {in: [x@y.z, ada@EXAMPLE.com]}}"))
        self.assertFalse(allows("{email: eve@example.com}"))

    def test_empty_email_matches_nothing(self) -> None:
        """A refused or missing address: no e-mail or domain matcher holds, ``not_in``
        included."""
        for criterion in ("{email: {not_in: [x@y.z]}}", "{email: {contains: ''}}",
                          "{domain: {not_in: [y.z]}}", "{email: {starts_with: ''}}",
                          "{email: ''}", "{email: {in: ['', x@y.z]}}", "{domain: ''}"):
            self.assertFalse(allows(criterion, email=""), criterion)
        self.assertFalse(allows("{user: {in: ['', x]}}", user_id=""))

    def test_provider(self) -> None:
        """The id of the provider the person signed in through, compared exactly; a
        person without one (no provider named) matches no matcher, ``not_in`` included."""
        self.assertTrue(allows("{provider: corp}"))
        self.assertTrue(allows("{provider: {is: corp}}"))
        self.assertFalse(allows("{provider: Corp}"))
        self.assertFalse(allows("{provider: partners}"))
        self.assertTrue(allows("{provider: {in: [partners, corp]}}"))
        self.assertFalse(allows("{provider: {not_in: [corp]}}"))
        self.assertTrue(allows("{provider: {not_in: [partners]}}"))
        self.assertTrue(allows("{provider: {starts_with: co}}"))
        self.assertFalse(allows("{provider: {not_in: [partners]}}", provider=""))
        self.assertFalse(allows("{provider: {in: ['', x]}}", provider=""))

    def test_provider_refusal_names_its_kind(self) -> None:
        verdict = compiled("allow: {or: [{provider: partners}]}").evaluate(Facts(**SIGNED))
        self.assertFalse(verdict.allowed)
        self.assertEqual(verdict.kind, "provider")
        self.assertEqual(verdict.criterion, "provider is partners")

    def test_domain(self) -> None:
        self.assertTrue(allows("{domain: EXAMPLE.com}"))
        self.assertTrue(allows("{domain: {ends_with: .com}}"))
        self.assertFalse(allows("{domain: example.org}"))
        self.assertFalse(allows("{domain: example.com}", email="no-at-sign"))

    def test_http_method(self) -> None:
        self.assertTrue(allows("{http_method: get}"))  # configured names fold to upper case
        self.assertTrue(allows("{http_method: {in: [GET, HEAD]}}"))
        self.assertFalse(allows("{http_method: {in: [DELETE, PUT]}}"))
        self.assertTrue(allows("{http_method: CONNECT}", method="CONNECT", path=""))

    def test_numbers_and_booleans_compare_as_strings(self) -> None:
        self.assertTrue(allows("{http_path: {is: 404}}", path="404"))


class ListMatcherTests(SynchronousTestCase):
    def test_groups(self) -> None:
        self.assertTrue(allows("{groups: {has: eng}}"))
        self.assertTrue(allows("{groups: eng}"))
        self.assertFalse(allows("{groups: Eng}"))
        self.assertFalse(allows("{groups: ops}"))

    def test_groups_need_group_data(self) -> None:
        """As ``allowed_groups``: without ``idp_service_account`` no group matches."""
        self.assertFalse(allows("{groups: eng}", groups_available=False))

    def test_claims(self) -> None:
        self.assertTrue(allows("{claim/dept: ops}"))
        self.assertTrue(allows("{claim/dept: {has: r&d}}"))
        self.assertFalse(allows("{claim/dept: sales}"))
        self.assertTrue(allows("{claim/address.country: DE}"))
        self.assertFalse(allows("{claim/address: DE}"))
        self.assertFalse(allows("{claim/missing: x}"))
        self.assertTrue(allows("{claim/level: 2}"))
        self.assertTrue(allows("{claim/level: 2.0}"))
        self.assertTrue(allows("{claim/admin: true}"))


class SourceIpTests(SynchronousTestCase):
    def test_networks(self) -> None:
        self.assertTrue(allows("{source_ip: 192.0.2.0/24}"))
        self.assertTrue(allows("{source_ip: 192.0.2.10}"))
        self.assertFalse(allows("{source_ip: 192.0.2.11}"))
        self.assertTrue(allows("{source_ip: [10.0.0.0/8, 192.0.2.8/29]}"))
        self.assertFalse(allows("{source_ip: [10.0.0.0/8, 192.0.2.0/29]}"))
        self.assertTrue(allows("{source_ip: 0.0.0.0/0}"))

    def test_ipv6(self) -> None:
        self.assertTrue(allows("{source_ip: '2001:db8::/32'}", client_ip="2001:db8::1"))
        self.assertFalse(allows("{source_ip: '2001:db8::/32'}", client_ip="2001:db9::1"))
        self.assertFalse(allows("{source_ip: '::/0'}"))  # an IPv4 client
        self.assertFalse(allows("{source_ip: 0.0.0.0/0}", client_ip="2001:db8::1"))

    def test_ipv4_written_as_ipv6(self) -> None:
        self.assertTrue(allows("{source_ip: 192.0.2.0/24}", client_ip="::ffff:192.0.2.10"))

    def test_no_address_matches_nothing(self) -> None:
        """Never everything: not even ``0.0.0.0/0`` or ``::/0`` matches an address that is
        empty or does not parse."""
        for text in ("", "unknown", "192.0.2.10, 10.0.0.1", "999.1.1.1", " 192.0.2.10"):
            self.assertFalse(allows("{source_ip: [0.0.0.0/0, '::/0']}", client_ip=text), text)


class CertificateTests(SynchronousTestCase):
    def test_presence(self) -> None:
        self.assertTrue(allows("{client_certificate: true}", client_cert=CERT))
        self.assertFalse(allows("{client_certificate: true}"))

    def test_fingerprint_forms(self) -> None:
        long_form = ":".join(FINGERPRINT[i:i + 2] for i in range(0, 64, 2)).upper()
        for form in (FINGERPRINT, long_form):
            self.assertTrue(allows(f"{{client_certificate: {{fingerprint: '{form}'}}}}",
                                   client_cert=CERT), form)
        self.assertTrue(allows(f"{{client_certificate: {{fingerprint: ['{'0' * 64}', "
                               f"'{FINGERPRINT}']}}}}", client_cert=CERT))
        self.assertFalse(allows(f"{{client_certificate: {{fingerprint: '{'0' * 64}'}}}}",
                                client_cert=CERT))
        self.assertFalse(allows(f"{{client_certificate: {{fingerprint: '{FINGERPRINT}'}}}}"))

    def test_spki_hash(self) -> None:
        self.assertTrue(allows(f"{{client_certificate: {{spki_hash: '{SPKI}'}}}}",
                               client_cert=CERT))
        other = "pbdFxDXEtpabt3MZiik71farokMg6ZIn2azvsdXtZYA="
        self.assertFalse(allows(f"{{client_certificate: {{spki_hash: [{other}]}}}}",
                                client_cert=CERT))

    def test_subject_alternative_names(self) -> None:
        self.assertTrue(allows("{client_certificate: {san_email: {ends_with: '@example.com'}}}",
                               client_cert=CERT))
        self.assertTrue(allows("{client_certificate: {san_dns: host.internal}}",
                               client_cert=CERT))
        self.assertFalse(allows("{client_certificate: {san_dns: other.internal}}",
                                client_cert=CERT))
        self.assertTrue(allows("{client_certificate: {san_uri: {starts_with: 'spiffe://x/'}}}",
                               client_cert=CERT))
        self.assertFalse(allows("{client_certificate: {san_uri: {starts_with: 'https:'}}}",
                                client_cert=CERT))

    def test_every_condition_holds(self) -> None:
        self.assertTrue(allows(f"{{client_certificate: {{spki_hash: '{SPKI}', san_dns: "
                               "ada.example.com}}", client_cert=CERT))
        self.assertFalse(allows(f"{{client_certificate: {{spki_hash: '{SPKI}', san_dns: "
                                "eve.example.com}}", client_cert=CERT))


class SshTests(SynchronousTestCase):
    """For the SSH routes to come; on HTTP requests (no SSH user name) they never match."""

    def test_ssh_username(self) -> None:
        self.assertTrue(allows("{ssh_username: root}", ssh_username="root"))
        self.assertTrue(allows("{ssh_username: {in: [root, admin]}}", ssh_username="admin"))
        self.assertFalse(allows("{ssh_username: root}", ssh_username="ada"))
        self.assertFalse(allows("{ssh_username: {not_in: [root]}}"))

    def test_matches_email(self) -> None:
        self.assertTrue(allows("{ssh_username_matches_email: true}", ssh_username="ada"))
        self.assertFalse(allows("{ssh_username_matches_email: true}", ssh_username="eve"))
        self.assertFalse(allows("{ssh_username_matches_email: true}"))
        self.assertFalse(allows("{ssh_username_matches_email: true}", ssh_username="",
                                email=""))

    def test_matches_claim(self) -> None:
        self.assertTrue(allows("{ssh_username_matches_claim: dept}", ssh_username="ops"))
        self.assertFalse(allows("{ssh_username_matches_claim: dept}", ssh_username="root"))
        self.assertFalse(allows("{ssh_username_matches_claim: dept}"))
        self.assertFalse(allows("{ssh_username_matches_claim: dept}", ssh_username="ops",
                                **ANONYMOUS))
