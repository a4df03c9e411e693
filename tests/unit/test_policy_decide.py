"""A route's ``policy`` through the Decider: the verdict decides, the 403 says what kind
of condition refused the person (never the policy's values), the log and the access
reason name the rule, and a remembered decision is reused only while the request facts
the policy read are the same (a policy reading the method, path, address or clock is
decided again for every request; its identity headers are still made once)."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import jwt
from twisted.logger import globalLogPublisher

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Allow, Reply, RequestInfo

from .config.helpers import base_config, load
from .test_identity import (
    APP,
    AUTH,
    BROWSER,
    IDENTITY,
    JSON,
    NOW,
    SIGNED_OUT,
    Headers,
    IdentityCase,
)

GROUPS_AND_METHOD = [
    {"allow": {"or": [{"email": {"is": "alice@example.com"}}, {"groups": {"has": "staff"}}]}},
    {"deny": {"or": [{"http_method": {"in": ["DELETE"]}},
                     {"source_ip": ["198.51.100.0/24"]}]}},
]


def policy_snapshot(policy: Any, **route: Any) -> Any:
    routes = [{"from": f"https://{APP}", "to": "http://127.0.0.1:9", "policy": policy,
               "pass_identity_headers": True, **route}]
    return load(base_config(**{**IDENTITY, "authenticate_service_url": f"https://{AUTH}",
                               "policy": routes, "signout_redirect_url": SIGNED_OUT}))


def request(method: bytes = b"GET", path: str = "/", client_ip: str = "192.0.2.1",
            headers: Headers | None = None) -> RequestInfo:
    return RequestInfo(method, "https", APP, path, b"", list(headers or [BROWSER]), client_ip)


class PolicyDecideCase(IdentityCase):
    policy: Any = GROUPS_AND_METHOD

    def setUp(self) -> None:
        super().setUp()
        self.snapshot = policy_snapshot(self.policy)
        self.rebuild()

    def rebuild(self) -> None:
        from gateway.authenticate.identity import Identity

        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.route = self.snapshot.routes[0]
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def decide(self, info: RequestInfo) -> Allow | Reply:
        decision = self.identity.decider.authorize(info, self.route)
        assert isinstance(decision, (Allow, Reply)), decision
        return decision


class PolicyDecisionTests(PolicyDecideCase):
    def test_an_allow_rule_lets_in_and_names_itself(self) -> None:
        cookie = self.cookie(self.session())
        decision = self.decide(request(headers=[BROWSER, cookie]))
        assert isinstance(decision, Allow)
        self.assertEqual(decision.reason,
                         "policy-allow-matched allow[0].or[0] email is alice@example.com: "
                         "matched")
        self.assertEqual(decision.email, "alice@example.com")
        self.assertTrue(any(name == b"x-gateway-jwt-assertion" for name, _ in decision.headers))

    def test_the_answer_names_its_caller(self) -> None:
        """Allowed or refused, the answer carries who it was about (``Caller``: the
        session's id, the provider, the e-mail decisions use), which the access log and
        the audit stream read: a caller with no session behind it is named alike."""
        session = self.session()
        cookie = self.cookie(session)
        allowed = self.decide(request(headers=[BROWSER, cookie]))
        refused = self.decide(request(b"DELETE", headers=[JSON, cookie]))
        for decision in (allowed, refused):
            caller = decision.caller
            assert caller is not None, decision
            self.assertEqual((caller.session_id, caller.provider, caller.user_id,
                              caller.email), (session.id, session.provider, session.user_id,
                                              "alice@example.com"))
        self.assertIs(allowed.caller, refused.caller)  # one per session record
        self.assertIsNone(self.decide(request(headers=[BROWSER])).caller)

    def test_a_caller_without_a_session(self) -> None:
        """A caller no session stands behind (issue 42's bearer tokens) is decided like
        anyone: allowed with the identity headers made of it, refused with the 403 page,
        never sent to sign in; nothing is remembered for it."""
        staff = Caller("bot-1", "", ("staff",), MappingProxyType({}), NOW + 60,
                       groups_available=True, provider="ci")
        decider = self.identity.decider
        allowed = decider.decide_caller(request(headers=[JSON]), self.route, staff, True, NOW)
        assert isinstance(allowed, Allow), allowed
        self.assertIs(allowed.caller, staff)
        self.assertEqual(allowed.remove, frozenset({b"authorization"}))
        assertion = dict(allowed.headers)[b"x-gateway-jwt-assertion"]
        self.assertEqual(jwt.decode(assertion, options={"verify_signature": False})["sub"],
                         "bot-1")
        refused = decider.decide_caller(request(b"DELETE", headers=[JSON]), self.route, staff,
                                        True, NOW)
        assert isinstance(refused, Reply), refused
        self.assertEqual(refused.status, 403)
        self.assertEqual(len(decider._decisions), 0)

    def test_a_deny_rule_wins_and_the_page_says_what_kind(self) -> None:
        cookie = self.cookie(self.session())
        decision = self.decide(request(b"DELETE", headers=[JSON, cookie]))
        assert isinstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        self.assertIn("deny[0].or[0] http_method", decision.reason)
        message = json.dumps(json.loads(decision.body))
        self.assertIn("This kind of request is not allowed on this route.", message)
        self.assertNotIn("DELETE", message)
        [denied] = [e for e in self.logged if "access denied" in str(e.get("log_format"))]
        self.assertIn("deny[0].or[0] http_method in [DELETE]: matched", denied["reasons"])

    def test_the_network_rule_reads_the_client_address(self) -> None:
        cookie = self.cookie(self.session())
        decision = self.decide(request(client_ip="198.51.100.9", headers=[JSON, cookie]))
        assert isinstance(decision, Reply)
        self.assertIn("Your network is not allowed", decision.body.decode())
        self.assertNotIn("198.51.100", decision.body.decode())

    def test_someone_no_rule_allows_is_refused_in_words(self) -> None:
        cookie = self.cookie(self.session({"sub": "bob-id", "email": "bob@example.com"}))
        decision = self.decide(request(headers=[JSON, cookie]))
        assert isinstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        self.assertNotIn("alice@example.com", decision.body.decode())
        self.assertNotIn("staff", decision.body.decode())

    def test_nobody_signed_in_is_sent_to_sign_in(self) -> None:
        decision = self.decide(request())
        assert isinstance(decision, Reply)
        self.assertEqual(decision.status, 302)

    def test_a_remembered_decision_is_not_reused_for_another_method(self) -> None:
        """The policy reads the method and the address: the browser's next request with
        the same cookie is decided again, and a DELETE is refused although a GET with
        the same cookie was just let in."""
        cookie = self.cookie(self.session())
        first = self.decide(request(headers=[BROWSER, cookie]))
        self.assertIsInstance(first, Allow)
        again = self.decide(request(headers=[BROWSER, cookie]))
        assert isinstance(again, Allow)
        self.assertEqual(again.headers, first.headers)  # identity headers made once
        self.assertIsInstance(self.decide(request(b"DELETE", headers=[BROWSER, cookie])),
                              Reply)
        self.assertIsInstance(self.decide(request(client_ip="198.51.100.1",
                                                  headers=[BROWSER, cookie])), Reply)
        self.assertIsInstance(self.decide(request(headers=[BROWSER, cookie])), Allow)


class TimeOfDayTests(PolicyDecideCase):
    """A policy reading the clock: the same cookie is let in, then refused once the
    window closes (within the decision cache's 30 s, which must not keep it open)."""

    policy = [{"allow": {"and": [{"authenticated_user": True},
                                 {"time_of_day": {"after": "21:00", "before": "22:14:00",
                                                  "timezone": "UTC"}}]}}]

    def test_the_window_closing_closes_the_route(self) -> None:
        # NOW is 2023-11-14 22:13:20 UTC
        cookie = self.cookie(self.session())
        self.assertIsInstance(self.decide(request(headers=[BROWSER, cookie])), Allow)
        self.clock.now += 50  # 22:14:10
        decision = self.decide(request(headers=[JSON, cookie]))
        assert isinstance(decision, Reply)
        self.assertIn("closed at this time of day", decision.body.decode())


class IdentityOnlyPolicyTests(PolicyDecideCase):
    """A policy that reads nothing of the request keeps the remembered decision."""

    policy = [{"allow": {"or": [{"domain": {"is": "example.com"}}]}}]

    def test_the_next_request_is_not_decided_again(self) -> None:
        cookie = self.cookie(self.session())
        first = self.decide(request(headers=[BROWSER, cookie]))
        self.assertIsInstance(first, Allow)

        def refuse(*args: Any) -> Any:
            raise AssertionError("decided again")
        self.patch(self.identity.decider, "_verdict", refuse)
        self.assertIs(self.decide(request(b"POST", "/other", headers=[BROWSER, cookie])),
                      first)


class LowerCaseOptionsTests(PolicyDecideCase):
    """A lower-case ``options`` request with preflight headers is no CORS preflight
    (methods are case-sensitive): taken for one, it was let in by the preflight rule and
    the allow was kept for the session's next requests of any method. (Found in review:
    HTTP/2 accepts lower-case methods; the caches skip exactly ``OPTIONS``.)"""

    policy = [{"allow": {"or": [{"groups": {"has": "admins"}}]}}]
    PREFLIGHT = [(b"Origin", b"https://x.test"), (b"Access-Control-Request-Method", b"PUT")]

    def setUp(self) -> None:
        super().setUp()
        self.snapshot = policy_snapshot(self.policy, cors_allow_preflight=True)
        self.rebuild()

    def test_options_in_lower_case_is_decided_by_the_policy(self) -> None:
        cookie = self.cookie(self.session({"sub": "bob-id", "email": "bob@example.com"}))
        self.assertIsInstance(self.decide(request(b"OPTIONS", headers=[JSON, cookie,
                                                                      *self.PREFLIGHT])),
                              Allow)
        self.assertIsInstance(self.decide(request(b"options", headers=[JSON, cookie,
                                                                      *self.PREFLIGHT])),
                              Reply)
        self.assertIsInstance(self.decide(request(headers=[JSON, cookie])), Reply)

    def test_the_allow_fields_alone_too(self) -> None:
        snapshot = load(base_config(**{**IDENTITY, "authenticate_service_url": f"https://{AUTH}",
                                       "policy": [{"from": f"https://{APP}",
                                                   "to": "http://127.0.0.1:9",
                                                   "allowed_users": ["alice@example.com"],
                                                   "cors_allow_preflight": True}]}))
        self.snapshot = snapshot
        self.rebuild()
        cookie = self.cookie(self.session({"sub": "bob-id", "email": "bob@example.com"}))
        self.assertIsInstance(self.decide(request(b"options", headers=[JSON, cookie,
                                                                      *self.PREFLIGHT])),
                              Reply)
        self.assertIsInstance(self.decide(request(headers=[JSON, cookie])), Reply)


class ConfigWarningTests(PolicyDecideCase):
    def test_client_certificate_without_a_client_ca_is_a_warning(self) -> None:
        snapshot = policy_snapshot([{"allow": {"or": [
            {"client_certificate": {"fingerprint": "ab" * 32}}]}}])
        self.assertTrue(any("criterion never matches" in str(w) and "policy[0]" in str(w)
                            for w in snapshot.warnings), snapshot.warnings)

    def test_gateway_routes_in_a_route_policy_is_a_warning(self) -> None:
        snapshot = policy_snapshot([{"allow": {"or": [{"gateway_routes": True}]}}])
        self.assertTrue(any("gateway_routes never matches" in str(w)
                            for w in snapshot.warnings), snapshot.warnings)


class DenialPageTests(PolicyDecideCase):
    """The browser's 403 for a policy route: the kind of condition in words (the page
    leaves out a sentence that repeats who is signed in, so the sentence names no one),
    and no "nobody yet" under "Who this route lets in"."""

    policy = [{"allow": {"or": [{"groups": {"has": "admins"}}]}},
              {"deny": {"or": [{"http_method": {"in": ["DELETE"]}}]}}]

    def test_the_page_says_what_kind_of_rule_refused(self) -> None:
        cookie = self.cookie(self.session())
        decision = self.decide(request(b"DELETE", headers=[BROWSER, cookie]))
        assert isinstance(decision, Reply)
        page = decision.body.decode()
        self.assertIn("This kind of request is not allowed on this route.", page)
        self.assertIn("People the route&#x27;s policy lets in", page)
        self.assertNotIn("Nobody yet", page)
        self.assertNotIn("DELETE", page)
