"""The upstream token vault of an MCP route (``mcp.upstream_oauth2``) with a real
oidc-provider as the upstream's authorization server: the person authorizes it once
(the provider's login and consent pages, a test browser), the callback stores the
tokens sealed in the databroker for that person's session only, an allowed request's
decision carries the person's access token (the provider's userinfo accepts it) and
drops the client's, a due token is refreshed (rotated), a revoked one sends the person
back to authorize, someone who never authorized gets 401."""

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
