"""MCP servers behind the gateway, end to end with the official clients (issue 43): the
Python SDK (``mcp`` 2.3.0, which speaks the 2026-07-28 protocol: ``server/discover``,
``Mcp-Method``/``Mcp-Name`` headers) and the TypeScript SDK (``@modelcontextprotocol/sdk``
1.32.2: ``initialize``, a session, the GET stream), each with its own OAuth support,
against the Python SDK's server (``tests/peers/mcp_tickets.py``) behind the gateway
daemon, people signed in at node-oidc-provider through the stdlib browser and headless
Chromium.

Each client: its first request answered 401 with the RFC 9728 challenge, the metadata
discovered from it, the client ID metadata document the test serves over HTTPS fetched by
the gateway (or, without one, dynamic registration), PKCE S256, the person's sign-in and
the gateway's consent page naming the client, the code exchanged, a tool allowed and one
denied (a JSON-RPC error the client shows; the server never sees the call), ``tools/list``
filtered to what the person may call, the access token refreshed (rotated), and every
token dead once the person signs out. The server never gets the client's token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import _require_binary
from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.mcp_oauth_flow import Flow
from tests.support.mcp_peers import (
    McpClient,
    MetadataServer,
    Tickets,
    browser_argv,
    client_document,
    mcp_client,
    metadata_server,
    tickets_server,
)
from tests.support.peers import NODE_INSTALL_HINT, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
SUPPORT = "sam@example.test#support"  # may list and call search_tickets and get_ticket
ALLOWED = ["search_tickets", "get_ticket"]


@dataclass
class Env:
    gw: Daemon
    port: int
    tickets: Tickets
    docs: MetadataServer
    tmp: Path

    @property
    def origin(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"

    def document(self, name: str, client: McpClient, client_name: str) -> None:
        """Serve ``client``'s metadata document (its loopback redirect URI listed) at the
        URL it was started with (``client_id_url``)."""
        url = client_id_url(self, name)
        self.docs.serve(f"/clients/{name}.json", client_document(
            url, [client.redirect_uri], client_name))


def client_id_url(env: Env, name: str) -> str:
    return env.docs.url_for(f"/clients/{name}.json")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require_binary("node", NODE_INSTALL_HINT)
    tmp = tmp_path_factory.mktemp("mcp-clients")
    port = free_port()
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://authenticate.localhost:{port}/oauth2/callback"]))
        tickets = stack.enter_context(tickets_server(tmp))
        docs = stack.enter_context(metadata_server(tmp))
        config = {
            "authenticate_service_url": f"http://authenticate.localhost:{port}",
            "cookie_secure": False,
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups", "offline_access"],
            "idp_service_account": "groups-from-the-id-token",
            # the clients' documents are on this machine: loopback let in, the test CA
            "mcp_allowed_client_id_domains": ["localhost"],
            "mcp_client_id_metadata_allowed_networks": ["127.0.0.0/8"],
            "mcp_client_id_metadata_ca_file": str(docs.ca_path),
            "mcp_dynamic_client_registration": True,
            "policy": [{
                "from": f"http://localhost:{port}", "to": tickets.origin,
                "name": "tickets", "mcp": {}, "pass_identity_headers": True,
                "policy": [{"allow": {"and": [{"groups": {"has": "support"}},
                                              {"mcp_tool": {"in": ALLOWED}}]}}],
            }],
        }
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        yield Env(gw, port, tickets, docs, tmp)


def http_steps(client: McpClient) -> list[tuple[str, str, int]]:
    """(method, path, status) of every HTTP exchange the client made so far."""
    return [(e["method"], urlsplit(e["url"]).path, e["status"]) for e in client.http_log()]


def authorization_params(client: McpClient) -> dict[str, str]:
    runs = client.browser_runs()
    assert runs, "the client never opened the browser"
    return {k: v[0] for k, v in parse_qs(urlsplit(runs[-1]["url"]).query).items()}


def sign_out(env: Env, cookies: Path) -> None:
    """The person signs out in the browser they signed in with."""
    browser = Browser()
    browser.cookies = json.loads(cookies.read_text())
    browser.sign_out(env.origin)


def check_the_whole_life(env: Env, client: McpClient, client_id: str, cookies: Path,
                         consent_names: str) -> None:
    """Connect (the whole authorization), tools allowed, denied and listed, a refresh,
    sign-out: what both SDKs must do alike."""
    connected = client.ok("connect", timeout=90)
    steps = http_steps(client)
    # discovery from the 401: the challenge names the protected resource metadata
    first = client.http_log()[0]
    assert (first["method"], urlsplit(first["url"]).path, first["status"]) == \
        ("POST", "/mcp", 401), steps
    challenge = first["www_authenticate"]
    assert challenge.startswith("Bearer ") and "resource_metadata=" in challenge, challenge
    metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
    assert urlsplit(metadata_url).path.startswith("/.well-known/oauth-protected-resource")
    paths = [p for _, p, status in steps if status == 200]
    assert urlsplit(metadata_url).path in paths, steps
    assert "/.well-known/oauth-authorization-server" in paths or \
        "/.well-known/openid-configuration" in paths, steps
    # PKCE S256, the resource, the client id: the authorization the browser opened
    params = authorization_params(client)
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) >= 43
    assert params["client_id"] == client_id
    assert params["resource"].rstrip("/") == env.origin
    assert urlsplit(params["redirect_uri"]).hostname == "127.0.0.1"
    run = client.browser_runs()[-1]
    assert run["status"] == 0, run
    # the person saw the gateway's consent page, which named the client
    record = [json.loads(line) for line in (env.tmp / f"browser-{client.sdk}.jsonl")
              .read_text().splitlines()]
    assert consent_names in record[-1]["consent"], record[-1]["consent"][:800]
    assert ("POST", "/.gateway/mcp/token", 200) in steps, steps
    assert connected["protocol_version"], connected

    # tools/list filtered: the agent never sees delete_ticket
    assert client.ok("list_tools")["tools"] == ALLOWED
    found = client.ok("call", name="get_ticket", arguments={"ticket_id": "T-1"})
    assert not found["is_error"] and "Printer on fire" in found["text"][0], found
    before = env.tickets.called().count("delete_ticket")
    denied = client.ask("call", name="delete_ticket", arguments={"ticket_id": "T-1"})
    assert not denied["ok"], denied
    assert isinstance(denied["error"]["code"], int), denied  # a JSON-RPC error, shown
    assert "polic" in denied["error"]["message"].lower(), denied
    assert env.tickets.called().count("delete_ticket") == before  # never forwarded
    # the client's token never reaches the server; the identity assertion does
    seen = [r for r in env.tickets.requests() if r["calls"]
            and r["calls"][0]["name"] == "get_ticket"][-1]
    assert "authorization" not in seen["headers"], seen["headers"]
    assert "x-gateway-jwt-assertion" in seen["headers"], seen["headers"]

    # refresh: the SDK meets an expired access token and refreshes it; both rotate
    old = client.ok("tokens")
    assert old["refresh_token"], old
    client.ok("expire")
    again = client.ok("call", name="search_tickets", arguments={"query": "vpn"})
    assert "VPN drops every hour" in again["text"][0], again
    new = client.ok("tokens")
    assert new["access_token"] != old["access_token"]
    assert new["refresh_token"] != old["refresh_token"]
    assert len(client.browser_runs()) == 1  # no second authorization: a refresh
    assert ("POST", "/.gateway/mcp/token", 200) in http_steps(client)[len(steps):]

    # sign-out: every token of the session stops working at once
    sign_out(env, cookies)
    client.ok("browser", argv=["false"])  # the person does not sign in again
    after = client.ask("call", name="get_ticket", arguments={"ticket_id": "T-2"})
    assert not after["ok"], after
    refused = [e for e in client.http_log() if e["status"] == 401][-1]
    assert "invalid_token" in (refused["www_authenticate"] or ""), refused
    assert len(client.browser_runs()) >= 2  # the client had to ask the person again
    # the refresh token ended with the session too
    denied_refresh = Flow(env.port, f"localhost:{env.port}").refresh(
        client_id, new["refresh_token"])
    assert denied_refresh.status == 400, (denied_refresh.status, denied_refresh.body)
    assert denied_refresh.json()["error"] == "invalid_grant"


def test_python_sdk_with_a_client_id_metadata_document(env: Env) -> None:
    """The Python SDK names itself by its metadata document (the gateway advertises
    ``client_id_metadata_document_supported``): no registration, the document fetched by
    the gateway; the stdlib browser signs in and allows."""
    cookies = env.tmp / "cookies-python.json"
    client_id = client_id_url(env, "python")
    browser = browser_argv(SUPPORT, record=env.tmp / "browser-python.jsonl", cookies=cookies)
    with mcp_client("python", env.tmp, url=env.url, browser=browser,
                    client_metadata_url=client_id) as client:
        env.document("python", client, "Ticket Agent (Python)")
        check_the_whole_life(env, client, client_id, cookies, "Ticket Agent (Python)")
        assert not any(p == "/.gateway/mcp/register" for _, p, _ in http_steps(client))
        # a 2026-07-28 client: its requests carry Mcp-Method, which the gateway checked
        assert any(e["mcp_method"] == "tools/call" and e["status"] == 200
                   for e in client.http_log())
    assert "/clients/python.json" in env.docs.asked


def test_typescript_sdk_in_chromium(env: Env, require_binary: Any) -> None:
    """The TypeScript SDK, also by its metadata document; the person's browser is
    headless Chromium (the consent page's form posts and redirects as a real browser
    follows them, under the page's Content-Security-Policy)."""
    require_binary("chromium", "apt-get install -y chromium")
    cookies = env.tmp / "cookies-typescript.json"
    client_id = client_id_url(env, "typescript")
    browser = browser_argv(SUPPORT, chromium=True, record=env.tmp / "browser-typescript.jsonl",
                           cookies=cookies)
    with mcp_client("typescript", env.tmp, url=env.url, browser=browser,
                    client_metadata_url=client_id) as client:
        env.document("typescript", client, "Ticket Agent (TypeScript)")
        check_the_whole_life(env, client, client_id, cookies, "Ticket Agent (TypeScript)")
        assert not any(p == "/.gateway/mcp/register" for _, p, _ in http_steps(client))
    assert "/clients/typescript.json" in env.docs.asked


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_dynamic_registration(env: Env, sdk: str) -> None:
    """Without a metadata document both SDKs register (RFC 7591, turned on here); the
    consent page says nothing vouches for the name; a person who denies sends the client
    ``access_denied`` and it gets no token."""
    record = env.tmp / f"browser-dcr-{sdk}.jsonl"
    with mcp_client(sdk, env.tmp, url=env.url, client_name=f"Self-named {sdk} agent",
                    browser=browser_argv(SUPPORT, deny=True, record=record)) as client:
        refused = client.ask("connect", timeout=90)
        assert not refused["ok"], refused
        assert ("POST", "/.gateway/mcp/register", 201) in http_steps(client)
        shown = json.loads(record.read_text().splitlines()[-1])
        assert f"Self-named {sdk} agent" in shown["consent"]
        assert "nothing vouches" in shown["consent"]
        assert "error=access_denied" in shown["url"], shown["url"]
        assert not any(p == "/.gateway/mcp/token" for _, p, _ in http_steps(client))
        # the same client, allowed this time: it connects and lists what it may call
        client.ok("browser", argv=browser_argv(SUPPORT, record=record))
        client.ok("connect", timeout=90)
        assert client.ok("list_tools")["tools"] == ALLOWED
