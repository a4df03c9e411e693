"""The MCP request metadata headers against the body (``gateway/mcp/headers.py``), the
``Origin`` rule, and the JSON-RPC errors answered for them (``gateway/mcp/errors.py``)."""

from __future__ import annotations

import base64
import json

from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp.errors import HEADER_MISMATCH, REFUSED, Refusal, denied_answer
from gateway.mcp.headers import (
    McpHeaders,
    check_agreement,
    origin_refusal,
    read_headers,
    requires_headers,
)
from gateway.mcp.jsonrpc import read_request
from gateway.mcp.messages import McpCall, McpRequest, McpVerdict

META = "io.modelcontextprotocol/protocolVersion"


def _request(method: str = "tools/call", name: str = "get_ticket", id_: object = 1,
             version: str = "", **params: object) -> McpRequest:
    body: dict[str, object] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        body["id"] = id_
    if method == "tools/call":
        params["name"] = name
    if method == "resources/read":
        params["uri"] = name
    if version:
        params["_meta"] = {META: version}
    body["params"] = params
    request = read_request(json.dumps(body).encode())
    assert isinstance(request, McpRequest)
    return request


def _headers(**values: str) -> McpHeaders:
    pairs = [(k.replace("_", "-").encode(), v.encode()) for k, v in values.items()]
    found = read_headers(pairs)
    assert isinstance(found, McpHeaders), found
    return found


class AgreementTests(SynchronousTestCase):
    def mismatch(self, found: McpHeaders, request: McpRequest) -> Refusal:
        refusal = check_agreement(found, request)
        assert refusal is not None
        self.assertEqual((refusal.status, refusal.code), (400, HEADER_MISMATCH))
        return refusal

    def test_agreeing_headers_pass(self) -> None:
        found = _headers(Mcp_Method="tools/call", Mcp_Name="get_ticket",
                         MCP_Protocol_Version="2026-07-28")
        self.assertIsNone(check_agreement(found, _request(version="2026-07-28")))
        self.assertIsNone(check_agreement(_headers(), _request()))

    def test_a_method_header_that_disagrees(self) -> None:
        refusal = self.mismatch(_headers(Mcp_Method="tools/list"), _request(id_="r"))
        self.assertEqual(refusal.id, "r")
        self.assertIn("'tools/list'", refusal.message)

    def test_a_name_header_that_disagrees(self) -> None:
        self.mismatch(_headers(Mcp_Method="tools/call", Mcp_Name="get_ticket"),
                      _request(name="delete_everything"))
        # a name on a method that has none
        self.mismatch(_headers(Mcp_Name="x"), _request("tools/list"))

    def test_base64_names_are_decoded_before_comparing(self) -> None:
        name = "Grüße ticket"
        encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
        self.assertIsNone(check_agreement(_headers(Mcp_Name=encoded), _request(name=name)))
        self.mismatch(_headers(Mcp_Name=encoded), _request(name="other"))
        self.assertIsInstance(read_headers([(b"mcp-name", b"=?base64?!!!?=")]), Refusal)

    def test_2026_07_28_requires_the_headers(self) -> None:
        self.mismatch(_headers(MCP_Protocol_Version="2026-07-28"), _request())
        self.mismatch(_headers(MCP_Protocol_Version="2026-07-28", Mcp_Method="tools/call"),
                      _request())
        self.mismatch(_headers(MCP_Protocol_Version="2026-07-28", Mcp_Method="resources/read"),
                      _request("resources/read", "file:///a"))
        # notifications have no header requirement in that revision
        self.assertIsNone(check_agreement(_headers(MCP_Protocol_Version="2026-07-28"),
                                          _request("notifications/x", id_=None)))
        # older versions do not require them
        self.assertIsNone(check_agreement(_headers(MCP_Protocol_Version="2025-11-25"),
                                          _request()))

    def test_the_version_header_must_match_the_body(self) -> None:
        self.mismatch(_headers(MCP_Protocol_Version="2025-11-25"),
                      _request(version="2026-07-28"))
        self.mismatch(_headers(), _request(version="2026-07-28"))

    def test_batches_agree_message_by_message(self) -> None:
        batch = read_request(json.dumps([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "b"}},
        ]).encode())
        assert isinstance(batch, McpRequest)
        refusal = self.mismatch(_headers(Mcp_Method="tools/call", Mcp_Name="a"), batch)
        self.assertIsNone(refusal.id)

    def test_malformed_headers(self) -> None:
        for pairs in ([(b"Mcp-Method", b"a"), (b"mcp-method", b"a")],
                      [(b"mcp-method", b"tools/call\x01")],
                      [(b"mcp-name", "é".encode())],
                      [(b"mcp-protocol-version", b"2025 11 25")]):
            with self.subTest(pairs=pairs):
                refusal = read_headers(pairs)
                assert isinstance(refusal, Refusal)
                self.assertEqual((refusal.status, refusal.code), (400, HEADER_MISMATCH))

    def test_versions_requiring_headers(self) -> None:
        self.assertEqual([requires_headers(v) for v in
                          ("", "2025-03-26", "2025-11-25", "2026-07-28", "2027-01-01", "DRAFT")],
                         [False, False, False, True, True, True])


class OriginTests(SynchronousTestCase):
    def test_absent_or_same_origin_passes(self) -> None:
        for origin, host in ((None, "mcp.example.com"),
                             (b"https://mcp.example.com", "mcp.example.com"),
                             (b"https://MCP.example.com:443", "mcp.example.com"),
                             (b"https://mcp.example.com:8443", "mcp.example.com:8443")):
            with self.subTest(origin=origin):
                headers = [(b"Origin", origin)] if origin else []
                self.assertIsNone(origin_refusal(headers, "https", host))

    def test_another_origin_is_403(self) -> None:
        for origin in (b"https://evil.example", b"http://mcp.example.com", b"null",
                       b"https://mcp.example.com:8443", b"https://mcp.example.com/x",
                       b"https://mcp.example.com.evil.example", b"https://u@mcp.example.com",
                       b"https://mcp.example.com:99999", b""):
            with self.subTest(origin=origin):
                refusal = origin_refusal([(b"origin", origin)], "https", "mcp.example.com")
                assert refusal is not None
                self.assertEqual((refusal.status, refusal.code, refusal.id), (403, REFUSED, None))
        twice = [(b"origin", b"https://mcp.example.com")] * 2
        self.assertIsNotNone(origin_refusal(twice, "https", "mcp.example.com"))


class DeniedAnswerTests(SynchronousTestCase):
    def test_a_single_denied_call_answers_its_id(self) -> None:
        call = McpCall(3, "tools/call", "delete_everything")
        status, body = denied_answer(McpRequest((call,)), [McpVerdict(call, False)])
        self.assertEqual(status, 200)
        answer = json.loads(body)
        self.assertEqual((answer["id"], answer["error"]["code"]), (3, REFUSED))
        self.assertIn("'delete_everything'", answer["error"]["message"])

    def test_a_batch_is_refused_whole(self) -> None:
        calls = (McpCall(1, "tools/call", "get_ticket"), McpCall(None, "notifications/x"),
                 McpCall(2, "tools/call", "delete_everything"))
        verdicts = [McpVerdict(calls[0], True), McpVerdict(calls[1], True),
                    McpVerdict(calls[2], False)]
        status, body = denied_answer(McpRequest(calls, batch=True), verdicts)
        answers = json.loads(body)
        self.assertEqual(status, 200)
        self.assertEqual([a["id"] for a in answers], [1, 2])
        self.assertIn("not forwarded", answers[0]["error"]["message"])
        self.assertIn("does not allow", answers[1]["error"]["message"])

    def test_nothing_to_answer_is_403_without_an_id(self) -> None:
        call = McpCall(None, "")
        status, body = denied_answer(McpRequest((call,)), [McpVerdict(call, False)])
        self.assertEqual((status, json.loads(body)["id"]), (403, None))
