"""The MCP authorization server over HTTP, end to end with the real daemon and the test
identity provider (node-oidc-provider), the client registered dynamically (RFC 7591,
turned on here; client ID metadata documents are the client directory's tests):
discovery from the 401, authorize with the person's
sign-in and consent (tests/support/browser.py), the code, the token, a call through to
the upstream (which never sees the token), refresh with rotation, reuse detection,
sign-out ending the tokens; and the adversarial rows: a token of route A on route B, no
``resource``, PKCE plain or missing, a replayed code, a reused refresh token, a
redirect URI the client does not list."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import _require_binary
from tests.support.browser import Browser, _Forms
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.kvstore import COOKIE, SECRET
from tests.support.peers import OIDCProvider, echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, loopback_opener

pytestmark = pytest.mark.integration
REDIRECT = "http://127.0.0.1:9/callback"  # nothing listens: the browser stops there


@dataclass
class Setup:
    gw: Daemon
    op: OIDCProvider
    origin: str  # http://mcp.test:PORT

    @property
    def a(self) -> str:
        return f"{self.origin}/a"

    @property
    def b(self) -> str:
        return f"{self.origin}/b"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One daemon for the tests of the memory store (each signs in its own person)."""
    _require_binary("node", "apt-get install -y nodejs npm")
    with gateway_setup(tmp_path_factory.mktemp("mcp-oauth")) as made:
        yield made


@contextlib.contextmanager
def gateway_setup(tmp: Path, **settings: Any) -> Iterator[Setup]:
    port = free_port()
    with oidc_provider(tmp, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp) as up:
        route = {"to": up.url, "mcp": {}, "allow_any_authenticated_user": True,
                 "pass_identity_headers": True}
        config = {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups"], "cookie_secure": False,
            "mcp_dynamic_client_registration": True,
            "policy": [{"from": f"http://mcp.test:{port}", "prefix": "/a", **route},
                       {"from": f"http://mcp.test:{port}", "prefix": "/b", **route}],
            **settings,
        }
        with gateway_daemon(tmp, config, port=port) as gw:
            yield Setup(gw, op, f"http://mcp.test:{port}")


def http(method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], bytes]:
    """A program's request (no cookies), to 127.0.0.1 with the URL's host; the
    answer's header names in lower case."""
    parts = urlsplit(url)
    target = f"http://127.0.0.1:{parts.port}{parts.path}" + (f"?{parts.query}"
                                                            if parts.query else "")
    request = urllib.request.Request(target, data=body or None, method=method,
                                     headers={"Host": parts.netloc, **(headers or {})})
    try:
        with loopback_opener().open(request, timeout=10) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, \
                answer.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(40)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


class Agent:
    """The MCP client's side, as the MCP text has it."""

    def __init__(self, setup: Setup, resource: str) -> None:
        self.setup = setup
        self.resource = resource
        self.verifier, self.challenge = pkce()
        status, headers, _ = self.call(None)
        assert status == 401, status
        challenge = headers["www-authenticate"]
        assert challenge.startswith("Bearer resource_metadata=\""), challenge
        assert 'scope="mcp"' in challenge
        prm_url = challenge.split('resource_metadata="')[1].split('"')[0]
        status, _, body = http("GET", prm_url)
        assert status == 200
        prm = json.loads(body)
        assert prm["resource"] == resource
        issuer = prm["authorization_servers"][0]
        status, _, body = http("GET", f"{issuer}/.well-known/oauth-authorization-server")
        self.meta = json.loads(body)
        assert self.meta["issuer"] == issuer
        assert self.meta["code_challenge_methods_supported"] == ["S256"]
        status, _, body = http("POST", self.meta["registration_endpoint"], json.dumps({
            "client_name": "Test Agent", "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none"}).encode(),
            {"Content-Type": "application/json"})
        assert status == 201, body
        self.client_id = json.loads(body)["client_id"]

    def authorize_url(self, **over: str) -> str:
        given = {"client_id": self.client_id, "redirect_uri": REDIRECT,
                 "response_type": "code",
                 "code_challenge": self.challenge, "code_challenge_method": "S256",
                 "resource": self.resource, "state": "st", "scope": "mcp"}
        given.update(over)
        query = urlencode({k: v for k, v in given.items() if v != "-"})
        return f"{self.meta['authorization_endpoint']}?{query}"

    def token(self, **given: str) -> tuple[int, dict[str, Any]]:
        status, _, body = http("POST", self.meta["token_endpoint"], urlencode(given).encode(),
                               {"Content-Type": "application/x-www-form-urlencoded"})
        return status, json.loads(body)

    def redeem(self, code: str, **over: str) -> tuple[int, dict[str, Any]]:
        given = {"grant_type": "authorization_code", "code": code,
                 "client_id": self.client_id,
                 "redirect_uri": REDIRECT, "code_verifier": self.verifier,
                 "resource": self.resource}
        given.update(over)
        return self.token(**{k: v for k, v in given.items() if v != "-"})

    def refresh(self, refresh_token: str) -> tuple[int, dict[str, Any]]:
        return self.token(grant_type="refresh_token", refresh_token=refresh_token,
                          client_id=self.client_id, resource=self.resource)

    def call(self, access: str | None, url: str = "") -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if access:
            headers["Authorization"] = f"Bearer {access}"
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        return http("POST", url or f"{self.resource}/mcp", body, headers)


def answer_of(url: str) -> dict[str, str]:
    assert url.startswith(REDIRECT), url
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def sign_in_and_consent(browser: Browser, agent: Agent, login: str, **over: str
                        ) -> dict[str, str]:
    """The person's steps: sign in at the provider (when needed), allow on the consent
    page (when shown); the client's redirect's parameters."""
    reply = browser.sign_in(agent.authorize_url(**over), login, stop=REDIRECT)
    if reply.status == 200:
        assert b"Test Agent" in reply.body and b"127.0.0.1" in reply.body, reply.body[:500]
        forms = _Forms()
        forms.feed(reply.body.decode())
        allow = next(f for f in forms.forms if dict(f["fields"]).get(  # type: ignore[call-overload]
            "decision") == "allow")
        reply = browser.follow(urljoin(reply.url, str(allow["action"])), "POST",
                               urlencode(dict(allow["fields"])).encode(),  # type: ignore[call-overload]
                               stop=REDIRECT)
    return answer_of(reply.url)


def test_whole_flow(setup: Setup) -> None:
    agent = Agent(setup, setup.a)
    browser = Browser()
    got = sign_in_and_consent(browser, agent, "alice@example.test")
    assert got["state"] == "st" and got["iss"] == setup.origin
    status, tokens = agent.redeem(got["code"])
    assert status == 200, tokens
    assert tokens["expires_in"] == 300 and tokens["token_type"] == "Bearer"
    status, _, body = agent.call(tokens["access_token"])
    assert status == 200, body
    upstream = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert "authorization" not in upstream  # the client's token never goes upstream
    assert "x-gateway-jwt-assertion" in upstream
    # a token of route A on route B
    status, headers, _ = agent.call(tokens["access_token"], f"{setup.b}/mcp")
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    # refresh rotates; the spent refresh token again ends the grant
    status, second = agent.refresh(tokens["refresh_token"])
    assert status == 200 and second["refresh_token"] != tokens["refresh_token"]
    assert agent.call(second["access_token"])[0] == 200
    status, reused = agent.refresh(tokens["refresh_token"])
    assert (status, reused["error"]) == (400, "invalid_grant")
    assert agent.call(second["access_token"])[0] == 401
    # a new authorization: signed in already, consent asked again (a loopback
    # redirect URI), no provider step
    got = sign_in_and_consent(browser, agent, "alice@example.test", state="again")
    assert got["state"] == "again"
    status, third = agent.redeem(got["code"])
    assert status == 200
    assert agent.call(third["access_token"])[0] == 200
    # signing out ends every token of the session
    browser.sign_out(setup.origin)
    status, headers, _ = agent.call(third["access_token"])
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    assert agent.refresh(third["refresh_token"])[1]["error"] == "invalid_grant"


def test_adversarial_rows(setup: Setup) -> None:
    agent = Agent(setup, setup.b)
    browser = Browser()
    got = sign_in_and_consent(browser, agent, "bob@example.test")
    code = got["code"]
    # a replayed code: refused, and what it issued is revoked
    status, tokens = agent.redeem(code)
    assert status == 200
    assert agent.call(tokens["access_token"])[0] == 200
    status, again = agent.redeem(code)
    assert (status, again["error"]) == (400, "invalid_grant")
    assert agent.call(tokens["access_token"])[0] == 401
    # no resource: at the authorization endpoint and at the token endpoint
    assert answer_of(browser.follow(agent.authorize_url(resource="-"), stop=REDIRECT).url
                     )["error"] == "invalid_target"
    got = sign_in_and_consent(browser, agent, "bob@example.test")
    assert agent.redeem(got["code"], resource="-")[1]["error"] == "invalid_target"
    # PKCE plain or missing
    for over in ({"code_challenge_method": "plain", "code_challenge": agent.verifier},
                 {"code_challenge_method": "-"}, {"code_challenge": "-"}):
        reply = browser.follow(agent.authorize_url(**over), stop=REDIRECT)
        assert answer_of(reply.url)["error"] == "invalid_request", over
    got = sign_in_and_consent(browser, agent, "bob@example.test")
    assert agent.redeem(got["code"], code_verifier="-")[1]["error"] == "invalid_grant"
    # a redirect URI the client does not list: a page, never a redirect there
    reply = browser.follow(agent.authorize_url(redirect_uri="http://127.0.0.1:9/other"))
    assert reply.status == 400 and reply.header("location") is None
    assert b"redirect URI" in reply.body


def signing_key() -> str:
    """Workers sign assertions with one key (the configuration refuses ephemeral ones)."""
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return base64.b64encode(key).decode()


def test_workers_and_redis_agree(tmp_path: Path, require_binary: Any) -> None:
    """Two workers over Redis: a code, a refresh token and a sign-out are one fact for
    both (the kernel spreads new connections over them); Redis holds no token."""
    require_binary("node", "apt-get install -y nodejs npm")
    require_binary("redis-server", "apt-get install -y redis-server")
    with redis_server(tmp_path / "redis") as redis, gateway_setup(
            tmp_path, workers=2, shared_secret=SECRET, cookie_secret=COOKIE,
            signing_key=signing_key(),
            databroker_storage_type="kvstore",
            databroker_storage_connection_string=f"kvstore://127.0.0.1:{redis.port}/0"
            ) as setup:
        agent = Agent(setup, setup.a)
        browser = Browser()
        got = sign_in_and_consent(browser, agent, "alice@example.test")
        status, tokens = agent.redeem(got["code"])
        assert status == 200, tokens
        assert [agent.redeem(got["code"])[1]["error"] for _ in range(3)] == \
            ["invalid_grant"] * 3  # whichever worker: spent, and the grant ended
        assert agent.call(tokens["access_token"])[0] == 401
        got = sign_in_and_consent(browser, agent, "alice@example.test", state="2")
        status, tokens = agent.redeem(got["code"])
        assert status == 200
        assert {agent.call(tokens["access_token"])[0] for _ in range(12)} == {200}
        status, fresh = agent.refresh(tokens["refresh_token"])
        assert status == 200
        # both workers look the new token up (and keep it: at most 10 s)
        assert {agent.call(fresh["access_token"])[0] for _ in range(12)} == {200}
        assert [agent.refresh(tokens["refresh_token"])[1]["error"] for _ in range(3)] == \
            ["invalid_grant"] * 3
        # the other worker drops what it kept when the change stream (polled every
        # 0.5 s) brings the grant's end, not when its 10 s run out
        ended = time.monotonic()
        while {agent.call(fresh["access_token"])[0] for _ in range(8)} != {401}:
            assert time.monotonic() - ended < 1.5, "the ended grant was not seen in 1.5 s"
            time.sleep(0.05)
        got = sign_in_and_consent(browser, agent, "alice@example.test", state="3")
        status, last = agent.redeem(got["code"])
        assert {agent.call(last["access_token"])[0] for _ in range(8)} == {200}
        with redis.client() as raw:
            stored = b"".join(bytes(v) for t in ("mcp.token", "mcp.grant", "mcp.code")
                              for v in raw.command("HGETALL", f"{{gateway}}:records:{t}"))
        assert stored
        for secret in (tokens["access_token"], fresh["refresh_token"], last["access_token"]):
            assert secret[9:].encode() not in stored
        browser.sign_out(setup.origin)
        ended = time.monotonic()
        while {agent.call(last["access_token"])[0] for _ in range(8)} != {401}:
            assert time.monotonic() - ended < 1.5, "the sign-out was not seen in 1.5 s"
            time.sleep(0.05)
        workers = {e.get("worker") for e in setup.gw.log_events()
                   if e.get("namespace") == "gateway.access" and "/a/mcp" in e.get("path", "")}
        assert workers == {0, 1}, workers
