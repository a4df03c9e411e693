"""The upstream token vault in the gateway's own request path, in process: the
authorizer (``IdentityHolder.authorize``) gives an allowed request on a route with
``mcp.upstream_oauth2`` the person's upstream token and drops the client's, answers 401
to a person with none, leaves other routes alone; ``/.gateway/mcp/connect/callback``
refuses an unknown state, a request without a session and another session's state, and
sends the person on once the code became tokens (the upstream's token endpoint an
in-memory resource). And the route field's validation, naming each key."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

from treq.testing import StubTreq
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Request

from gateway.authenticate.holder import IdentityHolder
from gateway.authorize.hook import Allow, Reply
from gateway.config.errors import Problems
from gateway.config.mcp_upstream import UpstreamOAuth2, parse_upstream_oauth2
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import MCP_UPSTREAM_TOKEN
from gateway.databroker.session_records import RecordSessionStore
from gateway.mcp_oauth.authorize_request import AuthorizeAsk
from gateway.mcp_oauth.pkce import s256
from gateway.mcp_oauth.resources import resource_of
from gateway.mcp_oauth.upstream import CALLBACK_PATH
from gateway.mcp_oauth.upstream.tokens import UpstreamTokens, token_id, write_tokens
from gateway.mcp_oauth.upstream.vault import route_key
from gateway.sessions.model import Session

from .test_identity import ALICE, cookie_header, header, location, query_of, request, snapshot

MCP = "mcp.test"
UPSTREAM = {"client_id": "gw", "client_secret": "s3cret",
            "authorization_url": "https://upstream.example/authorize",
            "token_url": "https://upstream.example/token", "scopes": ["tickets.read"]}
CONTINUE = f"https://{MCP}/.gateway/mcp/authorize?resume=1"


class TokenEndpoint(Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[bytes, list[bytes]]] = []
        self.broken = False

    def render_POST(self, request: Request) -> bytes:
        self.forms.append(dict(request.args))
        if self.broken:
            request.setResponseCode(502)
            return b"<html>bad gateway</html>"
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"access_token": "upstream-token-1", "token_type": "Bearer",
                           "expires_in": 300, "refresh_token": "r1"}).encode()


class VaultWiringTests(SynchronousTestCase):
    def setUp(self) -> None:
        # (the holder's identity reads the real clock: sessions and tokens are made now)
        self.reactor = MemoryReactorClock()
        self.reactor.advance(time.time())
        now = self.reactor.seconds()
        self.snapshot = snapshot(policy=[
            {"from": f"https://{MCP}", "to": "http://127.0.0.1:9",
             "allow_any_authenticated_user": True, "mcp": {"upstream_oauth2": UPSTREAM}},
            {"from": "https://app.test", "to": "http://127.0.0.1:9",
             "allow_any_authenticated_user": True}])
        self.records = MemoryRecordStore(self.reactor.seconds)
        store = RecordSessionStore(self.records, ChangeFollower(None, self.records),
                                   complete=True)
        self.holder = IdentityHolder(self.reactor, self.snapshot, SimpleNamespace(  # type: ignore[arg-type]
            sessions=store, directory=None, ends=None, store=self.records))
        self.mcp, self.app = self.snapshot.routes
        self.session = self.holder.identity.new_session(dict(ALICE), "idtoken", "access", "",
                                                        now + 3600)
        self.cookie = cookie_header([v for _, v in
                                     self.holder.identity.session_cookie(self.session)])
        self.tokens = TokenEndpoint()
        self.http = StubTreq(self.tokens)
        self.holder.vault.http = self.http
        self.access = self.mcp_token()

    def mcp_token(self) -> str:
        """An MCP client's access token for the route, as the token endpoint issues it
        (the authorization server's own grants, this session behind it)."""
        verifier = "v" * 50
        resource = resource_of(self.mcp, "https", MCP)
        ask = AuthorizeAsk("https://client.test/c.json", "http://127.0.0.1:3000/cb",
                           s256(verifier), resource, "st", "")
        grants = self.holder.grants
        # the person's consent first, as the consent page records it (a code issued
        # without one is never redeemed)
        self.successResultOf(ensureDeferred(grants.remember(
            self.session, ask.client_id, "Test client", resource)))
        code = self.successResultOf(ensureDeferred(grants.issue_code(ask, self.session)))

        async def session_of(_: str) -> Session:
            return self.session

        issued = self.successResultOf(ensureDeferred(grants.redeem(
            code, ask.client_id, ask.redirect_uri, verifier, resource, session_of)))
        return issued.access_token

    def decide(self, host: str = MCP, headers: list[tuple[bytes, bytes]] | None = None) -> Any:
        route = self.mcp if host == MCP else self.app
        decision = self.holder.authorize(request("/mcp", host=host, headers=[
            self.cookie, (b"authorization", b"Bearer " + self.access.encode()),
            *(headers or [])]), route)
        return self.successResultOf(decision) if isinstance(decision, Deferred) else decision

    def store_tokens(self, access: str, refresh: str = "", lifetime: float = 300) -> None:
        upstream = self.mcp.mcp.upstream_oauth2
        assert upstream is not None
        rid = token_id(route_key(self.mcp), upstream, self.session.provider,
                       self.session.user_id)
        self.successResultOf(Deferred.fromCoroutine(write_tokens(
            self.records, self.holder.vault.cipher, rid,
            UpstreamTokens(access, refresh, self.reactor.seconds() + lifetime),
            self.reactor.seconds())))

    def test_person_without_tokens_gets_401(self) -> None:
        decision = self.decide()
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 401)
        self.assertIn(b"invalid_token", header(decision, b"www-authenticate") or b"")
        self.assertEqual(decision.user_id, "alice-id")

    def test_allowed_request_carries_the_upstream_token_not_the_clients(self) -> None:
        self.store_tokens("upstream-token-0")
        decision = self.decide()
        self.assertIsInstance(decision, Allow)
        self.assertEqual(header(decision, b"authorization"), b"Bearer upstream-token-0")
        self.assertIn(b"authorization", decision.remove)
        self.assertIn(b"authorization: Bearer upstream-token-0\r\n", decision.head)

    def test_an_upstream_that_cannot_refresh_answers_503(self) -> None:
        """A due token whose refresh cannot be done now (the token endpoint answers
        nonsense): 503, the tokens kept for the next try."""
        self.store_tokens("upstream-token-0", refresh="r0", lifetime=10)  # due
        self.tokens.broken = True
        decision = self.holder.authorize(request("/mcp", host=MCP, headers=[
            (b"authorization", b"Bearer " + self.access.encode())]), self.mcp)
        assert isinstance(decision, Deferred)
        self.http.flush()
        decision = self.successResultOf(decision)
        self.assertEqual((decision.status, decision.reason), (503, "mcp-upstream-unavailable"))
        self.assertEqual([f[b"grant_type"] for f in self.tokens.forms], [[b"refresh_token"]])
        self.assertEqual(len(self.successResultOf(self.records.query(MCP_UPSTREAM_TOKEN))), 1)
        self.tokens.broken = False
        decision = self.holder.authorize(request("/mcp", host=MCP, headers=[
            (b"authorization", b"Bearer " + self.access.encode())]), self.mcp)
        assert isinstance(decision, Deferred)
        self.http.flush()
        self.assertEqual(header(self.successResultOf(decision), b"authorization"),
                         b"Bearer upstream-token-1")

    def test_the_same_sub_at_another_provider_is_another_person(self) -> None:
        """Security review: the vault's record was keyed by the user id alone, so on a
        route that accepts two identity providers, someone whose ``sub`` at provider B
        equals the victim's ``sub`` at provider A got the victim's upstream token. Keyed
        by (provider, user id) now, as sessions and MCP grants are."""
        self.store_tokens("victims-upstream-token")  # alice-id at the session's provider
        alice = self.decide()
        assert isinstance(alice, Allow) and alice.caller is not None
        self.assertEqual(header(alice, b"authorization"), b"Bearer victims-upstream-token")
        other = replace(alice.caller, provider="other-idp", session_id="s-b")
        self.assertNotEqual(other.provider, alice.caller.provider)
        decision = self.holder.vault.decorate(replace(alice, caller=other), self.mcp)
        decision = self.successResultOf(decision) if isinstance(decision, Deferred) \
            else decision
        self.assertIsInstance(decision, Reply)
        self.assertEqual((decision.status, decision.reason),
                         (401, "mcp-upstream-not-connected"))
        # and a connect started by the other provider's person is not the victim's
        url = self.successResultOf(self.holder.vault.connect_step(
            self.mcp, "other-idp", self.session.user_id, "s-b", CONTINUE,
            f"https://{MCP}{CALLBACK_PATH}"))
        self.assertIsNotNone(url)
        self.assertIsNone(self.successResultOf(self.holder.vault.connect_step(
            self.mcp, self.session.provider, self.session.user_id, self.session.id,
            CONTINUE, f"https://{MCP}{CALLBACK_PATH}")))

    def test_other_routes_are_left_alone(self) -> None:
        self.store_tokens("upstream-token-0")
        decision = self.decide("app.test")
        self.assertIsInstance(decision, Allow)
        self.assertIsNone(header(decision, b"authorization"))

    def callback(self, query: dict[str, str], signed_in: bool = True) -> Any:
        decision = self.holder.internal(request(
            CALLBACK_PATH, urlencode(query), host=MCP,
            headers=[self.cookie] if signed_in else None))
        assert decision is not None
        if isinstance(decision, Deferred):
            self.http.flush()  # the in-memory token endpoint answers
            return self.successResultOf(decision)
        return decision

    def start(self, session_id: str = "") -> dict[str, str]:
        url = self.successResultOf(self.holder.vault.connect_step(
            self.mcp, self.session.provider, self.session.user_id,
            session_id or self.session.id, CONTINUE,
            f"https://{MCP}{CALLBACK_PATH}"))
        assert url is not None
        self.assertTrue(url.startswith("https://upstream.example/authorize?"))
        query = query_of(url)
        self.assertEqual((query["client_id"], query["code_challenge_method"], query["scope"]),
                         ("gw", "S256", "tickets.read"))
        return query

    def test_callback_stores_tokens_and_goes_on(self) -> None:
        state = self.start()["state"]
        decision = self.callback({"state": state, "code": "the-code"})
        self.assertEqual((decision.status, location(decision)), (302, CONTINUE))
        (form,) = self.tokens.forms
        self.assertEqual((form[b"grant_type"], form[b"code"]),
                         ([b"authorization_code"], [b"the-code"]))
        self.assertEqual(len(form[b"code_verifier"][0]), 64)
        self.assertEqual(header(self.decide(), b"authorization"), b"Bearer upstream-token-1")

    def test_callback_refusals(self) -> None:
        for query, signed_in, status, text in (
            ({"state": "bogus", "code": "x"}, True, 400, b"unknown, used or expired"),
            ({"state": "bogus", "code": "x"}, False, 401, b"session ended"),
        ):
            decision = self.callback(query, signed_in)
            self.assertEqual(decision.status, status, query)
            self.assertIn(text, decision.body)
        state = self.start(session_id="someone-elses-session")["state"]
        decision = self.callback({"state": state, "code": "x"})
        self.assertEqual(decision.status, 400)
        self.assertIn(b"another session", decision.body)
        state = self.start()["state"]
        decision = self.callback({"state": state, "error": "access_denied"})
        self.assertIn(b"access_denied", decision.body)
        self.assertEqual(self.tokens.forms, [])
        self.assertEqual(self.successResultOf(self.records.query(MCP_UPSTREAM_TOKEN)), [])


class UpstreamFieldTests(SynchronousTestCase):
    def test_good(self) -> None:
        problems = Problems()
        self.assertEqual(parse_upstream_oauth2(UPSTREAM, "p", problems), UpstreamOAuth2(
            "gw", "s3cret", "https://upstream.example/authorize",
            "https://upstream.example/token", ("tickets.read",)))
        local = {**UPSTREAM, "token_url": "http://127.0.0.1:9000/token", "scopes": "a b"}
        self.assertEqual(parse_upstream_oauth2(local, "p", problems).scopes,  # type: ignore[union-attr]
                         ("a", "b"))
        self.assertEqual(problems.errors, [])

    def test_each_problem_names_its_key(self) -> None:
        for value, where in (
            ("yes", "p"), ({**UPSTREAM, "extra": 1}, "p.extra"),
            ({**UPSTREAM, "client_id": ""}, "p.client_id"),
            ({k: v for k, v in UPSTREAM.items() if k != "client_secret"}, "p.client_secret"),
            ({**UPSTREAM, "token_url": "http://upstream.example/token"}, "p.token_url"),
            ({**UPSTREAM, "authorization_url": "ftp://x/a"}, "p.authorization_url"),
            ({**UPSTREAM, "token_url": "https://u@x/t"}, "p.token_url"),
            ({**UPSTREAM, "scopes": [1]}, "p.scopes"),
        ):
            problems = Problems()
            parse_upstream_oauth2(value, "p", problems)
            self.assertIn(where, [e.path for e in problems.errors], value)
