"""conf/mcp.example.yaml, the configuration docs/how-to/mcp-servers.md includes: it passes
``gateway check`` as shipped, and run with only its ports moved (the gateway's :8080, the
provider's :9000, the MCP server's :8000) and the trust a test on one machine needs (the
client's metadata document is served on loopback by the test's own CA), the official
Python SDK client connects through it as each of the example's people: support lists and
calls its two tools and is refused the third and the resources; a support lead lists and
calls every tool and reads a resource."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from gateway.cli.check import run_check
from tests.conftest import _require_binary
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.mcp_peers import (
    browser_argv,
    client_document,
    mcp_client,
    metadata_server,
    tickets_server,
)
from tests.support.peers import NODE_INSTALL_HINT, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "mcp.example.yaml"


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "routes=1" in out.out, out


def test_example_runs(tmp_path: Path) -> None:
    _require_binary("node", NODE_INSTALL_HINT)
    port = free_port()
    text = EXAMPLE.read_text()
    with tickets_server(tmp_path) as tickets, metadata_server(tmp_path) as docs, \
            oidc_provider(tmp_path, redirect_uris=[
                f"http://authenticate.localhost:{port}/oauth2/callback"]) as op:
        for old, new in ((":8080", f":{port}"), ("http://127.0.0.1:9000", op.issuer),
                         ("http://127.0.0.1:8000", tickets.origin)):
            assert old in text, f"{old} is no longer in {EXAMPLE.name}"
            text = text.replace(old, new)
        config = yaml.safe_load(text)
        config["idp_client_id"], config["idp_client_secret"] = op.client_id, op.client_secret
        # the client's metadata document is on this machine, under the test's CA
        assert config["mcp_allowed_client_id_domains"] == ["claude.ai", "vscode.dev"]
        config["mcp_allowed_client_id_domains"].append("localhost")
        config["mcp_client_id_metadata_allowed_networks"] = ["127.0.0.0/8"]
        config["mcp_client_id_metadata_ca_file"] = str(docs.ca_path)
        with gateway_daemon(tmp_path, config, port=port):
            for login, tools, delete_allowed in (
                    ("sam@example.test#support", ["search_tickets", "get_ticket"], False),
                    ("lee@example.test#support-leads",
                     ["search_tickets", "get_ticket", "delete_ticket"], True)):
                name = login.split("@")[0]
                client_id = docs.url_for(f"/{name}-agent.json")
                with mcp_client("python", tmp_path, url=f"http://localhost:{port}/mcp",
                                browser=browser_argv(login),
                                client_metadata_url=client_id) as client:
                    docs.serve(f"/{name}-agent.json", client_document(
                        client_id, [client.redirect_uri]))
                    client.ok("connect", timeout=90)
                    assert client.ok("list_tools")["tools"] == tools, login
                    got = client.ok("call", name="get_ticket", arguments={"ticket_id": "T-3"})
                    assert "Old laptop returned" in got["text"][0]
                    deleted = client.ask("call", name="delete_ticket",
                                         arguments={"ticket_id": "T-3"})
                    assert deleted["ok"] is delete_allowed, (login, deleted)
                    read = client.ask("read_resource", uri="tickets://open")
                    assert read["ok"] is delete_allowed, (login, read)
            assert tickets.called().count("delete_ticket") == 1
