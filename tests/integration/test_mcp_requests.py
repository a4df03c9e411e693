"""An MCP route's requests through the real daemon to a real upstream (the echo
upstream, which reports the SHA-256 of each body it read and logs every request), for a
person signed in through oidc-provider whose MCP client holds an access token for each
route (MCP routes take only their tokens: tests/support/mcp_oauth_flow.py gets them):
what is forwarded byte for byte, what is refused as JSON-RPC and never reaches the
upstream (docs/how-to/mcp-policy.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import _require_binary
from tests.support.browser import Browser, Reply
from tests.support.daemon import gateway_daemon
from tests.support.h2client import H2Client
from tests.support.mcp_oauth_flow import Flow, pkce
from tests.support.peers import Upstream, echo_upstream, oidc_provider
from tests.support.processes import free_port
from tests.support.rawhttp import one_shot, status_of

pytestmark = pytest.mark.integration

TOOLS_ALLOWED = ["get_ticket", "search_tickets"]


@dataclass
class Setup:
    port: int
    upstream: Upstream
    person: Browser
    tokens: dict[str, str]  # route prefix -> its access token

    def post(self, body: bytes, path: str = "/mcp", **headers: str) -> Reply:
        token = self.tokens["/small" if path.startswith("/small/") else ""]
        return self.person.request("POST", f"http://mcp.test:{self.port}{path}", body, {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "Authorization": f"Bearer {token}",
            **headers})

    def forwarded(self) -> int:
        """How many POSTs the upstream has read."""
        return self.upstream.process.log_text().count('"POST /')


def call(name: str, id_: object = 1, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


def error_of(reply: Reply) -> dict[str, Any]:
    assert reply.header("content-type") == "application/json", reply.headers
    answer = json.loads(reply.body)
    assert isinstance(answer, dict)
    return answer


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    _require_binary("node", "apt-get install -y nodejs npm")
    tmp = tmp_path_factory.mktemp("mcp-requests")
    port = free_port()
    with oidc_provider(tmp, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp, name="mcp") as up:
        signed_in = {"email": {"ends_with": "@example.test"}}
        config = {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "cookie_secure": False, "mcp_dynamic_client_registration": True,
            "codec_type": "auto",  # HTTP/1.1 and h2c
            "policy": [
                # where the person signs in (no MCP route: the fixture needs none of it)
                {"from": f"http://mcp.test:{port}", "prefix": "/landing/", "to": up.url,
                 "policy": [{"allow": {"and": [signed_in]}}]},
                {"from": f"http://mcp.test:{port}", "prefix": "/small/", "to": up.url,
                 "mcp": {"max_request_bytes": 2048},
                 "policy": [{"allow": {"and": [signed_in]}}]},
                {"from": f"http://mcp.test:{port}", "to": up.url, "mcp": {},
                 "policy": [{"allow": {"and": [
                     signed_in, {"mcp_tool": {"in": TOOLS_ALLOWED}}]}}]},
            ],
        }
        with gateway_daemon(tmp, config, port=port):
            person = Browser()
            landed = person.sign_in(f"http://mcp.test:{port}/landing/", "alice@example.test")
            assert landed.status == 200, (landed.status, landed.body[:300])
            flow = Flow(port, f"mcp.test:{port}", browser=person)
            client_id = flow.register()
            tokens = {}
            for prefix in ("", "/small"):
                verifier, challenge = pkce()
                resource = flow.origin + prefix
                got = flow.authorize(flow.authorize_url(client_id, challenge,
                                                        resource=resource), "alice@example.test")
                assert "code" in got, got
                answer = flow.exchange(client_id, got["code"], verifier, resource=resource)
                assert answer.status == 200, answer.body[:300]
                tokens[prefix] = answer.json()["access_token"]
            yield Setup(port, up, person, tokens)


def test_an_allowed_call_is_forwarded_byte_for_byte(mcp: Setup) -> None:
    body = json.dumps(call("get_ticket", id="T-1"), indent=2).encode() + b"\n\n"
    before = mcp.forwarded()
    reply = mcp.post(body)
    assert reply.status == 200, reply.body[:300]
    echoed = json.loads(reply.body)
    assert (echoed["body_length"], echoed["body_sha256"]) == (
        len(body), hashlib.sha256(body).hexdigest())
    assert mcp.forwarded() == before + 1


def test_a_denied_call_is_a_json_rpc_error_and_never_upstream(mcp: Setup) -> None:
    before = mcp.forwarded()
    reply = mcp.post(json.dumps(call("delete_ticket", id_="d-1")).encode())
    assert reply.status == 200
    answer = error_of(reply)
    assert answer["id"] == "d-1"
    assert answer["error"]["code"] == -31403
    assert "'delete_ticket'" in answer["error"]["message"]
    assert mcp.forwarded() == before


def test_a_batch_hiding_a_denied_call_is_refused_whole(mcp: Setup) -> None:
    before = mcp.forwarded()
    batch = [call("get_ticket", 1), call("search_tickets", 2), call("delete_ticket", 3)]
    reply = mcp.post(json.dumps(batch).encode(), **{"MCP-Protocol-Version": "2025-03-26"})
    assert reply.status == 200
    answers = json.loads(reply.body)
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert all(a["error"]["code"] == -31403 for a in answers)
    assert mcp.forwarded() == before


def test_a_10_mib_body_whose_tool_name_comes_last(mcp: Setup) -> None:
    """Decided on the whole body: the name after 10 MiB of arguments is read, and the
    allowed one goes upstream whole."""
    blob = "x" * (10 * 1024 * 1024)

    def body(name: str) -> bytes:
        return (b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"arguments":'
                + json.dumps({"blob": blob}).encode() + b',"name":"' + name.encode() + b'"}}')

    before = mcp.forwarded()
    denied = mcp.post(body("delete_ticket"))
    assert (denied.status, error_of(denied)["error"]["code"]) == (200, -31403)
    assert mcp.forwarded() == before
    allowed = body("search_tickets")
    reply = mcp.post(allowed)
    assert reply.status == 200
    assert json.loads(reply.body)["body_sha256"] == hashlib.sha256(allowed).hexdigest()


def test_headers_that_disagree_with_the_body(mcp: Setup) -> None:
    before = mcp.forwarded()
    reply = mcp.post(json.dumps(call("delete_ticket")).encode(),
                     **{"Mcp-Method": "tools/call", "Mcp-Name": "get_ticket",
                        "MCP-Protocol-Version": "2026-07-28"})
    assert reply.status == 400
    assert error_of(reply)["error"]["code"] == -32020
    assert mcp.forwarded() == before


def test_another_origin_is_403(mcp: Setup) -> None:
    before = mcp.forwarded()
    reply = mcp.post(json.dumps(call("get_ticket")).encode(), Origin="http://evil.test")
    assert reply.status == 403
    assert error_of(reply)["id"] is None
    same = mcp.post(json.dumps(call("get_ticket")).encode(),
                    Origin=f"http://mcp.test:{mcp.port}")
    assert same.status == 200
    assert mcp.forwarded() == before + 1


def test_a_body_past_the_limit_is_413(mcp: Setup) -> None:
    before = mcp.forwarded()
    reply = mcp.post(json.dumps(call("get_ticket", blob="x" * 4096)).encode(),
                     path="/small/mcp")
    assert reply.status == 413
    assert error_of(reply)["error"]["code"] == -32600
    assert mcp.post(json.dumps(call("get_ticket")).encode(), path="/small/mcp").status == 200
    assert mcp.forwarded() == before + 1


def test_not_json_is_a_parse_error(mcp: Setup) -> None:
    before = mcp.forwarded()
    for body in (b'{"jsonrpc":"2.0","id":1,"method":"tools/call"', b"\xff\xfe{}",
                 b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                 b'{"name":"get_ticket","name":"delete_ticket"}}'):
        reply = mcp.post(body)
        assert reply.status == 400, body
        assert error_of(reply)["error"]["code"] == -32700
    assert mcp.forwarded() == before


def test_nobody_signed_in_is_answered_before_the_body(mcp: Setup) -> None:
    """A client without a session announcing 10 MiB (and waiting for 100 Continue) gets
    401 at once: the gateway neither asks for nor reads a body for nobody."""
    before = mcp.forwarded()
    head = (f"POST /mcp HTTP/1.1\r\nHost: mcp.test:{mcp.port}\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
            f"Content-Length: {10 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n")
    reply = one_shot(mcp.port, head.encode(), timeout=5.0)
    assert status_of(reply) == 401, reply[:200]
    assert mcp.forwarded() == before


def test_over_http2(mcp: Setup) -> None:
    """The same over HTTP/2 (h2c): the body comes as DATA frames, the allowed call goes
    upstream whole, the denied one is answered on its stream and never upstream."""
    headers = [("authorization", f"Bearer {mcp.tokens['']}"),
               ("accept", "application/json, text/event-stream"),
               ("content-type", "application/json")]
    authority = f"mcp.test:{mcp.port}"
    before = mcp.forwarded()
    allowed = json.dumps(call("search_tickets", q="x" * 12000)).encode()
    with H2Client(mcp.port) as client:
        reply = client.request("POST", "/mcp", authority, headers, allowed)
        assert reply.status == 200, reply.body[:300]
        assert json.loads(reply.body)["body_sha256"] == hashlib.sha256(allowed).hexdigest()
        denied = client.request("POST", "/mcp", authority, headers,
                                json.dumps(call("delete_ticket", id_=5)).encode())
        assert denied.status == 200
        assert json.loads(denied.body)["error"]["code"] == -31403
    assert mcp.forwarded() == before + 1


def test_a_session_id_is_bound_to_the_person(mcp: Setup) -> None:
    """The server's Mcp-Session-Id reaches the client bound to the person (security
    review): Alice's comes back to the server as it gave it; a second person's token
    with Alice's session id is refused (404, JSON-RPC) and never reaches the server."""
    started = mcp.post(json.dumps(call("get_ticket")).encode(), "/mcp-session/s-41")
    assert started.status == 200, started.body[:300]
    given = started.header("mcp-session-id")
    assert given.startswith("s-41.") and all(0x21 <= ord(c) <= 0x7E for c in given), given
    reply = mcp.post(json.dumps(call("get_ticket", 2)).encode(), **{"Mcp-Session-Id": given})
    assert reply.status == 200, reply.body[:300]
    assert ["Mcp-Session-Id", "s-41"] in json.loads(reply.body)["headers"]
    bob = Browser()
    landed = bob.sign_in(f"http://mcp.test:{mcp.port}/landing/", "bob@example.test")
    assert landed.status == 200, (landed.status, landed.body[:300])
    flow = Flow(mcp.port, f"mcp.test:{mcp.port}", browser=bob)
    client_id = flow.register()
    verifier, challenge = pkce()
    got = flow.authorize(flow.authorize_url(client_id, challenge, resource=flow.origin),
                         "bob@example.test")
    token = flow.exchange(client_id, got["code"], verifier, resource=flow.origin
                          ).json()["access_token"]
    before = mcp.forwarded()
    refused = bob.request("POST", f"http://mcp.test:{mcp.port}/mcp",
                          json.dumps(call("get_ticket", 3)).encode(), {
                              "Accept": "application/json, text/event-stream",
                              "Content-Type": "application/json",
                              "Authorization": f"Bearer {token}", "Mcp-Session-Id": given})
    assert refused.status == 404, refused.body[:300]
    assert "Session not found" in error_of(refused)["error"]["message"]
    assert mcp.forwarded() == before
