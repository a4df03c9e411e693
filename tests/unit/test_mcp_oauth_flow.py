"""The MCP authorization server and resource server in process, over the memory
databroker and a fake client directory: discovery from the 401, authorize with sign-in
and consent, the code, the token, the call, refresh with rotation, and every way a
token stops working (reuse, replay, sign-out, back-channel logout, expiry, revocation,
a revoked consent); the adversarial rows (a token of route A on route B, no
``resource``, PKCE plain or missing, a replayed code, a reused refresh token, a
redirect URI the client did not list)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred, fail, succeed
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.mcp_people import McpPeople
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import (
    MCP_CODE,
    MCP_GRANT,
    MCP_TOKEN,
    MCP_UPSTREAM_CONNECT,
    StorageUnavailable,
)
from gateway.databroker.session_ends import SessionEnds
from gateway.databroker.session_records import RecordSessionStore
from gateway.mcp.messages import McpCall, McpRequest
from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.grants import Grants
from gateway.mcp_oauth.resource_server import McpResourceServer
from gateway.mcp_oauth.server import McpAuthorizationServer, allowed_clients
from gateway.mcp_oauth.upstream import CALLBACK_PATH, UpstreamVault, route_key
from gateway.mcp_oauth.upstream.tokens import (
    UpstreamTokens,
    take_connect,
    token_id,
    write_tokens,
)
from gateway.rpc.authorize_wire import request_from_pb, request_to_pb
from gateway.sessions.model import Session

from .config.helpers import IDENTITY, base_config, load
from .test_identity import ALICE, BOB, BROWSER, NOW, Clock, cookie_header, form_of

HOST = "mcp.test"
A = f"https://{HOST}/a"
B = f"https://{HOST}/b"
CLIENT = "https://client.example/meta.json"
REDIRECT = "http://127.0.0.1:7777/callback"
WEB_REDIRECT = "https://client.example/callback"
VERIFIER = "test-client-verifier-" + "v" * 30
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()
                                     ).rstrip(b"=").decode()
JSON_ACCEPT = (b"Accept", b"application/json")


class FakeClients:
    """The client directory: one known client with one redirect URI."""

    def __init__(self) -> None:
        self.known = {CLIENT: McpClient(CLIENT, "Test Client", (REDIRECT, WEB_REDIRECT),
                                        "metadata_document")}

    def resolve(self, client_id: str) -> Deferred[McpClient]:
        client = self.known.get(client_id)
        if client is None:
            return fail(ClientRefused("invalid_client", "no such client"))
        return succeed(client)

    def check_redirect_uri(self, client: McpClient, redirect_uri: str) -> str | None:
        return None if redirect_uri in client.redirect_uris else "not one it lists"

    def register(self, metadata: Any, peer: str) -> Deferred[McpClient]:
        if metadata.get("client_name") == "store down":
            return fail(StorageUnavailable("redis: timed out"))
        if metadata.get("client_name") == "refuse me":
            return fail(ClientRefused("invalid_redirect_uri", "javascript: is no scheme"))
        client = McpClient("reg-1", str(metadata.get("client_name")),
                           tuple(metadata.get("redirect_uris", ())), "registered")
        self.known[client.client_id] = client
        return succeed(client)


def snapshot() -> Any:
    policy = [
        {"from": f"https://{HOST}", "prefix": "/a", "to": "http://127.0.0.1:9", "mcp": {},
         "allowed_users": ["alice@example.com"], "pass_identity_headers": True},
        {"from": f"https://{HOST}", "prefix": "/b", "to": "http://127.0.0.1:9", "mcp": {},
         "allowed_users": ["alice@example.com"]},
        {"from": "https://app.test", "to": "http://127.0.0.1:9",
         "allowed_users": ["alice@example.com"]},
        # the issue's shape: a person may call some tools (and so connect and list)
        {"from": f"https://{HOST}", "prefix": "/c", "to": "http://127.0.0.1:9", "mcp": {},
         "policy": [{"allow": {"and": [{"email": {"is": "alice@example.com"}},
                                       {"mcp_tool": {"in": ["search_tickets"]}}]}}]},
    ]
    return load(base_config(**{**IDENTITY, "authenticate_service_url": "https://auth.test"},
                            policy=policy))


def req(path: str, query: str = "", *, method: bytes = b"GET", host: str = HOST,
        headers: list[tuple[bytes, bytes]] | None = None) -> RequestInfo:
    return RequestInfo(method, "https", host, path, query.encode(),
                       list(headers if headers is not None else [BROWSER]), "192.0.2.1")


def header(decision: Any, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in decision.headers if k.lower() == name), "")


def params_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


class McpCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.snapshot = snapshot()
        self.records = MemoryRecordStore(self.clock)
        self.follower = follower = ChangeFollower(MemoryReactorClock(), self.records)
        self.store = RecordSessionStore(self.records, follower, complete=True)
        self.ends = SessionEnds(self.store, follower)
        signer = AssertionSigner(None, "ES256", "auth.test", clock=self.clock)
        self.grants = Grants(self.records, None, self.clock)
        self.tokens = McpResourceServer(self.grants, follower, self.clock)
        self.identity = Identity(None, self.snapshot, self.store, signer, self.clock,
                                 mcp=self.tokens, mcp_consents=lambda s, c: allowed_clients(
                                     self.grants, s, c))
        self.identity.clients.clients.pop("default", None)
        self.clients = FakeClients()
        self.server = McpAuthorizationServer(
            self.snapshot.routes, self.grants, self.clients, McpPeople(self.identity),
            self.identity.shared, self.clock, registration=False)
        self.endpoints = Endpoints(self.identity, self.snapshot.routes, self.records,
                                   None, self.server)
        self.route_a, self.route_b, self.app, _ = self.snapshot.routes

    # -- helpers

    def done(self, result: Any) -> Any:
        if isinstance(result, Deferred):
            return self.successResultOf(result)
        return result

    def internal(self, request: RequestInfo, body: bytes = b"") -> Any:
        self.assertTrue(self.endpoints.handles(request.host, request.path), request.path)
        return self.done(self.endpoints.internal(request, body))

    def session(self, claims: dict[str, Any] | None = None) -> Session:
        return self.identity.new_session(dict(claims or ALICE), "idtoken", "access", "",
                                         NOW + 3600)

    def cookie(self, session: Session) -> tuple[bytes, bytes]:
        return cookie_header([v for _, v in self.identity.session_cookie(session)])

    def authorize_query(self, **over: str) -> str:
        given = {"client_id": CLIENT, "redirect_uri": REDIRECT, "response_type": "code",
                 "code_challenge": CHALLENGE, "code_challenge_method": "S256",
                 "resource": A, "state": "st-1", "scope": "mcp"}
        given.update(over)
        return urlencode({k: v for k, v in given.items() if v != "-"})

    def authorize(self, session: Session | None, **over: str) -> Any:
        headers = [BROWSER] + ([self.cookie(session)] if session is not None else [])
        return self.internal(req("/.gateway/mcp/authorize", self.authorize_query(**over),
                                 headers=headers))

    def consent(self, session: Session, page: Any, decision: str = "allow") -> Any:
        self.assertEqual(page.status, 200, page.body[:300])
        fields = form_of(page.body).inputs
        fields["decision"] = decision
        return self.internal(req("/.gateway/mcp/consent", method=b"POST", headers=[
            BROWSER, self.cookie(session), (b"Sec-Fetch-Site", b"same-origin")]),
            urlencode(fields).encode())

    def code(self, session: Session, **over: str) -> str:
        answer = self.authorize(session, **over)
        if answer.status == 200:
            answer = self.consent(session, answer)
        self.assertIn(answer.status, (302, 303), answer.body[:300])
        got = params_of(header(answer, b"location"))
        self.assertEqual(got["state"], over.get("state", "st-1"))
        self.assertEqual(got["iss"], f"https://{HOST}")
        return got["code"]

    def token(self, **given: str) -> tuple[int, dict[str, Any]]:
        answer = self.internal(req("/.gateway/mcp/token", method=b"POST",
                                   headers=[JSON_ACCEPT]), urlencode(given).encode())
        return answer.status, json.loads(answer.body) if answer.body else {}

    def redeem(self, code: str, **over: str) -> tuple[int, dict[str, Any]]:
        given = {"grant_type": "authorization_code", "code": code, "client_id": CLIENT,
                 "redirect_uri": REDIRECT, "code_verifier": VERIFIER, "resource": A}
        given.update(over)
        return self.token(**{k: v for k, v in given.items() if v != "-"})

    def refresh(self, refresh_token: str) -> tuple[int, dict[str, Any]]:
        return self.token(grant_type="refresh_token", refresh_token=refresh_token,
                          client_id=CLIENT, resource=A)

    def tokens_for(self, session: Session) -> dict[str, Any]:
        status, body = self.redeem(self.code(session))
        self.assertEqual(status, 200, body)
        return body

    def call(self, access: str | None, route: Any = None, path: str = "/a/mcp",
             extra: list[tuple[bytes, bytes]] | None = None) -> Any:
        headers = [JSON_ACCEPT] + ([(b"Authorization", f"Bearer {access}".encode())]
                                   if access else []) + (extra or [])
        return self.done(self.identity.decider.authorize(
            req(path, method=b"POST", headers=headers), route or self.route_a))

    def assertInvalidToken(self, decision: Any) -> None:
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 401, decision.body)
        challenge = header(decision, b"www-authenticate")
        self.assertIn('error="invalid_token"', challenge)
        self.assertIn('resource_metadata="https://mcp.test/.well-known/'
                      'oauth-protected-resource/', challenge)


class DiscoveryTests(McpCase):
    def test_metadata_documents(self) -> None:
        prm = self.internal(req("/.well-known/oauth-protected-resource/a"))
        self.assertEqual(prm.status, 200)
        self.assertEqual(json.loads(prm.body)["resource"], A)
        self.assertEqual(json.loads(prm.body)["authorization_servers"], [f"https://{HOST}"])
        for path in ("/.well-known/oauth-authorization-server",
                     "/.well-known/openid-configuration"):
            doc = json.loads(self.internal(req(path)).body)
            self.assertEqual(doc["issuer"], f"https://{HOST}")
            self.assertEqual(doc["code_challenge_methods_supported"], ["S256"])
            self.assertNotIn("registration_endpoint", doc)
        self.assertEqual(self.internal(req("/.well-known/oauth-protected-resource")).status,
                         404)  # no MCP route on / of this host
        # read by browser-based clients too: no cookie involved
        self.assertEqual(header(prm, b"access-control-allow-origin"), "*")
        preflight = self.internal(req("/.gateway/mcp/token", method=b"OPTIONS", headers=[
            (b"Origin", b"https://client.example"),
            (b"Access-Control-Request-Method", b"POST")]))
        self.assertEqual(preflight.status, 204)
        self.assertIn("POST", header(preflight, b"access-control-allow-methods"))
        # another host's /.well-known/ is its route's
        self.assertFalse(self.endpoints.handles("app.test",
                                                "/.well-known/oauth-authorization-server"))

    def test_no_token_is_the_challenge(self) -> None:
        answer = self.call(None)
        self.assertEqual(answer.status, 401)
        self.assertEqual(header(answer, b"www-authenticate"),
                         'Bearer resource_metadata="https://mcp.test/.well-known/'
                         'oauth-protected-resource/a", scope="mcp"')
        self.assertEqual(header(answer, b"location"), "")  # never a sign-in redirect
        # a browser's signed-in cookie alone is no credential on an MCP route
        cookie = self.cookie(self.session())
        answer = self.call(None, extra=[cookie, BROWSER])
        self.assertEqual(answer.status, 401)
        self.assertNotIn("error=", header(answer, b"www-authenticate"))

    def test_no_token_refused_by_a_message_is_the_challenge(self) -> None:
        """A policy that lets no one in for some messages only: a message it refuses,
        sent without a token, is answered the challenge (not the sign-in answer), with
        the messages' verdicts kept for the audit."""
        snap = load(base_config(**{**IDENTITY, "authenticate_service_url": "https://auth.test"},
                                policy=[{"from": f"https://{HOST}", "to": "http://127.0.0.1:9",
                                         "mcp": {}, "policy": [
                                             {"allow": {"and": [{"accept": True}]}},
                                             {"deny": {"and": [{"mcp_tool": {"is": "drop"}}]}}]}]))
        identity = Identity(None, snap, self.store, AssertionSigner(None, "ES256", "auth.test",
                            clock=self.clock), self.clock, mcp=self.tokens)
        route = snap.routes[0]
        for name, allowed in (("search", True), ("drop", False)):
            info = req("/mcp", method=b"POST", headers=[BROWSER])
            info.mcp = McpRequest((McpCall(1, "tools/call", name),))
            decision = self.done(identity.decider.authorize(info, route))
            self.assertEqual(isinstance(decision, Allow), allowed, name)
            if not allowed:
                self.assertEqual(decision.status, 401)
                self.assertIn("resource_metadata=", header(decision, b"www-authenticate"))
                self.assertEqual(header(decision, b"location"), "")
                self.assertEqual([v.allowed for v in decision.mcp], [False])

    def test_bad_tokens(self) -> None:
        for token in ("nonsense", "gwmcp_at_" + "A" * 43, "Gateway-xyz"):
            self.assertInvalidToken(self.call(token))
        basic = self.call(None, extra=[(b"Authorization", b"Basic dTpw")])
        self.assertInvalidToken(basic)


class FlowTests(McpCase):
    def test_whole_flow(self) -> None:
        # not signed in: the gateway's sign-in, returning to this very request
        answer = self.authorize(None)
        self.assertEqual(answer.status, 302)
        self.assertTrue(header(answer, b"location").startswith(
            "https://auth.test/.gateway/sign_in?"))
        alice = self.session()
        page = self.authorize(alice)
        self.assertEqual(page.status, 200)
        text = page.body.decode()
        for shown in ("Test Client", CLIENT, "127.0.0.1", A, "alice@example.com"):
            self.assertIn(shown, text)
        self.assertIn("http://127.0.0.1:7777", header(page, b"content-security-policy"))
        answer = self.consent(alice, page)
        self.assertEqual(answer.status, 303)
        got = params_of(header(answer, b"location"))
        self.assertEqual(header(answer, b"location").split("?")[0], REDIRECT)
        status, body = self.redeem(got["code"])
        self.assertEqual(status, 200, body)
        self.assertEqual(body["token_type"], "Bearer")
        self.assertEqual(body["scope"], "mcp")
        self.assertEqual(body["expires_in"], 300)
        self.assertTrue(body["access_token"].startswith("gwmcp_at_"))
        self.assertTrue(body["refresh_token"].startswith("gwmcp_rt_"))
        allowed = self.call(body["access_token"])
        self.assertIsInstance(allowed, Allow)
        self.assertEqual(allowed.caller.client_id, CLIENT)
        self.assertEqual(allowed.caller.email, "alice@example.com")
        self.assertIn(b"authorization", allowed.remove)  # the token never goes upstream
        self.assertIn(b"x-gateway-jwt-assertion", dict(allowed.headers))
        # stored hashed only
        raw = b"".join(r.data for t in (MCP_TOKEN, MCP_GRANT, MCP_CODE)
                       for r in self.successResultOf(self.records.query(t)))
        for secret in (body["access_token"], body["refresh_token"], got["code"]):
            self.assertNotIn(secret.encode(), raw)
            self.assertNotIn(secret[9:].encode(), raw)
        # consent remembered: the next authorization to an https redirect URI goes
        # straight to the code; to a loopback one (any program on the computer could
        # listen there) the person is asked again
        again = self.authorize(alice, state="st-2", redirect_uri=WEB_REDIRECT)
        self.assertEqual(again.status, 302)
        self.assertIn("code", params_of(header(again, b"location")))
        asked = self.authorize(alice, state="st-3")
        self.assertEqual(asked.status, 200)
        self.assertIn(b"You allowed this client before", asked.body)

    def test_refresh_rotates_and_reuse_ends_the_grant(self) -> None:
        first = self.tokens_for(self.session())
        status, second = self.refresh(first["refresh_token"])
        self.assertEqual(status, 200, second)
        self.assertNotEqual(second["refresh_token"], first["refresh_token"])
        self.assertIsInstance(self.call(second["access_token"]), Allow)
        status, reused = self.refresh(first["refresh_token"])
        self.assertEqual((status, reused["error"]), (400, "invalid_grant"))
        # the whole grant ended: the newest tokens too
        self.assertInvalidToken(self.call(second["access_token"]))
        self.assertInvalidToken(self.call(first["access_token"]))
        self.assertEqual(self.refresh(second["refresh_token"])[1]["error"], "invalid_grant")

    def test_rotated_refresh_token_refused_without_the_lease(self) -> None:
        """A spent refresh token is known by the grant naming its successor, not only by
        the store's once-lease (a Redis that lost its leases in a failover)."""
        first = self.tokens_for(self.session())
        status, second = self.refresh(first["refresh_token"])
        self.assertEqual(status, 200)
        self.records._leases.clear()
        self.assertEqual(self.refresh(first["refresh_token"])[1]["error"], "invalid_grant")
        self.assertInvalidToken(self.call(second["access_token"]))

    def test_two_uses_at_once(self) -> None:
        """Two token requests with one refresh token at the same moment (two processes,
        each having read the grant before either wrote): the store's lease lets one
        through, and the other is a reuse that ends the grant."""
        first = self.tokens_for(self.session())
        held: list[Deferred[Any]] = []
        real_get = self.records.get

        def slow_get(type: str, id: str) -> Deferred[Any]:
            if type != MCP_GRANT:
                return real_get(type, id)
            read = self.successResultOf(real_get(type, id))  # read now, answered later
            gate: Deferred[Any] = Deferred()
            held.append(gate)
            return gate.addCallback(lambda _: read)

        self.records.get = slow_get  # type: ignore[method-assign]
        given = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"],
                 "client_id": CLIENT, "resource": A}
        answers = [self.endpoints.internal(req("/.gateway/mcp/token", method=b"POST"),
                                           urlencode(given).encode()) for _ in range(2)]
        self.assertEqual(len(held), 2)  # both read the grant before either went on
        while held:
            held.pop(0).callback(None)
        self.records.get = real_get  # type: ignore[method-assign]
        replies = [self.successResultOf(a) for a in answers]
        self.assertEqual(sorted(r.status for r in replies), [200, 400])
        won = next(json.loads(r.body) for r in replies if r.status == 200)
        self.assertInvalidToken(self.call(won["access_token"]))

    def test_token_expires(self) -> None:
        body = self.tokens_for(self.session())
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        self.clock.now += 301
        self.assertInvalidToken(self.call(body["access_token"]))
        status, fresh = self.refresh(body["refresh_token"])
        self.assertEqual(status, 200, fresh)
        self.assertIsInstance(self.call(fresh["access_token"]), Allow)

    def test_admission_and_denial(self) -> None:
        bob = self.session(BOB)
        answer = self.authorize(bob)
        self.assertEqual(answer.status, 302)
        got = params_of(header(answer, b"location"))
        self.assertEqual(got["error"], "access_denied")
        self.assertEqual(got["iss"], f"https://{HOST}")
        alice = self.session()
        denied = self.consent(alice, self.authorize(alice), decision="deny")
        self.assertEqual(params_of(header(denied, b"location"))["error"], "access_denied")

    def test_an_allow_list_of_tools_admits_the_person(self) -> None:
        """Regression: admission decided a GET without its MCP message, for which
        ``mcp_tool`` is false, so a route allowing some tools admitted nobody (the
        data plane decides that GET as the message of method "", which it admits)."""
        page = self.authorize(self.session(), resource=f"https://{HOST}/c")
        self.assertEqual(page.status, 200, page.body[:300])
        denied = self.authorize(self.session(BOB), resource=f"https://{HOST}/c")
        self.assertEqual(params_of(header(denied, b"location"))["error"], "access_denied")

    def test_consent_form_bound_to_the_session(self) -> None:
        alice = self.session()
        page = self.authorize(alice)
        other = self.session(dict(ALICE))  # alice again, another sign-in
        answer = self.consent(other, page)
        self.assertEqual(answer.status, 400)
        self.assertEqual(header(answer, b"location"), "")
        fields = form_of(page.body).inputs
        fields.pop("csrf")
        answer = self.internal(req("/.gateway/mcp/consent", method=b"POST", headers=[
            BROWSER, self.cookie(alice), (b"Sec-Fetch-Site", b"same-origin")]),
            urlencode(fields).encode())
        self.assertEqual(answer.status, 400)
        # from another site: the gateway's forms rule
        fields = form_of(page.body).inputs
        answer = self.internal(req("/.gateway/mcp/consent", method=b"POST", headers=[
            BROWSER, self.cookie(alice), (b"Sec-Fetch-Site", b"cross-site")]),
            urlencode(fields).encode())
        self.assertEqual(answer.status, 403)


class AdmissionTests(McpCase):
    """The issue's example policy's shape (by address here: groups need a directory):
    one person may call two tools, another some methods. Both are let in to consent
    (their sessions start with messages the policy allows them); a third is not."""

    def setUp(self) -> None:
        super().setUp()
        policy = [{"from": f"https://{HOST}", "prefix": "/a", "to": "http://127.0.0.1:9",
                   "mcp": {}, "policy": [
                       {"allow": {"and": [{"email": {"is": "alice@example.com"}},
                                          {"mcp_tool": {"in": ["search", "get"]}}]}},
                       {"allow": {"and": [{"email": {"is": "bob@example.com"}},
                                          {"mcp_method": {"in": ["tools/call", "tools/list",
                                                                 "resources/read"]}}]}}]}]
        snap = load(base_config(**{**IDENTITY, "authenticate_service_url": "https://auth.test"},
                                policy=policy))
        self.server = McpAuthorizationServer(
            snap.routes, self.grants, self.clients, McpPeople(self.identity),
            self.identity.shared, self.clock, registration=False)
        self.endpoints = Endpoints(self.identity, snap.routes, self.records, None, self.server)

    def test_admitted_by_any_rule(self) -> None:
        for email, admitted in (("alice@example.com", True), ("bob@example.com", True),
                                ("carol@example.com", False)):
            person = self.session({"sub": email, "email": email, "email_verified": True})
            answer = self.authorize(person)
            self.assertEqual(answer.status, 200 if admitted else 302, email)
            if not admitted:
                self.assertEqual(params_of(header(answer, b"location"))["error"],
                                 "access_denied")


class AdversarialTests(McpCase):
    def test_token_of_route_a_on_route_b(self) -> None:
        body = self.tokens_for(self.session())
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        self.assertInvalidToken(self.call(body["access_token"], self.route_b, "/b/mcp"))

    def test_no_resource(self) -> None:
        answer = self.authorize(self.session(), resource="-")
        got = params_of(header(answer, b"location"))
        self.assertEqual((got["error"], got["state"]), ("invalid_target", "st-1"))
        other = self.authorize(self.session(), resource="https://mcp.test/elsewhere")
        self.assertEqual(params_of(header(other, b"location"))["error"], "invalid_target")
        status, body = self.redeem(self.code(self.session()), resource="-")
        self.assertEqual((status, body["error"]), (400, "invalid_target"))
        status, body = self.redeem(self.code(self.session()), resource=B)
        self.assertEqual((status, body["error"]), (400, "invalid_target"))
        status, body = self.redeem(self.code(self.session()), resource=A + "x")
        self.assertEqual((status, body["error"]), (400, "invalid_target"))

    def test_resource_under_the_route(self) -> None:
        """A client naming its MCP endpoint (a URL under the route's path) gets a token
        for the route's resource, good on the route and nowhere else."""
        code = self.code(self.session(), resource=A + "/mcp")
        status, body = self.redeem(code, resource=A + "/mcp")
        self.assertEqual(status, 200, body)
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        self.assertInvalidToken(self.call(body["access_token"], self.route_b, "/b/mcp"))

    def test_pkce_plain_or_missing(self) -> None:
        alice = self.session()
        for over in ({"code_challenge_method": "plain", "code_challenge": VERIFIER},
                     {"code_challenge_method": "-"}, {"code_challenge": "-"}):
            answer = self.authorize(alice, **over)
            self.assertEqual(answer.status, 302, over)
            self.assertEqual(params_of(header(answer, b"location"))["error"],
                             "invalid_request", over)
        status, body = self.redeem(self.code(alice), code_verifier="x" * 43)
        self.assertEqual((status, body["error"]), (400, "invalid_grant"))
        status, body = self.redeem(self.code(alice), code_verifier="-")
        self.assertEqual((status, body["error"]), (400, "invalid_grant"))

    def test_replayed_code(self) -> None:
        code = self.code(self.session())
        status, body = self.redeem(code)
        self.assertEqual(status, 200)
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        status, again = self.redeem(code)
        self.assertEqual((status, again["error"]), (400, "invalid_grant"))
        # what the code issued is revoked
        self.assertInvalidToken(self.call(body["access_token"]))
        self.assertEqual(self.refresh(body["refresh_token"])[1]["error"], "invalid_grant")

    def test_code_bound_to_client_and_redirect(self) -> None:
        status, body = self.redeem(self.code(self.session()),
                                   redirect_uri="http://127.0.0.1:7777/other")
        self.assertEqual((status, body["error"]), (400, "invalid_grant"))
        status, body = self.redeem(self.code(self.session()), client_id="https://x/y")
        self.assertEqual((status, body["error"]), (400, "invalid_grant"))
        self.clock.now += 61
        status, body = self.redeem(self.code(self.session()))
        self.assertEqual(status, 200)  # (a fresh code is good)
        code = self.code(self.session())
        self.clock.now += 61
        self.assertEqual(self.redeem(code)[1]["error"], "invalid_grant")

    def test_redirect_uri_not_listed_is_a_page(self) -> None:
        for over in ({"redirect_uri": "https://evil.example/cb"},
                     {"redirect_uri": "-"}, {"client_id": "https://unknown/c.json"},
                     {"redirect_uri": "https://evil.example/cb", "resource": "-"}):
            answer = self.authorize(self.session(), **over)
            self.assertEqual(answer.status, 400, over)
            self.assertEqual(header(answer, b"location"), "", over)
        twice = self.internal(req("/.gateway/mcp/authorize", self.authorize_query()
                                  + "&redirect_uri=https%3A%2F%2Fevil.example%2F",
                                  headers=[BROWSER, self.cookie(self.session())]))
        self.assertEqual((twice.status, header(twice, b"location")), (400, ""))

    def test_token_endpoint_shapes(self) -> None:
        self.assertEqual(self.token(grant_type="password", client_id=CLIENT)[1]["error"],
                         "unsupported_grant_type")
        self.assertEqual(self.token(grant_type="refresh_token")[0], 401)
        dup = self.internal(req("/.gateway/mcp/token", method=b"POST"),
                            b"grant_type=refresh_token&client_id=a&client_id=b")
        self.assertEqual(json.loads(dup.body)["error"], "invalid_request")
        get = self.internal(req("/.gateway/mcp/token"))
        self.assertEqual(get.status, 405)
        # a program posts here from anywhere: the forms rule does not apply
        cross = self.internal(req("/.gateway/mcp/token", method=b"POST", headers=[
            (b"Origin", b"https://client.example"), (b"Sec-Fetch-Site", b"cross-site")]),
            b"grant_type=refresh_token&client_id=x&refresh_token=y")
        self.assertEqual(json.loads(cross.body)["error"], "invalid_grant")


class SplitTests(McpCase):
    def test_the_token_crosses_to_authorize(self) -> None:
        """A split proxy sends the MCP token to the authorize service (an opaque
        application token it does not)."""
        body = self.tokens_for(self.session())
        info = req("/a/mcp", method=b"POST", headers=[
            JSON_ACCEPT, (b"Authorization", f"Bearer {body['access_token']}".encode())])
        back = request_from_pb(request_to_pb(info, "_gateway", "key"))
        self.assertIsInstance(self.done(self.identity.decider.authorize(back, self.route_a)),
                              Allow)
        opaque = req("/a/mcp", headers=[(b"Authorization", b"Bearer opaque-app-token")])
        back = request_from_pb(request_to_pb(opaque, "_gateway", "key"))
        self.assertNotIn(b"authorization", [n for n, _ in back.headers])


class RegistrationTests(McpCase):
    def register(self, doc: dict[str, Any]) -> Any:
        return self.internal(req("/.gateway/mcp/register", method=b"POST",
                                 headers=[(b"Content-Type", b"application/json")]),
                             json.dumps(doc).encode())

    def test_off_by_default(self) -> None:
        answer = self.register({"client_name": "x", "redirect_uris": [REDIRECT]})
        self.assertEqual(answer.status, 404)
        self.assertEqual(json.loads(answer.body)["error"], "not_found")

    def test_on_hands_to_the_directory(self) -> None:
        self.server.registration = True
        doc = json.loads(self.internal(req("/.well-known/oauth-authorization-server")).body)
        self.assertEqual(doc["registration_endpoint"], "https://mcp.test/.gateway/mcp/register")
        answer = self.register({"client_name": "Reg", "redirect_uris": [REDIRECT]})
        self.assertEqual(answer.status, 201, answer.body)
        self.assertEqual(json.loads(answer.body)["client_id"], "reg-1")
        self.assertEqual(json.loads(answer.body)["token_endpoint_auth_method"], "none")
        refused = self.register({"client_name": "refuse me"})
        self.assertEqual(json.loads(refused.body)["error"], "invalid_redirect_uri")
        self.assertEqual(self.internal(req("/.gateway/mcp/register", method=b"POST"),
                                       b"[1]").status, 400)
        # the databroker (where registrations are kept) down: 503, not a crash
        down = self.register({"client_name": "store down", "redirect_uris": [REDIRECT]})
        self.assertEqual((down.status, json.loads(down.body)["error"]),
                         (503, "temporarily_unavailable"))
        # registering grants nothing: the person still consents
        page = self.authorize(self.session(), client_id="reg-1")
        self.assertEqual(page.status, 200)
        self.assertIn(b"nothing vouches for its name", page.body)


class UpstreamVaultStepTests(McpCase):
    """A route with ``mcp.upstream_oauth2``: the consent flow sends the person to the
    upstream's authorization server first (once), and comes back to this very
    authorization request. Regression: nothing called the vault's step, so such a route
    answered every request 401 (no person ever had upstream tokens)."""

    UPSTREAM = {"client_id": "gw", "client_secret": "s3cret",
                "authorization_url": "https://upstream.example/authorize",
                "token_url": "https://upstream.example/token", "scopes": ["tickets.read"]}

    def setUp(self) -> None:
        super().setUp()
        policy = [{"from": f"https://{HOST}", "prefix": "/a", "to": "http://127.0.0.1:9",
                   "mcp": {"upstream_oauth2": self.UPSTREAM},
                   "allowed_users": ["alice@example.com"]}]
        snap = load(base_config(**{**IDENTITY, "authenticate_service_url": "https://auth.test"},
                                policy=policy))
        (self.route,) = snap.routes
        self.vault = UpstreamVault(None, self.records, b"s" * 32, clock=self.clock)
        self.server = McpAuthorizationServer(
            snap.routes, self.grants, self.clients, McpPeople(self.identity),
            self.identity.shared, self.clock, registration=False, vault=self.vault)
        self.endpoints = Endpoints(self.identity, snap.routes, self.records, None,
                                   self.server, self.vault)

    def test_upstream_first_then_consent(self) -> None:
        alice = self.session()
        answer = self.authorize(alice)
        self.assertEqual(answer.status, 302, answer.body[:300])
        to = header(answer, b"location")
        self.assertTrue(to.startswith("https://upstream.example/authorize?"), to)
        got = params_of(to)
        self.assertEqual((got["client_id"], got["redirect_uri"], got["code_challenge_method"]),
                         ("gw", f"https://{HOST}{CALLBACK_PATH}", "S256"))
        (pending,) = self.successResultOf(self.records.query(MCP_UPSTREAM_CONNECT))
        self.assertEqual(pending.id, got["state"])
        # the person's tokens stored (as the callback stores them): the same request
        # now goes on to the consent page, and the code
        upstream = self.route.mcp.upstream_oauth2  # type: ignore[union-attr]
        rid = token_id(route_key(self.route), upstream, alice.provider, alice.user_id)
        self.successResultOf(Deferred.fromCoroutine(write_tokens(
            self.records, self.vault.cipher, rid,
            UpstreamTokens("up-1", "", self.clock() + 300), self.clock())))
        page = self.authorize(alice)
        self.assertEqual(page.status, 200, page.body[:300])
        self.assertIn(b"Test Client", page.body)
        self.assertEqual(self.consent(alice, page).status, 303)

    def test_the_callback_continues_at_the_authorization_request(self) -> None:
        alice = self.session()
        state = params_of(header(self.authorize(alice), b"location"))["state"]
        pending = self.successResultOf(Deferred.fromCoroutine(take_connect(
            self.records, self.vault.cipher, state, self.clock())))
        assert pending is not None
        self.assertEqual((pending.provider, pending.user_id, pending.session_id),
                         (alice.provider, alice.user_id, alice.id))
        self.assertEqual(pending.continue_url,
                         f"https://{HOST}/.gateway/mcp/authorize?{self.authorize_query()}")


class EndsTests(McpCase):
    def test_sign_out_ends_tokens(self) -> None:
        alice = self.session()
        body = self.tokens_for(alice)
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        self.store.delete(alice.id)
        self.assertInvalidToken(self.call(body["access_token"]))
        self.assertEqual(self.refresh(body["refresh_token"])[1]["error"], "invalid_grant")

    def test_back_channel_logout_ends_tokens(self) -> None:
        alice = self.session()
        body = self.tokens_for(alice)
        self.successResultOf(self.ends.end([alice.id], "backchannel"))
        self.assertInvalidToken(self.call(body["access_token"]))

    def test_session_expiry_ends_tokens(self) -> None:
        alice = self.identity.new_session(dict(ALICE), "idtoken", "access", "", NOW + 3600)
        body = self.tokens_for(alice)
        self.clock.now = alice.expires_at - 100
        status, fresh = self.refresh(body["refresh_token"])
        self.assertEqual(status, 200)
        self.assertLessEqual(fresh["expires_in"], 100)  # bounded by the session
        self.clock.now = alice.expires_at + 1
        self.assertInvalidToken(self.call(fresh["access_token"]))
        self.assertEqual(self.refresh(fresh["refresh_token"])[1]["error"], "invalid_grant")

    def test_session_shortened_ends_tokens(self) -> None:
        """The session as the store holds it now decides, not the expiry the grant
        copied when it was made (a session record replaced with an earlier end)."""
        alice = self.session()
        body = self.tokens_for(alice)
        self.store.put(replace(alice, expires_at=NOW + 10))
        self.clock.now = NOW + 11
        self.assertInvalidToken(self.call(body["access_token"]))

    def test_provider_tokens_refreshed_as_for_a_browser(self) -> None:
        """The session's tokens at the provider are refreshed when due, as on a browser's
        request; a refresh that fails ends the session, and so the client's token."""
        alice = self.identity.new_session(dict(ALICE), "idtoken", "access", "refresh",
                                          NOW + 100)
        body = self.tokens_for(alice)
        refreshed: list[str] = []

        async def refresh(session: Session) -> Session | None:
            refreshed.append(session.id)
            if len(refreshed) > 1:
                self.store.delete(session.id)
                return None
            renewed = replace(session, token_expires_at=NOW + 200)
            self.store.put(renewed)
            return renewed

        flow: Any = self.identity.flow
        flow.refresh_due = lambda session: session.token_expires_at - 60
        flow.refresh = refresh
        self.clock.now = NOW + 50  # within the grace before the provider's expiry
        self.assertIsInstance(self.call(body["access_token"]), Allow)
        self.assertEqual(refreshed, [alice.id])
        self.assertIsInstance(self.call(body["access_token"]), Allow)  # not due again
        self.assertEqual(len(refreshed), 1)
        self.clock.now = NOW + 150  # due again; this refresh fails
        self.assertInvalidToken(self.call(body["access_token"]))
        self.assertEqual(len(refreshed), 2)

    def test_revocation_endpoint(self) -> None:
        body = self.tokens_for(self.session())
        other = self.internal(req("/.gateway/mcp/revoke", method=b"POST"),
                              urlencode({"token": body["refresh_token"],
                                         "client_id": "https://x/y"}).encode())
        self.assertEqual(other.status, 200)
        self.assertIsInstance(self.call(body["access_token"]), Allow)  # not its client
        answer = self.internal(req("/.gateway/mcp/revoke", method=b"POST"),
                               urlencode({"token": body["refresh_token"],
                                          "client_id": CLIENT}).encode())
        self.assertEqual(answer.status, 200)
        self.assertInvalidToken(self.call(body["access_token"]))
        second = self.tokens_for(self.session())
        self.internal(req("/.gateway/mcp/revoke", method=b"POST"), urlencode(
            {"token": second["access_token"], "client_id": CLIENT}).encode())
        self.assertInvalidToken(self.call(second["access_token"]))
        self.assertEqual(self.refresh(second["refresh_token"])[0], 200)

    def test_consent_listed_and_revoked_on_the_account_page(self) -> None:
        alice = self.session()
        body = self.tokens_for(alice)
        self.assertEqual(self.authorize(alice, redirect_uri=WEB_REDIRECT).status, 302)
        page = self.internal(req("/.gateway/", headers=[BROWSER, self.cookie(alice)]))
        self.assertEqual(page.status, 200)
        self.assertIn(b"Test Client", page.body)
        form = form_of(page.body.split(b"MCP clients you allowed")[1].split(b"</ul>")[0])
        self.assertEqual(form.action, "/.gateway/mcp/consents/revoke")
        answer = self.internal(req(form.action, method=b"POST", headers=[
            BROWSER, self.cookie(alice), (b"Sec-Fetch-Site", b"same-origin")]),
            urlencode(form.inputs).encode())
        self.assertEqual(answer.status, 303)
        self.assertInvalidToken(self.call(body["access_token"]))
        page = self.internal(req("/.gateway/", headers=[BROWSER, self.cookie(alice)]))
        self.assertNotIn(b"Test Client", page.body)
        # and the consent is asked for again
        self.assertEqual(self.authorize(alice, redirect_uri=WEB_REDIRECT).status, 200)


class ConsentRevocationTests(McpCase):
    """Security review (round 4): revoking a consent must end every grant made under
    it. The consent record listed only the newest 100 grants, so the 101st-newest
    outlived the revocation; a code issued before the revocation and redeemed after it
    made a grant listed nowhere; and a consent given again must not revive a grant or
    a code from before the revocation."""

    def revoke(self, session: Session) -> None:
        self.successResultOf(ensureDeferred(self.grants.forget(session.provider,
                                                       session.user_id, CLIENT)))

    def live_codes(self) -> int:
        records = self.successResultOf(self.records.query(MCP_CODE))
        return sum(1 for r in records if not r.deleted)

    def test_revoking_ends_more_grants_than_the_record_lists(self) -> None:
        alice = self.session()
        issued = [self.tokens_for(alice) for _ in range(101)]
        first = issued[0]
        self.assertIsInstance(self.call(first["access_token"]), Allow)  # now cached
        self.revoke(alice)
        self.assertInvalidToken(self.call(first["access_token"]))
        for body in issued:
            status, answer = self.refresh(body["refresh_token"])
            self.assertEqual((status, answer.get("error")), (400, "invalid_grant"))

    def test_revoked_in_another_process_drops_cached_lookups(self) -> None:
        """Another process's revocation reaches this one's cache through the change
        stream (the listed grants' ends drop the cached lookups), and the lookup again
        checks the consent: an unlisted grant's access token is refused at once."""
        alice = self.session()
        issued = [self.tokens_for(alice) for _ in range(101)]
        first = issued[0]["access_token"]
        self.successResultOf(ensureDeferred(self.follower.poll()))  # caught up
        self.assertIsInstance(self.call(first), Allow)  # now cached
        elsewhere = Grants(self.records, None, self.clock)
        self.successResultOf(ensureDeferred(elsewhere.forget(
            alice.provider, alice.user_id, CLIENT)))
        self.successResultOf(ensureDeferred(self.follower.poll()))  # the change stream
        self.assertInvalidToken(self.call(first))

    def test_code_issued_before_revocation_refused(self) -> None:
        alice = self.session()
        code = self.code(alice)
        self.revoke(alice)
        status, body = self.redeem(code)
        self.assertEqual((status, body.get("error")), (400, "invalid_grant"), body)

    def test_revoke_then_consent_again_revives_nothing(self) -> None:
        alice = self.session()
        old = self.tokens_for(alice)
        old_code = self.code(alice)
        self.revoke(alice)
        new = self.tokens_for(alice)  # the consent page again, allowed
        self.assertEqual(self.redeem(old_code)[1].get("error"), "invalid_grant")
        self.assertEqual(self.refresh(old["refresh_token"])[1].get("error"),
                         "invalid_grant")
        self.assertInvalidToken(self.call(old["access_token"]))
        self.assertIsInstance(self.call(new["access_token"]), Allow)
        status, fresh = self.refresh(new["refresh_token"])
        self.assertEqual(status, 200, fresh)
        self.assertIsInstance(self.call(fresh["access_token"]), Allow)

    def test_head_of_authorize_issues_no_code(self) -> None:
        """HEAD must be safe: with a remembered consent and an https redirect URI a GET
        issues a code at once; a HEAD did too."""
        alice = self.session()
        self.code(alice, redirect_uri=WEB_REDIRECT)  # consent remembered
        before = self.live_codes()
        answer = self.internal(req("/.gateway/mcp/authorize", self.authorize_query(
            redirect_uri=WEB_REDIRECT), method=b"HEAD",
            headers=[BROWSER, self.cookie(alice)]))
        self.assertEqual(answer.status, 405)
        self.assertEqual(header(answer, b"allow"), "GET")
        self.assertNotIn("code=", header(answer, b"location"))
        self.assertEqual(self.live_codes(),
                         before)
        self.assertEqual(self.authorize(alice, redirect_uri=WEB_REDIRECT).status, 302)
