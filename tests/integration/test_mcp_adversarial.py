"""Issue 43's adversarial table, the rows no other test takes through a real gateway: a
client ID metadata document URL pointing at 127.0.0.1, or redirecting there, met by the
daemon's own client directory and its settings (``mcp_allowed_client_id_domains``,
``mcp_client_id_metadata_allowed_networks``, ``mcp_client_id_metadata_ca_file``), as a
person's browser meets it: the daemon with an MCP route in front of the Python SDK's MCP
server, people signed in at node-oidc-provider with the stdlib browser, each OAuth step
by hand (``mcp_oauth_flow.Flow``).

The other rows are tested through the daemon elsewhere: tests/integration/
test_mcp_oauth.py (a token of route A on route B, no ``resource``, PKCE plain or missing,
a replayed code, a reused refresh token, a redirect URI the client does not list),
test_mcp_requests.py (header/body mismatch, a batch hiding a denied call, a 10 MiB body
whose tool name comes last); the metadata document's size, time and content bounds
against a real HTTPS server in test_mcp_client_documents.py.

Client ID metadata documents are served by two HTTPS servers of one test CA: one on
127.0.0.2, the network the gateway is told to let in
(``mcp_client_id_metadata_allowed_networks``), and one on 127.0.0.1, which it must refuse
like any loopback or private address, fetched directly or by a redirect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.conftest import _require_binary
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.mcp_oauth_flow import Flow, pkce
from tests.support.mcp_peers import (
    MetadataServer,
    Served,
    Tickets,
    client_document,
    metadata_server,
    tickets_server,
)
from tests.support.peers import NODE_INSTALL_HINT, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
SUPPORT = "sam@example.test#support"
POLICY = [{"allow": {"and": [{"groups": {"has": "support"}},
                             {"mcp_tool": {"in": ["search_tickets", "get_ticket"]}}]}}]


@dataclass
class Env:
    gw: Daemon
    port: int
    tickets: Tickets
    docs: MetadataServer  # on 127.0.0.2: let in
    private: MetadataServer  # on 127.0.0.1: refused
    tmp: Path

    def flow(self) -> Flow:
        return Flow(self.port, f"mcp.test:{self.port}")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require_binary("node", NODE_INSTALL_HINT)
    tmp = tmp_path_factory.mktemp("mcp-adversarial")
    port = free_port()
    ca = trustme.CA()
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://authenticate.localhost:{port}/oauth2/callback"]))
        tickets = stack.enter_context(tickets_server(tmp))
        docs = stack.enter_context(metadata_server(tmp, "127.0.0.2", "127.0.0.2", ca))
        private = stack.enter_context(metadata_server(tmp, "127.0.0.1", "127.0.0.1", ca))
        config = {
            "authenticate_service_url": f"http://authenticate.localhost:{port}",
            "cookie_secure": False,
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups", "offline_access"],
            "idp_service_account": "groups-from-the-id-token",
            "mcp_allowed_client_id_domains": ["127.0.0.2", "127.0.0.1"],
            "mcp_client_id_metadata_allowed_networks": ["127.0.0.2/32"],
            "mcp_client_id_metadata_ca_file": str(docs.ca_path),
            "policy": [{"from": f"http://mcp.test:{port}", "to": tickets.origin,
                        "name": "tickets", "mcp": {}, "policy": POLICY}],
        }
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        yield Env(gw, port, tickets, docs, private, tmp)


def _authorize_as(env: Env, client_id: str) -> tuple[int, str, str]:
    """Open an authorization for ``client_id``: (status, where the browser ended, page)."""
    flow = env.flow()
    _, challenge = pkce()
    page = flow.page(flow.authorize_url(client_id, challenge), SUPPORT)
    return page.status, page.url, page.body.decode("utf-8", "replace")


def test_a_metadata_document_on_an_allowed_network_is_used(env: Env) -> None:
    """The control row: the same kind of document, on the network let in, is fetched
    and its client named on the consent page."""
    url = env.docs.serve("/good.json", client_document(
        env.docs.url_for("/good.json"), ["http://127.0.0.1:1/callback"], "Good Agent"))
    status, _, page = _authorize_as(env, url)
    assert status == 200 and "Good Agent" in page, (status, page[:500])
    assert "/good.json" in env.docs.asked


@pytest.mark.parametrize("case", ["loopback", "redirect"])
def test_metadata_documents_refused(env: Env, case: str) -> None:
    """A document at 127.0.0.1 (refused before any connection) and one on the allowed
    network redirecting there (redirects are not followed), through the daemon's own
    settings: the person sees the gateway's error page, the client gets no redirect.
    (Every other refusal of the fetch, size, time, content, a wrong ``client_id``, is
    tested against a real HTTPS server in tests/integration/test_mcp_client_documents.py.)"""
    target = env.private.serve(f"/{case}.json", client_document(
        env.private.url_for(f"/{case}.json"), ["http://127.0.0.1:1/callback"]))
    if case == "loopback":
        client_id = target
    else:
        client_id = env.docs.url_for(f"/{case}.json")
        env.docs.serve(f"/{case}.json", Served(redirect=target))
    status, url, page = _authorize_as(env, client_id)
    assert status == 400, (case, status, page[:400])
    # the page names why, and the setting that would change it
    assert {"loopback": "is a loopback address: metadata documents are fetched only from "
            "public addresses (mcp_client_id_metadata_allowed_networks",
            "redirect": "which is not followed"}[case] in page, page[:1500]
    assert not url.startswith("http://127.0.0.1:1/callback"), url
    assert f"/{case}.json" not in env.private.asked  # never fetched from 127.0.0.1
