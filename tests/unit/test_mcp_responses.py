"""An MCP route's list results filtered on their way to the client (``mcp_response``),
through the real codecs: JSON bodies with their new length, SSE streams event by event
as they come, HTTP/1.1 and HTTP/2, the upstream's answer split across reads; what cannot
be filtered becomes JSON-RPC errors; other routes and other requests are untouched.

The request side is the real one (``mcp_request``: the JSON-RPC body read and each
message decided by the route's policy); only the authorizer is a small one deciding for a
fixed caller, as the HTTP entrance does with a session."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

import h2.config
import h2.connection
import h2.events
import httptools
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller
from gateway.authorize.decide import decide, http_asked, mcp_asked
from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange import mcp_response
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.routing.plan import build_plan
from gateway.mcp.errors import JSON_HEADERS, denied_answer
from gateway.mcp.listing import LIST_UNREADABLE
from gateway.mcp.messages import McpVerdict
from gateway.observability.audit import AUDIT, AuditFile
from gateway.observability.mcp_metrics import TOOLS_PER_ROUTE, McpMetrics
from gateway.observability.metrics import REGISTRY
from gateway.observability.tracing.tracer import Tracer
from tests.support import h2frames as f
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import IDENTITY, SECRET, base_config, load

ALLOWED_TOOLS = ["search", "get_ticket"]
SNAPSHOT = load(base_config(timeout_idle="5s", policy=[
    {"from": "https://mcp.example.com", "to": "http://127.0.0.1:9000/",
     "mcp": {"max_response_bytes": 4096},
     "policy": [{"allow": {"and": [{"email": {"is": "ada@example.com"}},
                                   {"mcp_tool": {"in": ALLOWED_TOOLS}}]}}]},
    {"from": "https://app.example.com", "to": "http://127.0.0.1:9001/",
     "allow_any_authenticated_user": True},
], shared_secret=SECRET, cookie_secret=SECRET, **IDENTITY))
CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
CALLER = Caller("u1", "ada@example.com", ("support",), {}, 2e9, client_id="https://c.test/")
LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
CALL = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search"}}'


class Decides:
    """The route's policy on each message for ``CALLER``, as the HTTP entrance decides
    (``http_requests._decide_mcp``, without sessions): allowed, or the JSON-RPC errors."""

    def authorize(self, request: RequestInfo, route: Route) -> Allow | Reply:
        if request.mcp is None:
            return Allow(reason="allowed", caller=CALLER)
        asked = http_asked(request, 1000.0)
        verdicts = []
        for call in request.mcp.calls:
            verdict = decide(route.policy, CALLER, mcp_asked(asked, call))
            verdicts.append(McpVerdict(call, verdict.allowed, verdict.rule,
                                       (verdict.reason,)))
        if all(v.allowed for v in verdicts):
            return Allow(reason="allowed", caller=CALLER, mcp=tuple(verdicts))
        status, body = denied_answer(request.mcp, verdicts)
        return Reply(status, body, JSON_HEADERS, "denied", CALLER, mcp=tuple(verdicts))

    def handles(self, host: str, path: str) -> bool:
        return False

    def internal(self, request: RequestInfo, body: bytes = b"") -> None:
        return None

    def sign_in(self, request: RequestInfo) -> Reply:
        return Reply(401, b"", ())


def tools_result(*names: str, id_value: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_value,
            "result": {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                 for n in names], "nextCursor": "n2"}}


def names(message: dict[str, Any]) -> list[str]:
    return [t["name"] for t in message["result"]["tools"]]


def json_answer(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            % len(body) + extra + b"etag: \"v1\"\r\n\r\n" + body)


def sse_head() -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(message: dict[str, Any], id_text: str = "e1") -> bytes:
    return b"event: message\r\nid: " + id_text.encode() + b"\r\ndata: " + \
        json.dumps(message).encode() + b"\r\n\r\n"


class McpResponseCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.new_core()
        self.asked: list[tuple[str, str]] = []
        real = mcp_response.entry_predicate

        def predicate(*args: Any) -> Any:  # the real one, each question recorded
            decides = real(*args)

            def allowed(method: str, name: str) -> bool:
                self.asked.append((method, name))
                return decides(method, name)
            return allowed

        self.patch(mcp_response, "entry_predicate", predicate)

    def new_core(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=True,
                              authorizer=Decides())
        self.core.start()
        self.addCleanup(self.core.stop)

    def upstream(self) -> MemoryUpstream:
        return MemoryUpstream(self.reactor)


class Http1Case(McpResponseCase):
    def setUp(self) -> None:
        super().setUp()
        self.new_client()

    def new_client(self) -> None:
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)
        self.responses: list[dict[str, Any]] = []
        self.parser = httptools.HttpResponseParser(self)

    # (httptools callbacks: the client's view)
    def on_message_begin(self) -> None:
        self.responses.append({"headers": {}, "body": b"", "complete": False})

    def on_header(self, name: bytes, value: bytes) -> None:
        self.responses[-1]["headers"][name.lower()] = value

    def on_headers_complete(self) -> None:
        self.responses[-1]["status"] = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.responses[-1]["body"] += body

    def on_message_complete(self) -> None:
        self.responses[-1]["complete"] = True

    def client_reads(self) -> None:
        data = self.client.value()
        self.client.clear()
        self.parser.feed_data(data)

    def post(self, host: bytes = b"mcp.example.com", method: bytes = b"POST",
             body: bytes = LIST) -> MemoryUpstream:
        body = body if method == b"POST" else b""
        self.conn.dataReceived(method + b" /mcp HTTP/1.1\r\nHost: " + host +
                               b"\r\ncontent-type: application/json\r\n"
                               b"content-length: %d\r\n\r\n" % len(body) + body)
        upstream = self.upstream()
        upstream.received()
        return upstream


class Http1Tests(Http1Case):
    def test_a_json_list_keeps_the_allowed_tools_and_says_its_new_length(self) -> None:
        upstream = self.post()
        answer = json_answer(json.dumps(tools_result("search", "delete_all",
                                                     "get_ticket")).encode())
        for i in range(0, len(answer), 7):  # the answer in small reads
            upstream.respond(answer[i:i + 7])
            self.client_reads()
            if i + 7 < len(answer):
                self.assertEqual(self.responses, [], "nothing goes out before the end")
        [response] = self.responses
        self.assertTrue(response["complete"])
        message = json.loads(response["body"])
        self.assertEqual(names(message), ["search", "get_ticket"])
        self.assertEqual(message["result"]["nextCursor"], "n2")
        self.assertEqual(int(response["headers"][b"content-length"]), len(response["body"]))
        self.assertNotIn(b"etag", response["headers"])
        self.assertNotIn(b"transfer-encoding", response["headers"])
        self.assertEqual(self.asked, [("tools/call", "search"), ("tools/call", "delete_all"),
                                      ("tools/call", "get_ticket")])

    def test_an_sse_list_is_filtered_event_by_event_as_it_streams(self) -> None:
        upstream = self.post()
        upstream.respond(sse_head())
        progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progress": 1}}
        first = b": keep-alive\n\n" + event(progress, "e0")
        upstream.respond(chunk(first))
        self.client_reads()
        [response] = self.responses
        # what needs no filtering goes on at once, byte for byte, before the stream ends
        self.assertEqual(response["body"], first)
        self.assertNotIn(b"content-length", response["headers"])
        listed = event(tools_result("delete_all", "search"))
        upstream.respond(chunk(listed[:20]))
        upstream.respond(chunk(listed[20:41]))
        self.client_reads()
        self.assertEqual(response["body"], first, "half an event is held back")
        upstream.respond(chunk(listed[41:]))
        self.client_reads()
        rest = response["body"][len(first):]
        self.assertTrue(rest.startswith(b"event: message\nid: e1\ndata: "), rest)
        self.assertEqual(names(json.loads(rest.split(b"data: ", 1)[1])), ["search"])
        self.assertFalse(response["complete"])
        upstream.respond(b"0\r\n\r\n")
        self.client_reads()
        self.assertTrue(response["complete"])

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(min_value=0, max_value=2000), max_size=10))
    def test_any_split_of_the_stream_gives_the_client_the_same_bytes(
            self, cuts: list[int]) -> None:
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
        stream = (b"\xef\xbb\xbf: hi\r\n\r\n" + event(progress, "p").replace(b"\r\n", b"\r")
                  + event(tools_result("a", "search", "b", "get_ticket")) + b"retry: 5\n\n"
                  + event(tools_result("x", id_value=3)).replace(b"\r\n", b"\n"))
        bodies = []
        for points in ([], sorted({c % len(stream) for c in cuts})):
            self.new_core()
            self.new_client()
            upstream = self.post()
            upstream.respond(sse_head())
            last = 0
            for point in [*points, len(stream)]:
                if point > last:
                    upstream.respond(chunk(stream[last:point]))
                last = point
            upstream.respond(b"0\r\n\r\n")
            self.client_reads()
            [response] = self.responses
            self.assertTrue(response["complete"])
            bodies.append(response["body"])
        # the same bytes, but for the LF of a CRLF cut after the CR that ended an event
        self.assertEqual(bodies[0].replace(b"\r\n", b"\r"), bodies[1].replace(b"\r\n", b"\r"))
        self.assertNotIn(b'"a"', bodies[0])
        self.assertNotIn(b'"x"', bodies[0])
        self.assertIn(b"get_ticket", bodies[0])
        self.assertTrue(bodies[0].startswith(b"\xef\xbb\xbf: hi\r\n\r\n"))

    def test_a_list_larger_than_the_limit_is_an_error_not_the_list(self) -> None:
        upstream = self.post()
        big = json.dumps(tools_result(*[f"tool{i}" for i in range(300)])).encode()
        upstream.respond(json_answer(big)[:6000])
        self.client_reads()
        [response] = self.responses
        message = json.loads(response["body"])
        self.assertEqual((message["id"], message["error"]["code"]), (1, LIST_UNREADABLE))
        self.assertIn("mcp.max_response_bytes", message["error"]["message"])
        self.assertTrue(upstream.transport.disconnecting, "the rest is not read")

    def test_an_sse_event_larger_than_the_limit_ends_the_stream(self) -> None:
        upstream = self.post()
        upstream.respond(sse_head() + chunk(b"data: " + b"x" * 5000))
        self.client_reads()
        [response] = self.responses
        self.assertTrue(response["complete"])
        self.assertNotIn(b"xxxx", response["body"])
        data = json.loads(response["body"].split(b"data: ", 1)[1])
        self.assertEqual(data["error"]["code"], LIST_UNREADABLE)

    def test_a_gzip_json_list_is_decoded_and_filtered(self) -> None:
        upstream = self.post()
        body = gzip.compress(json.dumps(tools_result("search", "nope")).encode())
        upstream.respond(json_answer(body, b"content-encoding: gzip\r\n"))
        self.client_reads()
        [response] = self.responses
        self.assertNotIn(b"content-encoding", response["headers"])
        self.assertEqual(names(json.loads(response["body"])), ["search"])

    def test_another_encoding_is_refused(self) -> None:
        self.refused(b"content-encoding: br\r\n")

    def test_another_media_type_is_refused(self) -> None:
        self.refused(b"")

    def test_a_range_of_a_list_is_refused(self) -> None:
        upstream = self.post()
        body = json.dumps(tools_result("nope")).encode()
        upstream.respond(json_answer(body).replace(b"200 OK", b"206 Partial Content"))
        self.client_reads()
        [response] = self.responses
        self.assertEqual(response["status"], 200)
        self.assertEqual(json.loads(response["body"])["error"]["code"], LIST_UNREADABLE)

    def refused(self, extra: bytes) -> None:
        upstream = self.post()
        body = json.dumps(tools_result("nope")).encode()
        answer = json_answer(body, extra)
        if not extra:
            answer = answer.replace(b"application/json", b"text/plain")
        upstream.respond(answer)
        self.client_reads()
        [response] = self.responses
        self.assertEqual(response["headers"][b"content-type"], b"application/json")
        self.assertEqual(json.loads(response["body"])["error"]["code"], LIST_UNREADABLE)
        self.assertNotIn(b"nope", response["body"])

    def test_a_get_stream_replaying_a_list_is_filtered(self) -> None:
        upstream = self.post(method=b"GET")
        upstream.respond(sse_head() + chunk(event(tools_result("nope", "search",
                                                               id_value=7))))
        self.client_reads()
        data = self.responses[0]["body"].split(b"data: ", 1)[1]
        self.assertEqual(names(json.loads(data)), ["search"])

    def test_a_get_answered_otherwise_than_by_a_stream_is_relayed(self) -> None:
        upstream = self.post(method=b"GET")
        page = b"<html>the server's own page</html>"
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n"
                         b"content-length: %d\r\n\r\n" % len(page) + page)
        self.client_reads()
        self.assertEqual(self.responses[0]["body"], page)

    def test_a_call_result_passes_untouched(self) -> None:
        upstream = self.post(body=CALL)
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {
            "content": [{"type": "text", "text": "three tickets"}]}}).encode()
        upstream.respond(json_answer(body))
        self.client_reads()
        self.assertEqual(self.responses[0]["body"], body)

    def test_a_list_answered_to_a_call_is_filtered(self) -> None:
        """A list result on the answer to a ``tools/call`` is filtered too: the official
        Python SDK keys its streams by the id's text, so a call sent with the id of a
        ``tools/list`` in progress got the whole list on its own answer, which the
        gateway passed on unfiltered (a security review, with mcp 2.3.0)."""
        self.assert_filtered(json_answer(json.dumps(tools_result(
            "search", "nope", id_value=2)).encode()))

    def test_a_list_streamed_to_a_call_is_filtered(self) -> None:
        self.assert_filtered(sse_head() + chunk(event(tools_result(
            "search", "nope", id_value="2"))) + b"0\r\n\r\n")

    def assert_filtered(self, answer: bytes) -> None:
        upstream = self.post(body=CALL)
        upstream.respond(answer)
        self.client_reads()
        text = self.responses[-1]["body"]
        self.assertIn(b"search", text)
        self.assertNotIn(b"nope", text)

    def test_another_route_is_untouched(self) -> None:
        upstream = self.post(host=b"app.example.com")
        body = json.dumps(tools_result("nope")).encode()
        upstream.respond(json_answer(body))
        self.client_reads()
        self.assertEqual(self.responses[0]["body"], body)


class RecordTests(Http1Case):
    """What is recorded of an MCP request: an audit event per message with the hash of
    its arguments, never the arguments; the counters; a span per message."""

    ALLOWED = json.dumps([
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "search", "arguments": {"q": "secret words"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]).encode()
    DENIED = json.dumps([
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "delete_all", "arguments": {"all": True}}}]).encode()

    def setUp(self) -> None:
        super().setUp()
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        self.path = os.path.join(directory, "audit.jsonl")
        AUDIT.configure((), False, AuditFile(self.path), None)
        self.addCleanup(AUDIT.configure, (), False, None, None)

    def send(self, body: bytes) -> None:
        self.conn.dataReceived(b"POST /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n"
                               b"MCP-Protocol-Version: 2025-03-26\r\n"  # (batches)
                               b"content-type: application/json\r\n"
                               b"content-length: %d\r\n\r\n" % len(body) + body)

    def answered(self) -> None:
        self.send(self.ALLOWED)
        upstream = self.upstream()
        upstream.received()
        upstream.respond(json_answer(b'[{"jsonrpc":"2.0","id":2,"result":{"content":[]}}]'))
        self.client_reads()
        self.assertTrue(self.responses[0]["complete"])

    def events(self) -> list[dict[str, Any]]:
        assert AUDIT.file is not None
        AUDIT.file.flush()
        with open(self.path) as lines:
            return [json.loads(line) for line in lines]

    def test_one_audit_event_per_message_with_the_hash_not_the_arguments(self) -> None:
        self.answered()
        self.send(self.DENIED)  # (refused whole by the request side: never upstream)
        self.client_reads()
        events = self.events()
        self.assertEqual([(e["via"], e["mcp_method"], e.get("mcp_name"), e["decision"])
                          for e in events],
                         [("mcp", "tools/call", "search", "allow"),
                          ("mcp", "notifications/initialized", None, "allow"),
                          ("mcp", "tools/call", "search", "allow"),
                          ("mcp", "tools/call", "delete_all", "deny")])
        first = events[0]
        # (the arguments exactly as the body spells them: json.dumps puts a space)
        digest = hashlib.sha256(b'{"q": "secret words"}').hexdigest()
        self.assertEqual((first["client_id"], first["mcp_id"], first["arguments_sha256"],
                          first["rule"], first["status"], first["user_id"]),
                         ("https://c.test/", "2", digest, "allow[0].and", 200, "u1"))
        self.assertNotIn("mcp_id", events[1])
        self.assertEqual(events[3]["rule"], "allow[0].and[1]")  # mcp_tool: not matched
        with open(self.path) as text:
            self.assertNotIn("secret words", text.read())

    def test_counted_per_route_method_and_tool(self) -> None:
        labels = {"route": "https://mcp.example.com", "method": "tools/call"}

        def value(tool: str, decision: str) -> float:
            return REGISTRY.get_sample_value("gateway_mcp_messages_total", {
                **labels, "tool": tool, "decision": decision}) or 0.0

        before = (value("search", "allow"), value("other", "deny"))
        self.answered()
        self.send(self.DENIED)
        self.assertEqual((value("search", "allow"), value("other", "deny")),
                         (before[0] + 2, before[1] + 1))

    def test_a_span_per_message_named_as_the_conventions_say(self) -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.core.tracer = Tracer(provider.get_tracer("test"), 1.0)
        self.answered()
        spans = {s.name: s for s in exporter.get_finished_spans()}
        search = spans["tools/call search"]
        digest = hashlib.sha256(b'{"q": "secret words"}').hexdigest()
        self.assertEqual(dict(search.attributes or {}), {
            "mcp.method.name": "tools/call", "jsonrpc.request.id": "2",
            "gen_ai.tool.name": "search", "gen_ai.operation.name": "execute_tool",
            "mcp.protocol.version": "2025-03-26", "network.transport": "tcp",
            "network.protocol.name": "http", "gateway.decision": "allow",
            "gateway.rule": "allow[0].and", "gateway.mcp.client_id": "https://c.test/",
            "gateway.mcp.arguments_sha256": digest})
        server = next(s for s in spans.values() if s.kind.name == "SERVER")
        self.assertEqual(search.parent.span_id if search.parent else None,
                         server.context.span_id)
        self.assertNotIn("jsonrpc.request.id",
                         spans["notifications/initialized"].attributes or {})
        exporter.clear()
        self.send(self.DENIED)
        denied = {s.name: s for s in exporter.get_finished_spans()}["tools/call delete_all"]
        self.assertEqual((denied.attributes or {})["error.type"], "-31403")
        self.assertFalse(denied.status.is_ok)


class ToolLabelTests(SynchronousTestCase):
    def test_only_allowed_names_and_at_most_a_bound_per_route(self) -> None:
        metrics = McpMetrics()
        self.assertEqual(metrics.tool_label("r", "tools/call", "x", False), "other")
        self.assertEqual(metrics.tool_label("r", "resources/read", "file:///a", True), "")
        labels = {metrics.tool_label("r", "tools/call", f"t{i}", True)
                  for i in range(TOOLS_PER_ROUTE + 10)}
        self.assertEqual(len(labels), TOOLS_PER_ROUTE + 1)
        self.assertIn("other", labels)
        self.assertEqual(metrics.tool_label("r", "tools/call", "t0", True), "t0")
        self.assertEqual(metrics.tool_label("r2", "tools/call", "t99", True), "t99")


class Http2Tests(McpResponseCase):
    def setUp(self) -> None:
        super().setUp()
        self.transport = StringTransport(peerAddress=CLIENT)
        self.server = H2Connection(self.core)
        self.server.makeConnection(self.transport)
        self.client = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.client.initiate_connection()
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.ended = False
        self.pump()

    def pump(self) -> None:
        while True:
            outgoing = self.client.data_to_send()
            if outgoing:
                f.deliver(self.server, self.reactor, outgoing)
            incoming = self.transport.value()
            self.transport.clear()
            if not outgoing and not incoming:
                return
            for ev in self.client.receive_data(incoming):
                if isinstance(ev, h2.events.ResponseReceived):
                    self.headers = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    self.body += ev.data
                    self.client.acknowledge_received_data(ev.flow_controlled_length,
                                                          ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended = True

    def post(self) -> MemoryUpstream:
        stream_id = self.client.get_next_available_stream_id()
        self.client.send_headers(stream_id, [
            (b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"mcp.example.com"),
            (b":path", b"/mcp"), (b"content-length", b"%d" % len(LIST))])
        self.client.send_data(stream_id, LIST, end_stream=True)
        self.pump()
        upstream = self.upstream()
        upstream.received()
        return upstream

    def test_a_json_list_with_its_new_length(self) -> None:
        upstream = self.post()
        answer = json_answer(json.dumps(tools_result("nope", "search")).encode())
        upstream.respond(answer[:50])
        upstream.respond(answer[50:])
        self.pump()
        self.assertTrue(self.ended)
        self.assertEqual(names(json.loads(self.body)), ["search"])
        self.assertEqual(int(self.headers[b"content-length"]), len(self.body))

    def test_an_sse_list_streams(self) -> None:
        upstream = self.post()
        upstream.respond(sse_head() + chunk(event(tools_result("nope", "get_ticket"))))
        self.pump()
        self.assertFalse(self.ended)
        self.assertNotIn(b"content-length", self.headers)
        self.assertEqual(names(json.loads(self.body.split(b"data: ", 1)[1])), ["get_ticket"])
        upstream.respond(b"0\r\n\r\n")
        self.pump()
        self.assertTrue(self.ended)
