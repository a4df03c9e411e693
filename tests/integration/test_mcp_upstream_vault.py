"""The upstream token vault of an MCP route (``mcp.upstream_oauth2``) with a real
oidc-provider as the upstream's authorization server: the person authorizes it once
(the provider's login and consent pages, a test browser), the callback stores the
tokens sealed in the databroker for that person's session only, an allowed request's
decision carries the person's access token (the provider's userinfo accepts it) and
drops the client's, a due token is refreshed (rotated), a revoked one sends the person
back to authorize, someone who never authorized gets 401. And the whole way through
the daemon: an MCP client's authorization sends the person to the upstream once, and a
tool call reaches the MCP server with the person's upstream token."""

from __future__ import annotations

import base64
import contextlib
import json
import tempfile
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Allow, Reply
from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.routes import Route, parse_policy
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import MCP_UPSTREAM_CONNECT, MCP_UPSTREAM_TOKEN
from gateway.mcp.messages import McpCall, McpVerdict
from gateway.mcp_oauth.upstream import CALLBACK_PATH, ConnectRefused, UpstreamVault
from tests.support.browser import Browser
from tests.support.peers import OIDCProvider, oidc_provider

pytestmark = pytest.mark.integration

HOST = "mcp.test"
VERDICTS = (McpVerdict(McpCall(1, "tools/call", "search", "ab" * 32), True, "allow[0]"),)
CALLBACK = f"https://{HOST}{CALLBACK_PATH}"
CONTINUE = f"https://{HOST}/.gateway/mcp/authorize?resume=abc"


IDP = "default"


def alice(user: str = "alice") -> Caller:
    return Caller(user_id=user, email=f"{user}@example.test", groups=(), claims={},
                  expires_at=2e9, provider=IDP, session_id=f"sid-{user}")


class UpstreamVaultTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        self.op: OIDCProvider = stack.enter_context(oidc_provider(
            Path(tempfile.mkdtemp(prefix="gw-vault-")), redirect_uris=(CALLBACK,),
            client_id="mcp-upstream", client_secret="upstream-secret",
            rotate_refresh_tokens=True))
        meta = self.op.discovery()
        self.userinfo = meta["userinfo_endpoint"]
        problems = Problems()
        routes = parse_policy([{
            "from": f"https://{HOST}", "to": "http://127.0.0.1:8000",
            "allow_any_authenticated_user": True,
            "mcp": {"upstream_oauth2": {
                "client_id": "mcp-upstream", "client_secret": "upstream-secret",
                "authorization_url": meta["authorization_endpoint"],
                "token_url": meta["token_endpoint"], "scopes": ["openid", "offline_access"]}},
        }], Reader("/"), problems, 30.0)
        self.assertEqual(problems.errors, [])
        self.route: Route = routes[0]
        self.now = reactor.seconds()
        self.records = MemoryRecordStore(lambda: self.now)
        self.vault = UpstreamVault(reactor, self.records, b"s" * 32, clock=lambda: self.now)

    async def authorize(self, user: str = "alice", session: str = "") -> dict[str, str]:
        """The consent flow's step, then the person at the provider: the callback's
        query (not fetched: no gateway listens here)."""
        url = await self.vault.connect_step(self.route, IDP, user, session or f"sid-{user}",
                                            CONTINUE, CALLBACK)
        assert url is not None
        reply = await deferToThread(Browser().sign_in, url, user, CALLBACK)
        self.assertTrue(reply.url.startswith(CALLBACK + "?"), reply)
        return {k: v[0] for k, v in parse_qs(urlsplit(reply.url).query).items()}

    def me(self, token: str) -> dict[str, Any]:
        request = urllib.request.Request(self.userinfo,
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            data: dict[str, Any] = json.load(answer)
        return data

    async def decided(self, user: str = "alice") -> Allow | Reply:
        allow = Allow(((b"x-gateway-jwt-assertion", b"jwt"),), frozenset(), reason="r",
                      caller=alice(user), mcp=VERDICTS)
        decision = await self.vault.decorate(allow, self.route)  # type: ignore[misc]
        assert isinstance(decision, Allow | Reply)
        return decision

    async def test_authorize_once_then_the_token_goes_upstream(self) -> None:
        query = await self.authorize()
        self.assertEqual(await self.vault.callback([self.route], IDP, "alice", "sid-alice", query),
                         CONTINUE)
        # stored sealed: neither token is readable in the record
        (record,) = await self.records.query(MCP_UPSTREAM_TOKEN)
        token = await self.vault.bearer(self.route, IDP, "alice")
        assert token is not None
        self.assertNotIn(token.encode(), record.data)
        self.assertEqual(self.me(token)["sub"], "alice")
        decision = await self.decided()
        assert isinstance(decision, Allow)
        self.assertEqual(decision.headers, ((b"x-gateway-jwt-assertion", b"jwt"),
                                            (b"authorization", f"Bearer {token}".encode())))
        self.assertIn(b"authorization", decision.remove)  # the client's own token
        self.assertEqual((decision.mcp, decision.reason, decision.caller),
                         (VERDICTS, "r", alice()))  # the rest as decided
        # authorized: the consent flow goes straight on next time
        self.assertIsNone(await self.vault.connect_step(self.route, IDP, "alice", "sid-alice",
                                                        CONTINUE, CALLBACK))
        # a state works once
        with self.assertRaises(ConnectRefused):
            await self.vault.callback([self.route], IDP, "alice", "sid-alice", query)

    async def test_someone_who_never_authorized_gets_401(self) -> None:
        decision = await self.decided("bob")
        assert isinstance(decision, Reply)
        self.assertEqual(decision.status, 401)
        self.assertIn(b'error="invalid_token"', dict(decision.headers)[b"www-authenticate"])

    async def test_the_callback_belongs_to_the_session_that_started_it(self) -> None:
        """Login CSRF: someone who sends a person their own callback link must not plant
        their upstream account in that person's vault."""
        query = await self.authorize("mallory")
        with self.assertRaises(ConnectRefused) as caught:
            await self.vault.callback([self.route], IDP, "alice", "sid-alice", query)
        self.assertIn("another session", str(caught.exception))
        self.assertEqual(await self.records.query(MCP_UPSTREAM_TOKEN), [])
        self.assertEqual(await self.records.query(MCP_UPSTREAM_CONNECT), [])  # used up
        self.assertIsNone(await self.vault.bearer(self.route, IDP, "alice"))

    async def test_due_token_is_refreshed_and_rotated(self) -> None:
        await self.vault.callback([self.route], IDP, "alice", "sid-alice", await self.authorize())
        first = await self.vault.bearer(self.route, IDP, "alice")
        self.now += 3600  # the provider's tokens last an hour: due
        together = [self.vault.bearer(self.route, IDP, "alice") for _ in range(3)]
        second, *others = [await d for d in together]
        assert first is not None and second is not None
        self.assertNotEqual(second, first)
        self.assertEqual(others, [second, second])  # one refresh for all three
        self.assertEqual(self.me(second)["sub"], "alice")
        self.assertEqual(self.op.process.log_text().count("REFRESH GRANTED"), 1)
        self.now += 3600  # the rotated refresh token works in turn
        third = await self.vault.bearer(self.route, IDP, "alice")
        assert third is not None
        self.assertNotIn(third, (first, second))

    async def test_refused_refresh_sends_the_person_back_to_authorize(self) -> None:
        await self.vault.callback([self.route], IDP, "alice", "sid-alice", await self.authorize())
        (record,) = await self.records.query(MCP_UPSTREAM_TOKEN)
        tokens = await self._tokens(record.id)
        await self._revoke(tokens["refresh_token"])
        self.now += 3600
        decision = await self.decided()
        assert isinstance(decision, Reply)
        self.assertEqual(decision.status, 401)
        self.assertEqual(await self.records.query(MCP_UPSTREAM_TOKEN), [])
        self.assertIsNotNone(await self.vault.connect_step(self.route, IDP, "alice", "sid-alice",
                                                           CONTINUE, CALLBACK))

    async def _tokens(self, rid: str) -> dict[str, Any]:
        record = await self.records.get(MCP_UPSTREAM_TOKEN, rid)
        assert record is not None
        data: dict[str, Any] = json.loads(self.vault.cipher.open(MCP_UPSTREAM_TOKEN, rid,
                                                                 record.data))
        return data

    async def _revoke(self, token: str) -> None:
        revocation = self.op.discovery()["revocation_endpoint"]
        request = urllib.request.Request(
            revocation, data=f"token={token}&token_type_hint=refresh_token".encode(),
            headers={"Authorization": "Basic " + base64.b64encode(
                b"mcp-upstream:upstream-secret").decode()})
        with urllib.request.urlopen(request, timeout=5) as answer:
            self.assertEqual(answer.status, 200)


def test_through_the_gateway(tmp_path: Path) -> None:
    """End to end with the daemon: an MCP client authorizes on a route with
    ``mcp.upstream_oauth2``; the person signs in, is sent to the upstream's
    authorization server once (oidc-provider: here the same instance as the gateway's
    identity provider, its client registered for both callbacks), comes back to the same
    authorization request, consents, and a tool call reaches the MCP server with the
    person's upstream token, not the client's. A second authorization goes straight to
    the consent page. Regression: nothing called the vault's step, so such a route
    answered every request 401."""
    from tests.support.browser import Browser as Person
    from tests.support.daemon import gateway_daemon
    from tests.support.mcp_browser import answer_consent
    from tests.support.mcp_oauth_flow import Flow, pkce, tool_call
    from tests.support.peers import echo_upstream
    from tests.support.processes import free_port

    port = free_port()
    host = f"mcp.test:{port}"
    connect_callback = f"http://{host}{CALLBACK_PATH}"
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback",
                                  connect_callback]) as op, echo_upstream(tmp_path) as up:
        meta = op.discovery()
        config = {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email"], "cookie_secure": False,
            "mcp_dynamic_client_registration": True,
            "policy": [{"from": f"http://{host}", "to": up.url,
                        "allow_any_authenticated_user": True,
                        "mcp": {"upstream_oauth2": {
                            "client_id": op.client_id, "client_secret": op.client_secret,
                            "authorization_url": meta["authorization_endpoint"],
                            "token_url": meta["token_endpoint"],
                            "scopes": ["openid", "offline_access"]}}}],
        }
        with gateway_daemon(tmp_path, config, port=port):
            flow = Flow(port, host, browser=Person())
            client_id = flow.register()
            verifier, challenge = pkce()
            got = flow.authorize(flow.authorize_url(client_id, challenge), "alice")
            to_upstream = [url for _, url, _ in flow.browser.history
                           if url.startswith(meta["authorization_endpoint"])
                           and "connect%2Fcallback" in url]
            assert len(to_upstream) == 1, flow.browser.history
            assert any(url.startswith(connect_callback) for _, url, _ in
                       flow.browser.history)
            answer = flow.exchange(client_id, got["code"], verifier)
            assert answer.status == 200, answer.body[:300]
            client_token = answer.json()["access_token"]
            called = flow.rpc(tool_call("search"), client_token)
            assert called.status == 200, called.body[:300]
            seen = {k.lower(): v for k, v in json.loads(called.body)["headers"]}
            scheme, _, upstream_token = seen["authorization"].partition(" ")
            assert scheme == "Bearer" and upstream_token
            assert client_token not in seen["authorization"]
            request = urllib.request.Request(meta["userinfo_endpoint"], headers={
                "Authorization": f"Bearer {upstream_token}"})
            with urllib.request.urlopen(request, timeout=5) as info:
                assert json.load(info)["sub"] == "alice"
            # authorized once: the next authorization goes to the consent page directly
            before = len(flow.browser.history)
            reply = flow.page(flow.authorize_url(client_id, challenge, state="again"),
                              "alice")
            assert reply.status == 200 and reply.url.startswith(flow.origin), reply.url
            assert not any(url.startswith(meta["authorization_endpoint"])
                           for _, url, _ in flow.browser.history[before:])
            assert answer_consent(flow.browser, reply, True,
                                  stop=flow.redirect_uri).url.startswith(flow.redirect_uri)
