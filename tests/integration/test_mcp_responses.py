"""An MCP route's responses through the real daemon: a small MCP server answers
``tools/list`` with one JSON body and with an SSE stream; the caller (an MCP client's
token for a person signed in at the test identity provider) sees only the tools the
route's policy lets them call; each JSON-RPC message is one audit event (``via: mcp``)
with the hash of its arguments and never the arguments; the MCP counters are on the
metrics endpoint."""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.mcp_oauth_flow import Flow
from tests.support.peers import oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

TOOLS = ["search_tickets", "get_ticket", "delete_ticket"]
SECRET_ARGUMENT = "the-arguments-never-reach-the-audit-stream"


class McpServer(BaseHTTPRequestHandler):
    """Answers every JSON-RPC request: tools/list with the three tools (as JSON under
    /json/, as an event stream under /sse/), anything else with an empty result."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        messages = body if isinstance(body, list) else [body]
        answers = []
        for message in messages:
            if "id" not in message:
                continue
            result: dict[str, Any] = {"content": []}
            if message["method"] == "tools/list":
                result = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                    for n in TOOLS], "nextCursor": "next"}
            answers.append({"jsonrpc": "2.0", "id": message["id"], "result": result})
        if self.path.startswith("/sse/"):
            stream = b": hello\n\n" + b"".join(
                b"event: message\ndata: " + json.dumps(a).encode() + b"\n\n" for a in answers)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(stream)))
            self.end_headers()
            self.wfile.write(stream)
            return
        out = json.dumps(answers if isinstance(body, list) else answers[0]).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Env:
    gw: Daemon
    port: int
    metrics_port: int
    audit_file: Path
    token: str
    client_id: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("mcp_responses")
    port, metrics_port = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", 0), McpServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    audit_file = tmp / "audit.jsonl"
    with ExitStack() as stack:
        stack.callback(server.shutdown)
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://auth.test:{port}/oauth2/callback"]))
        gw = stack.enter_context(gateway_daemon(tmp, {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email"], "cookie_secure": False,
            "mcp_dynamic_client_registration": True,
            "audit_log_file": str(audit_file),
            "metrics_address": f"127.0.0.1:{metrics_port}",
            "policy": [{
                "from": f"http://mcp.test:{port}", "name": "tickets",
                "to": f"http://127.0.0.1:{server.server_address[1]}", "mcp": {},
                "policy": [{"allow": {"and": [
                    {"email": {"is": "alice@example.test"}},
                    {"mcp_tool": {"in": ["search_tickets", "get_ticket"]}}]}}]}]},
            port=port))
        # an MCP client's token for alice (registered, PKCE, sign-in and consent)
        tokens = Flow(port, f"mcp.test:{port}").tokens("alice@example.test")
        yield Env(gw, port, metrics_port, audit_file, tokens["access_token"],
                  tokens["client_id"])


def post(env: Env, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
    answer = Flow(env.port, f"mcp.test:{env.port}", path=path).rpc(body, env.token)
    return answer.status, answer.headers, answer.body


def listed(message: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in message["result"]["tools"]]


def test_a_json_list_shows_only_the_allowed_tools(env: Env) -> None:
    status, headers, body = post(env, "/json/mcp",
                                 {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 200, body
    message = json.loads(body)
    assert listed(message) == ["search_tickets", "get_ticket"]
    assert message["result"]["nextCursor"] == "next"
    assert int(headers["content-length"]) == len(body)


def test_an_sse_list_shows_only_the_allowed_tools(env: Env) -> None:
    status, headers, body = post(env, "/sse/mcp",
                                 {"jsonrpc": "2.0", "id": "a", "method": "tools/list"})
    assert status == 200, body
    assert headers["content-type"] == "text/event-stream"
    assert b"delete_ticket" not in body
    data = [line[len(b"data: "):] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert [listed(json.loads(d)) for d in data] == [["search_tickets", "get_ticket"]]
    assert body.startswith(b": hello\n\n")


def test_each_message_audited_with_the_hash_not_the_arguments(env: Env) -> None:
    arguments = {"query": SECRET_ARGUMENT}
    status, _, body = post(env, "/json/mcp", [
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
         "params": {"name": "search_tickets", "arguments": arguments}},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}])
    assert status == 200, body

    def events() -> list[dict[str, Any]]:
        if not env.audit_file.exists():
            return []
        return [e for e in map(json.loads, env.audit_file.read_text().splitlines())
                if e.get("mcp_id") in ("7", "8")]

    deadline = time.monotonic() + 10
    while len(events()) < 2:
        assert time.monotonic() < deadline, "audit events not written"
        time.sleep(0.1)
    call, listing = events()
    assert (call["via"], call["mcp_method"], call["mcp_name"], call["decision"]) == \
        ("mcp", "tools/call", "search_tickets", "allow")
    assert (call["client_id"], call["email"]) == (env.client_id, "alice@example.test")
    assert listing["mcp_method"] == "tools/list"
    sent = json.dumps(arguments)  # as the test's client spelled them in the body
    assert call["arguments_sha256"] == hashlib.sha256(sent.encode()).hexdigest()
    assert SECRET_ARGUMENT not in env.audit_file.read_text()


def test_metrics_per_route_method_and_tool(env: Env) -> None:
    post(env, "/json/mcp", {"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    conn = http.client.HTTPConnection("127.0.0.1", env.metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    assert 'gateway_mcp_messages_total{decision="allow",method="tools/list",' \
           'route="tickets",tool=""}' in text
    assert 'gateway_mcp_list_entries_total{method="tools/list",result="hidden",' \
           'route="tickets"}' in text
