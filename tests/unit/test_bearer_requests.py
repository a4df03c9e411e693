"""Bearer tokens from outside issuers on HTTP requests (issue 42), in process: the HTTP
entrance (``Decider.authorize``) with the snapshot's verifiers (keys given, no network).

A verified token is a ``Caller`` (provider, sub, claims; no session) decided by the same
``decide``; allowed carries the assertion naming the provider and drops the token unless
``pass_bearer_token``; denied is 403 and refused 401 with ``WWW-Authenticate`` naming the
check, never a sign-in answer; cookie and bearer together is 400; the token's ``iss``
only chooses among the route's providers, each checking with its own keys."""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.holder import IdentityHolder
from gateway.authenticate.identity import Identity
from gateway.authorize.hook import Allow, Reply
from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.keys import key_set_from_json
from gateway.bearer_jwt.verifier import Verifier
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.session_records import RecordSessionStore
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.forwardauth.answer import Mode, outcome
from gateway.dataplane.routing.plan import build_plan
from gateway.observability.metrics import REGISTRY
from gateway.rpc.authorize_wire import request_from_pb, request_to_pb
from tests.support.bearer_tokens import NOW, ec_key, jwks, mint, rsa_key

from . import test_forward_auth
from .config.helpers import IDENTITY, base_config, load
from .test_identity import APP, BROWSER, JSON, IdentityCase, header, request, snapshot
from .test_provider_sign_in import Fake

CI = "https://token.actions.githubusercontent.com"
CLUSTER = "https://cluster.example.test"
AUDIENCE = "https://gateway.example.test"
PROVIDERS = [
    {"id": "github-actions", "issuer": CI, "bearer": {"audiences": [AUDIENCE]}},
    {"id": "cluster", "issuer": CLUSTER, "bearer": {"audiences": ["gateway"],
                                                     "groups_claim": "roles"}},
    {"id": "corp", "name": "Corp account", "issuer": "https://corp.example",
     "client_id": "gw", "client_secret": "s1"},
]
DEPLOY = {"allow": {"or": [
    {"and": [{"provider": {"is": "github-actions"}},
             {"claim/repository": {"has": "example/app"}},
             {"claim/ref": {"has": "refs/heads/main"}}]},
    {"and": [{"provider": {"is": "cluster"}},
             {"claim/kubernetes.io.namespace": {"has": "prod"}}]},
    {"groups": {"has": "deployers"}}]}}


def routes() -> list[dict[str, Any]]:
    return [
        {"from": f"https://{APP}", "to": "http://127.0.0.1:9", "pass_identity_headers": True,
         "identity_providers": ["github-actions", "cluster", "corp"], "policy": [DEPLOY]},
        {"from": "https://passed.test", "to": "http://127.0.0.1:9",
         "identity_providers": ["github-actions"], "pass_bearer_token": True,
         "policy": [DEPLOY]},
        {"from": "https://people.test", "to": "http://127.0.0.1:9",
         "allowed_users": ["alice@example.com"]},
        {"from": "https://everyone.test", "to": "http://127.0.0.1:9",
         "identity_providers": ["github-actions"],
         "policy": [{"allow": {"or": [{"accept": True}]}}]},
    ]


def ci_token(**claims: Any) -> str:
    return mint(rsa_key(), "ci-1", **{"iss": CI, "aud": AUDIENCE, **claims})


def cluster_token(**claims: Any) -> str:
    return mint(ec_key(), "c-1", "ES256", **{
        "iss": CLUSTER, "aud": "gateway", "sub": "system:serviceaccount:prod:deployer",
        "kubernetes.io": {"namespace": "prod", "serviceaccount": {"name": "deployer"}},
        "repository": None, "ref": None, "workflow": None, **claims})


def bearer(token: str) -> tuple[bytes, bytes]:
    return (b"Authorization", f"Bearer {token}".encode())


def assertion(decision: Allow) -> dict[str, Any]:
    value = header(decision, b"x-gateway-jwt-assertion")
    assert value is not None
    payload = value.split(b".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + b"=" * 4))
    return claims


def counted(provider: str, result: str) -> float:
    value = REGISTRY.get_sample_value("gateway_bearer_tokens_total",
                                      {"provider": provider, "result": result})
    return value or 0.0


class FakeKeys:
    def __init__(self, provider: str, *keys: tuple[Any, str]) -> None:
        self.keys = key_set_from_json(provider, jwks(*keys))
        self.asked = 0

    def unknown_kid(self) -> None:
        self.asked += 1


class BearerCase(IdentityCase):
    def setUp(self) -> None:
        super().setUp()
        self.clock.now = NOW
        self.snapshot = snapshot(identity_providers=PROVIDERS, policy=routes(),
                                 jwt_claims_headers={"x-provider": "idp",
                                                     "x-repository": "repository"})
        self.ci_keys = FakeKeys("github-actions", (rsa_key(), "ci-1"))
        self.verifiers = {
            "github-actions": Verifier(BearerExpectations("github-actions", CI, (AUDIENCE,)),
                                       self.ci_keys, self.clock),
            "cluster": Verifier(BearerExpectations("cluster", CLUSTER, ("gateway",),
                                                   groups_claim="roles"),
                                FakeKeys("cluster", (ec_key(), "c-1")), self.clock)}
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock,
                                 bearer=self.verifiers)
        self.identity.clients.clients["corp"] = Fake("https://corp.example")
        self.deploy, self.passed, self.people, self.everyone = self.snapshot.routes
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def decide(self, route: Any, *headers: tuple[bytes, bytes]) -> Any:
        decision = self.identity.decider.authorize(request(headers=list(headers)), route)
        self.assertIsInstance(decision, Allow | Reply)
        return decision

    def assertRefused(self, decision: Any, check: str) -> None:
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 401, decision.body[:300])
        challenge = header(decision, b"www-authenticate")
        assert challenge is not None
        self.assertTrue(challenge.startswith(b'Bearer error="invalid_token", '
                                             b'error_description="'), challenge)
        self.assertIsNone(header(decision, b"location"))
        self.assertEqual(decision.reason, f"bearer-token-refused: {check}")


class AllowedTests(BearerCase):
    def test_allowed_names_the_provider_and_drops_the_token(self) -> None:
        before = counted("github-actions", "allowed")
        stored: list[Any] = []
        for name in ("put", "put_confirmed"):
            self.patch(self.store, name, stored.append)
        decision = self.decide(self.deploy, BROWSER, bearer(ci_token()))
        self.assertIsInstance(decision, Allow)
        claims = assertion(decision)
        self.assertEqual((claims["idp"], claims["sub"]),
                         ("github-actions", "repo:example/app:ref:refs/heads/main"))
        self.assertEqual(header(decision, b"x-provider"), b"github-actions")
        self.assertEqual(header(decision, b"x-repository"), b"example/app")
        self.assertEqual(decision.remove, frozenset({b"authorization"}))
        caller = decision.caller
        assert caller is not None
        self.assertEqual((caller.provider, caller.session_id, caller.expires_at),
                         ("github-actions", "", NOW + 300))
        self.assertEqual(stored, [])  # no session is created
        self.assertEqual(counted("github-actions", "allowed"), before + 1)
        # the same token again: the same caller and answer (nothing parsed again)
        self.assertIs(self.decide(self.deploy, bearer(ci_token())), decision)
        self.assertEqual(counted("github-actions", "allowed"), before + 2)

    def test_a_token_seen_before_only_while_its_keys_and_exp_hold(self) -> None:
        """The same header is answered from memory; not once the provider's key set
        changed (a withdrawn key verifies nothing more), nor past the token's exp."""
        token = ci_token()
        self.assertIsInstance(self.decide(self.deploy, bearer(token)), Allow)
        self.ci_keys.keys = key_set_from_json("github-actions", jwks((rsa_key("new"), "n")))
        self.assertRefused(self.decide(self.deploy, bearer(token)), "unknown_kid")
        self.ci_keys.keys = key_set_from_json("github-actions", jwks((rsa_key(), "ci-1")))
        self.assertIsInstance(self.decide(self.deploy, bearer(token)), Allow)
        self.assertIsInstance(self.decide(self.everyone, bearer(token)), Allow)
        self.clock.now = NOW + 300 + 61  # exp and the skew past
        self.assertRefused(self.decide(self.deploy, bearer(token)), "expired")
        # (a route that lets anyone in too: the token is refused, not let in as no one)
        self.assertRefused(self.decide(self.everyone, bearer(token)), "expired")

    def test_kubernetes_shaped_claims(self) -> None:
        decision = self.decide(self.deploy, bearer(cluster_token(roles=["ops"])))
        self.assertIsInstance(decision, Allow)
        claims = assertion(decision)
        self.assertEqual((claims["idp"], claims["sub"], claims["groups"]),
                         ("cluster", "system:serviceaccount:prod:deployer", ["ops"]))

    def test_groups_from_the_configured_claim_decide(self) -> None:
        token = cluster_token(**{"kubernetes.io": {"namespace": "dev"}},
                              roles=["deployers"])
        self.assertIsInstance(self.decide(self.deploy, bearer(token)), Allow)

    def test_email_only_when_verified(self) -> None:
        unverified = self.decide(self.deploy, bearer(ci_token(
            email="ci@example.com", email_verified=False)))
        self.assertEqual(assertion(unverified)["email"], "")
        verified = self.decide(self.deploy, bearer(ci_token(
            email="ci@example.com", email_verified=True, jti="j-2")))
        self.assertEqual(assertion(verified)["email"], "ci@example.com")

    def test_pass_bearer_token_keeps_it(self) -> None:
        decision = self.decide(self.passed, bearer(ci_token()))
        self.assertIsInstance(decision, Allow)
        self.assertNotIn(b"authorization", decision.remove)


class RefusedTests(BearerCase):
    def test_denied_by_policy_is_403_never_sign_in(self) -> None:
        before = counted("github-actions", "denied")
        decision = self.decide(self.deploy, BROWSER, bearer(ci_token(ref="refs/heads/dev")))
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        body = decision.body.decode()
        self.assertNotIn("Sign in", body)
        self.assertNotIn("sign_in", body)
        self.assertEqual(decision.caller.provider, "github-actions")
        self.assertEqual(counted("github-actions", "denied"), before + 1)

    def test_refused_is_401_naming_the_check(self) -> None:
        token = ci_token(exp=int(NOW) - 120)
        before = counted("github-actions", "expired")
        decision = self.decide(self.deploy, BROWSER, bearer(token),
                               (b"X-Request-Id", b"req-123"))
        self.assertRefused(decision, "expired")
        self.assertEqual(header(decision, b"www-authenticate"),
                         b'Bearer error="invalid_token", '
                         b'error_description="the token has expired"')
        self.assertNotIn(token.encode(), decision.body)
        self.assertNotIn(token.split(".")[1].encode(), b"".join(v for _, v in
                                                               decision.headers))
        lines = [e for e in self.logged if e.get("log_namespace") == "gateway.bearer"]
        self.assertEqual(len(lines), 1)
        line = lines[0]
        self.assertEqual((line["provider"], line["kid"], line["check"], line["request_id"],
                          line["log_level"]),
                         ("github-actions", "ci-1", "expired", "req-123", LogLevel.info))
        self.assertNotIn(token, repr(line))
        self.assertEqual(counted("github-actions", "expired"), before + 1)

    def test_expired_within_the_skew_is_401_not_sign_in(self) -> None:
        """The verifier allows 60 s of skew past ``exp``; the caller is then past its
        end, which ``decide`` sees as no one: answered as expired, never sign-in."""
        decision = self.decide(self.deploy, BROWSER, bearer(ci_token(exp=int(NOW) - 10)))
        self.assertRefused(decision, "expired")

    def test_keys_and_issuers_never_cross_providers(self) -> None:
        # signed with the CI key, naming the cluster's issuer and audience
        crossed = mint(rsa_key(), "ci-1", iss=CLUSTER, aud="gateway")
        self.assertRefused(self.decide(self.deploy, bearer(crossed)), "unknown_kid")
        # the cluster's kid with the CI issuer: CI's key set has no such key
        other = mint(ec_key(), "c-1", "ES256", iss=CI, aud=AUDIENCE)
        self.assertRefused(self.decide(self.deploy, bearer(other)), "unknown_kid")
        # an issuer the route does not accept: refused before any signature work
        self.assertRefused(self.decide(self.deploy, bearer(mint(
            rsa_key(), "ci-1", iss="https://elsewhere.test", aud=AUDIENCE))), "issuer")
        # a route that accepts only github-actions checks every token with its keys
        self.assertRefused(self.decide(self.passed, bearer(cluster_token())), "unknown_kid")

    def test_unknown_kid_asks_the_source(self) -> None:
        token = mint(rsa_key("rotated"), "ci-2", iss=CI, aud=AUDIENCE)
        self.assertRefused(self.decide(self.deploy, bearer(token)), "unknown_kid")
        self.assertEqual(self.ci_keys.asked, 1)

    def test_two_authorization_headers(self) -> None:
        decision = self.decide(self.deploy, bearer(ci_token()), (b"Authorization", b"Basic x"))
        self.assertRefused(decision, "malformed")

    def test_cookie_and_bearer_is_400(self) -> None:
        session = self.session()
        decision = self.decide(self.deploy, JSON, self.cookie(session), bearer(ci_token()))
        self.assertIsInstance(decision, Reply)
        self.assertEqual((decision.status, decision.reason), (400, "cookie-and-bearer-token"))
        self.assertIn(b"both a session cookie and a bearer token", decision.body)
        # another application's cookie beside the token is no session: allowed
        self.assertIsInstance(self.decide(self.deploy, (b"Cookie", b"theme=dark"),
                                          bearer(ci_token())), Allow)

    def test_the_gateways_own_token_is_not_an_outside_one(self) -> None:
        decision = self.decide(self.deploy, JSON, (b"Authorization", b"Bearer Gateway-abc"))
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 401)
        self.assertEqual(decision.reason, "user-unauthenticated")  # not a refused JWT
        self.assertEqual(header(decision, b"www-authenticate"), b"Bearer")


class OtherRoutesTests(BearerCase):
    def test_a_route_accepting_no_bearer_provider(self) -> None:
        """No session: 401 saying the route takes no bearer token (not a sign-in
        redirect, which a machine would not follow); with a session, the session
        decides and the header is the application's (passed on)."""
        decision = self.decide(self.people, BROWSER, bearer(ci_token()))
        self.assertIsInstance(decision, Reply)
        self.assertEqual((decision.status, decision.reason),
                         (401, "bearer-token-not-accepted"))
        self.assertIn(b"accepts no bearer tokens", header(decision, b"www-authenticate"))
        session = self.session()
        allowed = self.decide(self.people, self.cookie(session), bearer(ci_token()))
        self.assertIsInstance(allowed, Allow)
        self.assertNotIn(b"authorization", allowed.remove)
        self.assertEqual(allowed.caller.session_id, session.id)

    def test_no_token_on_a_bearer_route_is_the_usual_sign_in(self) -> None:
        """A browser: the sign-in redirect; anything else: 401 with the Bearer challenge
        (no error: it sent no token), telling a job that forgot its token which kind."""
        decision = self.decide(self.deploy, BROWSER)
        self.assertEqual(decision.status, 302)
        machine = self.decide(self.deploy, JSON)
        self.assertEqual((machine.status, header(machine, b"www-authenticate")),
                         (401, b"Bearer"))
        # a route for people only: no challenge of a kind it does not take
        self.assertIsNone(header(self.decide(self.people, JSON), b"www-authenticate"))

    def test_a_route_open_to_anyone_still_checks_a_token(self) -> None:
        """A policy that lets anyone in still refuses a bad token: the caller asked to
        be someone, and is not."""
        self.assertRefused(self.decide(self.everyone, bearer(ci_token(aud="other"))),
                           "audience")
        self.assertIsInstance(self.decide(self.everyone, bearer(ci_token())), Allow)


class WhoAmITests(BearerCase):
    def test_the_account_page_shows_who_the_token_is(self) -> None:
        """``/.gateway/`` on a route's host with a bearer token: who the token is to
        that route, its provider named; a refused token gets its 401; no token, the
        usual session page."""
        endpoints = Endpoints(self.identity, self.snapshot.routes)
        page = endpoints.internal(request("/.gateway/", headers=[JSON, bearer(ci_token())]))
        self.assertIsInstance(page, Reply)
        self.assertEqual(page.status, 200)
        doc = json.loads(page.body)
        self.assertEqual((doc["user_id"], doc["identity_provider"]),
                         ("repo:example/app:ref:refs/heads/main", f"github-actions ({CI})"))
        self.assertEqual(doc["claims"]["repository"], ["example/app"])
        self.assertNotIn(b"sign_out", page.body)
        refused = endpoints.internal(request("/.gateway/", headers=[
            JSON, bearer(ci_token(aud="other"))]))
        self.assertRefused(refused, "audience")
        on_people = endpoints.internal(request("/.gateway/", host="people.test",
                                               headers=[JSON, bearer(ci_token())]))
        self.assertNotEqual(getattr(on_people, "status", None), 200)


class ForwardAuthAndSplitTests(BearerCase):
    def test_forward_auth_answers_the_refusal_as_it_is(self) -> None:
        refused = self.decide(self.deploy, bearer(ci_token(aud="other")))
        for mode in (Mode.VERIFY, Mode.CHECK):
            self.assertIs(outcome(mode, refused, [BROWSER]), refused)

    def test_the_token_crosses_to_authorize(self) -> None:
        token = ci_token()
        info = request(headers=[BROWSER, bearer(token), (b"Cookie", b"theme=dark")])
        back = request_from_pb(request_to_pb(info, "_gateway", "key"))
        self.assertIn((b"authorization", f"Bearer {token}".encode()), back.headers)
        self.assertIsInstance(self.identity.decider.authorize(back, self.deploy), Allow)
        two = request(headers=[bearer(token), (b"Authorization", b"Basic eDp5")])
        back = request_from_pb(request_to_pb(two, "_gateway", "key"))
        self.assertRefused(self.identity.decider.authorize(back, self.deploy), "malformed")


class ForwardAuthWireTests(SynchronousTestCase):
    """Forward auth through the HTTP/1.1 codec with the identity layer and a bearer
    provider: the same decision, answered to the proxy: 200 with the identity headers,
    and a refusal's 401 with its WWW-Authenticate in every mode (never the sign-in
    redirect a check request without a session gets)."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(time.time())  # (the identity layer's clock is the wall's)
        snapshot = load(base_config(
            policy=[{"from": "https://app.example.com", "to": "http://127.0.0.1:9",
                     "identity_providers": ["github-actions"], "policy": [DEPLOY],
                     "pass_identity_headers": True}],
            identity_providers=PROVIDERS[:1],
            **{**IDENTITY, "authenticate_service_url": "https://auth.example.com"},
            forward_auth_url="https://fwd.example.com", jwt_claims_headers={"x-idp": "idp"},
            shared_secret=base64.b64encode(b"s" * 32).decode(),
            cookie_secret=base64.b64encode(b"c" * 32).decode()))
        keys = FakeKeys("github-actions", (rsa_key(), "ci-1"))
        verifier = Verifier(BearerExpectations("github-actions", CI, (AUDIENCE,)), keys,
                            self.reactor.seconds)
        records = MemoryRecordStore(self.reactor.seconds)
        store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
        self.holder = IdentityHolder(self.reactor, snapshot, SimpleNamespace(
            sessions=store, directory=None, ends=None, store=records),
            lambda _: {"github-actions": verifier})
        self.core = ProxyCore(self.reactor, build_plan(snapshot), tls=False,
                              authorizer=self.holder)

    get = test_forward_auth.WireTests.get  # through the codec, nothing proxied

    def token(self, **claims: Any) -> str:
        return mint(rsa_key(), "ci-1", now=self.reactor.seconds(),
                    **{"iss": CI, "aud": AUDIENCE, **claims})

    def test_bearer_tokens_through_forward_auth(self) -> None:
        ok = bearer(self.token())
        for target, headers in (("/verify?uri=https://app.example.com/x", [ok]),
                                ("/", [ok, *test_forward_auth.forwarded()])):
            status, answer, _ = self.get(target, headers)
            self.assertEqual(status, 200, target)
            self.assertEqual(answer["x-idp"], ["github-actions"])
        refused = bearer(self.token(aud="other"))
        for target, headers in (("/verify?uri=https://app.example.com/x", [refused]),
                                ("/", [refused, *test_forward_auth.forwarded()])):
            status, answer, _ = self.get(target, headers)
            self.assertEqual(status, 401, target)
            self.assertNotIn("location", answer)
            self.assertTrue(answer["www-authenticate"][0].startswith(
                'Bearer error="invalid_token"'), answer)
        status, _, _ = self.get("/", [bearer(self.token(ref="refs/heads/dev")),
                                      *test_forward_auth.forwarded()])
        self.assertEqual(status, 403)
