"""E-mail claims that prove nothing (issue 28): an address that is not one addr-spec, and
one the provider marks ``email_verified: false``, are not used for decisions.

``mallory@evil.example@example.test`` used to pass ``allowed_domains: [example.test]``
(the part after the last ``@``; oauth2-proxy GHSA-c5c4-8r6x-56w3), and an address the
provider said it had not verified passed ``allowed_users`` and ``allowed_domains``."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import jwt
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.account import who_am_i
from gateway.authenticate.identity import Identity
from gateway.authorize.caller import caller_of
from gateway.authorize.email import (
    EMAIL_INVALID,
    EMAIL_UNVERIFIED,
    email_refusal,
    is_mailbox,
)
from gateway.authorize.hook import Allow, Reply

from .config.helpers import SECRET
from .legacy_oracle import email_domain
from .test_authorize import NOW, decide, route, session
from .test_identity import APP, BROWSER, JSON, IdentityCase, header, request, snapshot

VALID = [
    "alice@example.com", "Alice.Smith+tag@Example.COM", "a@localhost", "o'brien@x.io",
    "x!#$%&'*+/=?^_`{|}~-@example.test", "jörg@bücher.example", "a@xn--bcher-kva.example",
    "user@sub-domain.example.co.uk", "1@2.3",
]
INVALID = [
    "", "mallory@evil.example@example.test", "@example.test", "alice@", "alice",
    "alice@example.test.", "alice@.example.test", "alice@example..test",
    "alice@-example.test", "alice@example-.test", "alice@exa mple.test",
    "al ice@example.test", '"mallory@evil"@example.test', "alice.@example.test",
    ".alice@example.test", "a..b@example.test", "alice@[192.0.2.1]",
    "alice@example_test.com", "alice@example.test\r\nX: y", "alice\x00@example.test",
    "<alice@example.test>", "alice@example.test,bob@example.test",
    "a" * 65 + "@example.test", "a@" + ".".join(["b" * 63] * 4) + ".test",
    "alice@" + "x" * 64 + ".test", "alice@exam\\ple.test",
    # IDNA would map these away, and an app that normalises reads example.test
    "a@example\uff0etest", "a@ex\u00adample.test", "a@exam\u200bple.test",
    # invisible or direction-changing characters in the local part
    "a\u202e@example.test", "a\u200b@example.test", "a\u00a0b@example.test",
]


class MailboxTests(SynchronousTestCase):
    def test_valid(self) -> None:
        for address in VALID:
            self.assertTrue(is_mailbox(address), address)

    def test_invalid(self) -> None:
        for address in INVALID:
            self.assertFalse(is_mailbox(address), address)

    def test_domain_of_a_mailbox_only(self) -> None:
        """The domain is the one after the only ``@``, lower-cased; none when the text is
        not one mailbox (the last ``@``'s part was what let the two-``@`` case in)."""
        self.assertEqual(email_domain("Alice@Example.TEST"), "example.test")
        self.assertEqual(email_domain("mallory@evil.example@example.test"), "")
        self.assertEqual(email_domain("nobody"), "")

    def test_refusal_codes(self) -> None:
        unverified = {"email_verified": ("false",)}
        self.assertEqual(email_refusal("a@b.test", {}, False), "")
        self.assertEqual(email_refusal("a@b.test", {"email_verified": ("true",)}, False), "")
        self.assertEqual(email_refusal("a@b.test", unverified, False), EMAIL_UNVERIFIED)
        # providers that send the boolean as a string (flattened alike, any case)
        self.assertEqual(email_refusal("a@b.test", {"email_verified": ("False",)}, False),
                         EMAIL_UNVERIFIED)
        self.assertEqual(email_refusal("a@b.test", unverified, True), "")
        self.assertEqual(email_refusal("a@b@c.test", {}, True), EMAIL_INVALID)
        self.assertEqual(email_refusal("", unverified, False), "")

    def test_caller_drops_the_address_and_its_claim(self) -> None:
        """With the address refused, neither the field nor the ``email`` claim remains
        (claim headers fall back to the claim); the rest is kept. Nothing refused: the
        session's claims as they are."""
        claims = MappingProxyType({"email": ("a@b.test",), "email_verified": ("false",),
                                   "team": ("x",)})
        record = session(email="a@b.test", claims=claims)
        view = caller_of(record, allow_unverified_email=False, groups_available=False)
        self.assertEqual(view.email_refusal, EMAIL_UNVERIFIED)
        self.assertEqual((view.email, view.claimed_email), ("", "a@b.test"))
        self.assertEqual(dict(view.claims), {"email_verified": ("false",), "team": ("x",)})
        self.assertEqual((view.session_id, view.user_id), (record.id, record.user_id))
        kept = caller_of(record, allow_unverified_email=True, groups_available=False)
        self.assertEqual((kept.email, kept.email_refusal), ("a@b.test", ""))
        self.assertIs(kept.claims, record.claims)


    def test_the_directory_groups_only_its_own_providers_sessions(self) -> None:
        """Found in review (issue 42): the directory (of ``idp_service_account``, which
        lists one provider's people) gave its groups to sessions of every interactive
        provider, matched by bare user id or by an address another provider vouched for:
        a partner provider's user with ``email=alice@example.com``, verified, got the
        corp directory's alice's groups. Another provider's session now has no groups
        (not its own provider's ``groups`` claim either: group rules were written for
        the directory's)."""
        claims = MappingProxyType({"email": ("alice@example.com",),
                                   "email_verified": ("true",)})
        corp = session(email="alice@example.com", claims=claims)
        partner = replace(corp, provider="partners", groups=("admins",))
        directory = Directory()
        self.assertEqual(caller_of(corp, allow_unverified_email=False, groups_available=True,
                                   directory=directory).groups, ("admins",))
        stranger = caller_of(partner, allow_unverified_email=False, groups_available=True,
                             directory=directory)
        self.assertEqual((stranger.email, stranger.groups), ("alice@example.com", ()))
        self.assertEqual(directory.asked, [(corp.user_id, "alice@example.com")])


class EvaluateTests(SynchronousTestCase):
    def test_two_ats_do_not_pass_allowed_domains(self) -> None:
        """Even handed the raw session, the domain rule sees no domain in the text."""
        r = route(allowed_domains=["example.test"])
        raw = session(email="mallory@evil.example@example.test")
        decision = decide(r, raw, groups=False)
        self.assertEqual((decision.allowed, decision.status), (False, 403))
        self.assertEqual(decision.reasons, ("domain-unauthorized",))

    def test_refusal_is_a_reason_of_the_rules_that_needed_it(self) -> None:
        r = route(allowed_users=["a@example.test"], allowed_domains=["example.test"],
                  allowed_idp_claims={"email": ["a@example.test"]})
        view = session(email="")
        decision = decide(r, view, groups=False, refused=EMAIL_UNVERIFIED)
        self.assertEqual(decision.reasons, ("email-unauthorized", EMAIL_UNVERIFIED,
                                            "domain-unauthorized", "claims-unauthorized"))

    def test_other_rules_still_apply(self) -> None:
        """A refused address is no address; the user id, groups and claims still count."""
        r = route(allowed_users=["mallory-id"], allowed_domains=["example.test"])
        view = session(user_id="mallory-id", email="")
        decision = decide(r, view, groups=False, refused=EMAIL_INVALID)
        self.assertTrue(decision.allowed)
        self.assertEqual(decision.reasons, ("user-id-ok",))


class Directory:
    """A directory (``DirectoryGroups``) where alice@example.com is an admin."""

    version = 1
    provider = "default"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def groups_for(self, user_id: str, email: str) -> tuple[str, ...]:
        self.asked.append((user_id, email))
        return ("admins",) if email == "alice@example.com" else ()


UNVERIFIED = {"sub": "eve-id", "email": "alice@example.com", "email_verified": False,
              "name": "Eve"}
TWO_ATS = {"sub": "mallory-id", "email": "mallory@evil.example@example.com"}


class IdentityEmailTests(IdentityCase):
    """Through the identity layer: the route of ``test_identity.snapshot`` allows
    ``alice@example.com`` and passes identity headers (``x-email`` is the e-mail)."""

    def use(self, **extra: Any) -> None:
        self.snapshot = snapshot(**extra)
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.route = self.snapshot.routes[0]

    def test_unverified_address_is_refused_with_a_reason(self) -> None:
        eve = self.session(UNVERIFIED)
        decision = self.authorize(headers=[BROWSER, self.cookie(eve)])
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        self.assertIn(b"your provider has not verified this address", decision.body)
        self.assertIn(b"Signed in as <strong>eve-id</strong>", decision.body)
        self.assertEqual(decision.email, "")
        self.assertIn("email-unverified", decision.reason)

    def test_invalid_address_is_refused(self) -> None:
        self.use(policy=[{"from": f"https://{APP}", "to": "http://127.0.0.1:9",
                          "allowed_domains": ["example.com"]}])
        mallory = self.session(TWO_ATS)
        decision = self.authorize(headers=[JSON, self.cookie(mallory)])
        self.assertEqual(decision.status, 403)
        self.assertIn("email-invalid", decision.reason)
        self.assertIn("not one valid address",
                      json.loads(decision.body).get("message", "") + decision.body.decode())

    def test_setting_lets_unverified_addresses_count(self) -> None:
        """``idp_allow_unverified_email: true`` (insecure) restores the old behaviour for
        unverified addresses, never for invalid ones."""
        self.use(idp_allow_unverified_email=True)
        eve = self.session(UNVERIFIED)
        decision = self.authorize(headers=[BROWSER, self.cookie(eve)])
        self.assertIsInstance(decision, Allow)
        self.assertEqual(header(decision, b"x-email"), b"alice@example.com")

    def test_turning_the_setting_off_applies_to_existing_sessions(self) -> None:
        """A reload builds a new ``Identity``: a session let in while the setting was on
        is refused at its next request once it is off (nothing is decided at sign-in)."""
        keys = {"shared_secret": SECRET, "cookie_secret": SECRET}
        self.use(idp_allow_unverified_email=True, **keys)
        eve = self.session(UNVERIFIED)
        cookie = self.cookie(eve)
        self.assertIsInstance(self.authorize(headers=[JSON, cookie]), Allow)
        self.use(**keys)
        self.assertEqual(self.authorize(headers=[JSON, cookie]).status, 403)

    def test_absent_claim_is_the_provider_saying_nothing(self) -> None:
        alice = self.session({"sub": "alice-id", "email": "alice@example.com"})
        self.assertIsInstance(self.authorize(headers=[BROWSER, self.cookie(alice)]), Allow)

    def test_nothing_handed_on_carries_a_refused_address(self) -> None:
        """On a route Eve may use by her user id: no e-mail in the assertion, no claim
        header (not even from the ``email`` claim), none in the access log's decision."""
        self.use(policy=[{"from": f"https://{APP}", "to": "http://127.0.0.1:9",
                          "allowed_users": ["eve-id"], "pass_identity_headers": True}])
        eve = self.session(UNVERIFIED)
        decision = self.authorize(headers=[BROWSER, self.cookie(eve)])
        self.assertIsInstance(decision, Allow)
        self.assertIsNone(header(decision, b"x-email"))
        token = header(decision, b"x-gateway-jwt-assertion")
        assert token is not None
        claims = jwt.decode(token, jwt.PyJWK(self.signer.public_jwk()).key,
                            algorithms=["ES256"], audience=APP, options={"verify_exp": False})
        self.assertEqual((claims["sub"], claims["email"]), ("eve-id", ""))
        self.assertEqual(decision.email, "")

    def test_programmatic_token_follows_the_same_rule(self) -> None:
        eve = self.session(UNVERIFIED)
        token = self.identity.shared.seal("programmatic", {"sid": eve.id}, NOW + 60)
        decision = self.authorize(headers=[JSON, (b"Authorization",
                                                  b"Gateway " + token.encode())])
        self.assertEqual(decision.status, 403)
        self.assertIn("email-unverified", decision.reason)

    def test_who_am_i_says_why_the_address_is_not_used(self) -> None:
        eve = self.session(UNVERIFIED)
        page = who_am_i(self.identity, request("/.gateway/", headers=[JSON, self.cookie(eve)]))
        assert isinstance(page, Reply)
        doc = json.loads(page.body)
        self.assertEqual(doc["email"], "")
        self.assertNotIn("email", doc["claims"])
        self.assertEqual(doc["email_not_used"]["reason"], "email-unverified")
        self.assertEqual(doc["email_not_used"]["claimed"], "alice@example.com")
        html = who_am_i(self.identity, request("/.gateway/",
                                                headers=[BROWSER, self.cookie(eve)]))
        assert isinstance(html, Reply)
        self.assertIn(b"your provider has not verified this address", html.body)

    def test_directory_does_not_match_a_refused_address(self) -> None:
        """A directory matches users by id, else e-mail: a refused address finds no one's
        groups (the directory's own user with that address is someone else)."""
        directory = Directory()
        self.use(idp_service_account="groups-from-claims",
                 policy=[{"from": f"https://{APP}", "to": "http://127.0.0.1:9",
                          "allowed_groups": ["admins"]}])
        self.identity.decider.directory = directory
        eve = self.session(UNVERIFIED)
        self.assertEqual(self.authorize(headers=[JSON, self.cookie(eve)]).status, 403)
        self.assertEqual(directory.asked, [("eve-id", "")])
        alice = self.session({"sub": "alice-id", "email": "alice@example.com"})
        self.assertIsInstance(self.authorize(headers=[JSON, self.cookie(alice)]), Allow)
        self.assertEqual(directory.asked[-1], ("alice-id", "alice@example.com"))

    def test_sign_out_pages_name_the_user_id(self) -> None:
        """The sign-out confirmation names the person as routes see them: not by a
        refused address."""
        eve = self.session(UNVERIFIED)
        page = self.internal("/.gateway/signout/", headers=[BROWSER, self.cookie(eve)])
        self.assertEqual(page.status, 200)
        self.assertIn(b"eve-id", page.body)
        self.assertNotIn(b"alice@example.com", page.body)

    def test_refusal_logged_once_per_session(self) -> None:
        eve = self.session(UNVERIFIED)
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        for _ in range(3):
            self.authorize(headers=[JSON, self.cookie(eve)])
            self.clock.now += 60  # past the decision cache
        refusals = [e for e in events if e.get("reason") == "email-unverified"
                    and "claimed" in e]
        self.assertEqual(len(refusals), 1)
        self.assertEqual(refusals[0]["user_id"], "eve-id")
