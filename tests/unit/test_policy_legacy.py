"""The allow fields as policy rules: their PPL equivalents, and a property test that a
random route decides exactly as the allow fields' own engine did (``legacy_oracle``, the
gateway's decision before they were compiled), with the same reason codes, for random
identities (as decisions see them) and requests."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.allow_fields import coded_decision as in_codes
from gateway.authorize.caller import caller_of
from gateway.authorize.decide import facts_of, http_asked
from gateway.authorize.hook import RequestInfo
from gateway.config.errors import Problems
from gateway.config.routes import Route
from gateway.policy import Document, Facts, Policy, legacy_ppl, legacy_rules, parse_document
from gateway.sessions.model import Session

from .legacy_oracle import evaluate

NOW = 1_800_000_000.0


def route(**fields: Any) -> Route:
    return Route(index=0, from_url="https://app.example.com", scheme="https",
                 host="app.example.com", port=None, **fields)


class TranslationTests(SynchronousTestCase):
    def test_each_field(self) -> None:
        self.assertEqual(legacy_ppl(route(allow_public_unauthenticated_access=True)),
                         [{"allow": {"or": [{"accept": True}]}}])
        self.assertEqual(legacy_ppl(route(cors_allow_preflight=True)),
                         [{"allow": {"or": [{"cors_preflight": True}]}}])
        self.assertEqual(legacy_ppl(route(allow_any_authenticated_user=True)),
                         [{"allow": {"or": [{"authenticated_user": True}]}}])
        self.assertEqual(legacy_ppl(route(allowed_users=("Ada@Example.com", "u-7"))),
                         [{"allow": {"or": [{"email": {"in": ["ada@example.com", "u-7"]}},
                                            {"user": {"in": ["Ada@Example.com", "u-7"]}}]}}])
        self.assertEqual(legacy_ppl(route(allowed_domains=("Example.com",))),
                         [{"allow": {"or": [{"domain": {"in": ["example.com"]}}]}}])
        self.assertEqual(legacy_ppl(route(allowed_groups=("eng", "ops"))),
                         [{"allow": {"or": [{"groups": {"has": "eng"}},
                                            {"groups": {"has": "ops"}}]}}])
        self.assertEqual(legacy_ppl(route(allowed_idp_claims=MappingProxyType(
            {"dept": ("r&d", "ops"), "https://x/roles": ("admin",)}))),
            [{"allow": {"or": [{"claim/dept": "r&d"}, {"claim/dept": "ops"},
                               {"claim/https://x/roles": "admin"}]}}])

    def test_written_form_parses_to_the_same_rules(self) -> None:
        """``legacy_ppl`` is real PPL: parsed, it is ``legacy_rules`` (less the labels)."""
        legacy = route(cors_allow_preflight=True, allowed_users=("A@b.test", "id"),
                       allowed_domains=("B.test",), allowed_groups=("g",),
                       allowed_idp_claims=MappingProxyType({"k": ("v", "true")}))
        problems = Problems()
        document = parse_document(legacy_ppl(legacy), "policy", problems)
        assert document is not None, problems.errors
        self.assertEqual([(r.action, r.body) for r in document.rules],
                         [(r.action, r.body) for r in legacy_rules(legacy)])

    def test_labels_name_the_field(self) -> None:
        policy = route(allowed_groups=("eng",), allowed_users=("ada@example.com",)).policy
        verdict = policy.evaluate(Facts(authenticated=True, user_id="u", email="x@y.test",
                                        groups=("eng",), groups_available=True))
        self.assertEqual(str(verdict), "allowed_groups.or[0] groups has eng: matched")
        verdict = policy.evaluate(Facts(authenticated=True, user_id="u", email="ADA@example.com"))
        self.assertEqual(str(verdict), "allowed_users.or[0] email in [ada@example.com]: matched")

    def test_labelled_rules_keep_the_numbering(self) -> None:
        """``allow[i]`` counts the ``policy``'s own allow rules only."""
        labelled = legacy_rules(route(allow_any_authenticated_user=True))
        problems = Problems()
        document = parse_document({"allow": {"or": [{"email": "a@b.test"}]}}, "policy",
                                  problems)
        assert document is not None
        policy = Policy(Document(labelled + document.rules))
        verdict = policy.evaluate(Facts(authenticated=False, email="a@b.test"))
        self.assertEqual([rule.path for rule in policy.rules],
                         ["allow_any_authenticated_user", "allow[0]"])
        self.assertFalse(verdict.allowed)

    def test_policy_rules_come_first_and_deny_covers_the_fields(self) -> None:
        problems = Problems()
        document = parse_document({"deny": {"or": [{"http_method": "DELETE"}]}}, "policy",
                                  problems)
        both = route(allow_any_authenticated_user=True, policy_document=document)
        for method, allowed in (("GET", True), ("DELETE", False)):
            facts = Facts(authenticated=True, user_id="u", method=method)
            self.assertEqual(both.policy.evaluate(facts).allowed, allowed, method)


# A small vocabulary, so that random routes and identities meet often.
EMAILS = ["ada@example.com", "ADA@Example.com", "bob@other.test", "eve@example.com",
          "mallory@evil.test@example.com", "", "not-an-address"]
USER_IDS = ["u-1", "u-2", "ada@example.com", ""]
DOMAINS = ["example.com", "EXAMPLE.COM", "other.test", "evil.test", ""]
GROUPS = ["eng", "ops", "Eng", "admins"]
CLAIM_NAMES = ["dept", "level", "email", "address.country", "email_verified"]
CLAIM_VALUES = ["r&d", "ops", "2", "true", "false", "DE", "ada@example.com"]

routes = st.builds(
    route,
    allow_public_unauthenticated_access=st.sampled_from([False] * 7 + [True]),
    cors_allow_preflight=st.booleans(),
    allow_any_authenticated_user=st.sampled_from([False, False, False, True]),
    allowed_users=st.lists(st.sampled_from(EMAILS + USER_IDS), max_size=3).map(tuple),
    allowed_domains=st.lists(st.sampled_from(DOMAINS), max_size=2).map(tuple),
    allowed_groups=st.lists(st.sampled_from(GROUPS), max_size=2).map(tuple),
    allowed_idp_claims=st.dictionaries(
        st.sampled_from(CLAIM_NAMES), st.lists(st.sampled_from(CLAIM_VALUES), max_size=2)
        .map(tuple), max_size=2).map(MappingProxyType),
)
signed_in = st.builds(
    Session,
    id=st.just("sid"),
    user_id=st.sampled_from(USER_IDS[:-1] * 3 + [""]),
    email=st.sampled_from(EMAILS),
    issued_at=st.just(NOW - 100),
    expires_at=st.sampled_from([NOW + 3600] * 5 + [NOW - 1, NOW, NOW + 1]),
    claims=st.dictionaries(st.sampled_from(CLAIM_NAMES),
                           st.lists(st.sampled_from(CLAIM_VALUES), min_size=1, max_size=2)
                           .map(tuple), max_size=3).map(MappingProxyType),
    groups=st.lists(st.sampled_from(GROUPS), max_size=3).map(tuple),
)
sessions = st.sampled_from([True] * 5 + [False]).flatmap(
    lambda present: signed_in if present else st.none())
HEADER_SETS = [[], [(b"origin", b"https://x.test")],
               [(b"origin", b"https://x.test"), (b"access-control-request-method", b"PUT")],
               [(b"origin", b" "), (b"access-control-request-method", b"PUT")]]
requests = st.builds(
    lambda method, headers, ip: RequestInfo(method, "https", "app.example.com", "/p", b"",
                                            list(headers), ip),
    st.sampled_from([b"GET", b"POST", b"OPTIONS", b"options", b"CONNECT"]),
    st.sampled_from(HEADER_SETS),
    st.sampled_from(["192.0.2.1", "", "garbage"]),
)


class EquivalenceTests(SynchronousTestCase):
    @settings(max_examples=1000, derandomize=True, deadline=None, database=None)
    @given(routes, sessions, requests, st.booleans(), st.booleans())
    def test_translation_decides_as_evaluate(self, legacy: Route, session: Session | None,
                                             request: RequestInfo, groups_available: bool,
                                             allow_unverified: bool) -> None:
        """Allowed exactly when ``evaluate`` allows; refused for want of a session (401)
        exactly when the policy refuses someone not signed in."""
        refusal = ""
        caller = None
        if session is not None:
            caller = caller_of(session, allow_unverified_email=allow_unverified,
                               groups_available=groups_available)
            refusal = caller.email_refusal
            # the oracle decides on the session as decisions see it
            session = replace(session, email=caller.email, claims=caller.claims)
        decision = evaluate(legacy, request.method, request.headers, session, NOW,
                            groups_available, refusal)
        facts = facts_of(caller, http_asked(request, NOW))
        verdict = legacy.policy.evaluate(facts)
        self.assertEqual(verdict.allowed, decision.allowed, (decision, str(verdict)))
        self.assertEqual(decision.status == 401,
                         not verdict.allowed and not facts.authenticated)
        # the codes the access log and the audit stream name (``allow_fields``)
        compiled = in_codes(legacy, verdict, caller, NOW)
        self.assertEqual(compiled.status, decision.status, (decision, str(verdict)))
        if decision.status != 401:
            self.assertEqual(compiled.reason if decision.allowed else compiled.reasons,
                             decision.reason if decision.allowed else decision.reasons,
                             (decision, str(verdict)))
