"""List results filtered to what the caller may use (``gateway.mcp.listing``): each entry
decided as the call that would use it, everything else left as it is, and a result the
gateway cannot read never passed on unfiltered."""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp.listing import (
    LIST_UNREADABLE,
    Counts,
    filter_data,
    filter_json,
    filter_message,
    list_calls,
)
from gateway.mcp.messages import McpCall, McpRequest

ALLOWED = {("tools/call", "search"), ("prompts/get", "greet"),
           ("resources/read", "file:///public/a"), ("resources/read", "file:///public/{x}")}
asked: list[tuple[str, str]] = []


def allowed(method: str, name: str) -> bool:
    asked.append((method, name))
    return (method, name) in ALLOWED


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "inputSchema": {"type": "object"}} for n in names]


def response(id_value: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_value, "result": result}


LIST = McpRequest((McpCall(1, "tools/list"),))
PENDING = list_calls(LIST)


def run(message: Any, pending: Any = PENDING) -> tuple[Any, bool, Counts]:
    counts = Counts.empty()
    out, touched = filter_message(message, pending, allowed, counts)
    return out, touched, counts


class FilterTests(SynchronousTestCase):
    def setUp(self) -> None:
        asked.clear()

    def test_tools_are_kept_when_the_caller_may_call_them(self) -> None:
        result = {"tools": tools("search", "delete"), "nextCursor": "c2", "_meta": {"k": 1}}
        out, touched, counts = run(response(1, result))
        self.assertTrue(touched)
        self.assertEqual(out, response(1, {"tools": tools("search"), "nextCursor": "c2",
                                           "_meta": {"k": 1}}))
        self.assertEqual(asked, [("tools/call", "search"), ("tools/call", "delete")])
        self.assertEqual((counts.shown, counts.hidden), ({"tools/list": 1},
                                                         {"tools/list": 1}))

    def test_prompts_resources_and_templates(self) -> None:
        request = McpRequest((McpCall("p", "prompts/list"), McpCall("r", "resources/list"),
                              McpCall("t", "resources/templates/list")), batch=True)
        batch = [
            response("p", {"prompts": [{"name": "greet"}, {"name": "leak"}]}),
            response("r", {"resources": [{"uri": "file:///public/a", "name": "a"},
                                         {"uri": "file:///secret", "name": "s"}]}),
            response("t", {"resourceTemplates": [
                {"uriTemplate": "file:///public/{x}", "name": "p"},
                {"uriTemplate": "file:///{path}", "name": "any"}]}),
        ]
        out, _, _ = run(batch, list_calls(request))
        self.assertEqual([m["result"] for m in out], [
            {"prompts": [{"name": "greet"}]},
            {"resources": [{"uri": "file:///public/a", "name": "a"}]},
            {"resourceTemplates": [{"uriTemplate": "file:///public/{x}", "name": "p"}]}])

    def test_everything_else_is_left_as_it_is(self) -> None:
        others = [
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"tools": 1}},
            {"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {}},
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "no"}},
            response(2, {"content": [{"type": "text", "text": "tools"}]}),
        ]
        for message in others:
            self.assertEqual(run(message), (message, False, Counts.empty()))
        self.assertEqual(asked, [])

    def test_a_list_result_under_another_id_is_filtered_by_its_shape(self) -> None:
        # a client comparing Number(id) takes "1" and 1.0 for the request 1; a resumed
        # stream replays answers to an earlier request's calls
        for id_value in ("1", 1.0, 77):
            out, touched, _ = run(response(id_value, {"tools": tools("search", "x")}))
            self.assertTrue(touched)
            self.assertEqual(out["result"]["tools"], tools("search"))

    def test_a_result_beside_a_method_is_still_filtered(self) -> None:
        # no valid message has both, but a lenient client may read it as a response
        message = {**response(1, {"tools": tools("search", "x")}), "method": "ping"}
        out, touched, _ = run(message)
        self.assertTrue(touched)
        self.assertEqual(out["result"]["tools"], tools("search"))

    def test_an_integral_float_id_is_the_request_it_equals(self) -> None:
        out, _, _ = run(response(1.0, {"nope": []}))
        self.assertEqual(out["error"]["code"], LIST_UNREADABLE)

    def test_a_malformed_list_result_becomes_an_error(self) -> None:
        for result in ([], {"tools": {"name": "x"}}, {"nextCursor": "a"},
                       {"tools": [{"name": 3}]}, {"tools": ["search"]}):
            out, touched, counts = run(response(1, result))
            self.assertTrue(touched)
            self.assertEqual(out["id"], 1)
            self.assertEqual(out["error"]["code"], LIST_UNREADABLE)
            self.assertIn("tools/list", out["error"]["message"])
            self.assertEqual(counts.refused, {"tools/list": 1})

    def test_a_second_list_member_is_filtered_by_its_own_rule(self) -> None:
        out, _, _ = run(response(1, {"tools": tools("search"),
                                     "prompts": [{"name": "greet"}, {"name": "no"}]}))
        self.assertEqual(out["result"]["prompts"], [{"name": "greet"}])


class BodyTests(SynchronousTestCase):
    def test_a_json_body_without_a_list_result_is_the_same_bytes(self) -> None:
        body = b'{"jsonrpc": "2.0", "id": 5, "result": {"content": []}}'
        self.assertIs(filter_json(body, LIST, PENDING, allowed, Counts.empty()), body)

    def test_a_json_body_with_one_is_written_anew(self) -> None:
        body = json.dumps(response(1, {"tools": tools("search", "drop")})).encode()
        out = json.loads(filter_json(body, LIST, PENDING, allowed, Counts.empty()))
        self.assertEqual(out, response(1, {"tools": tools("search")}))

    def test_duplicate_members_fail_closed(self) -> None:
        # a reader keeping the first "tools" would see the one the gateway did not filter
        body = (b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"drop"}],'
                b'"tools":[{"name":"search"}]}}')
        out = json.loads(filter_json(body, LIST, PENDING, allowed, Counts.empty()))
        self.assertEqual(out["id"], 1)
        self.assertEqual(out["error"]["code"], LIST_UNREADABLE)

    def test_a_body_that_is_not_json_is_an_error_per_call(self) -> None:
        batch = McpRequest((McpCall(1, "tools/list"), McpCall(2, "ping"),
                            McpCall(None, "notifications/initialized")), batch=True)
        for body in (b"<html>", b'{"a":', b"\xff\xfe", b"[" * 100000):
            out = json.loads(filter_json(body, batch, list_calls(batch), allowed,
                                         Counts.empty()))
            self.assertEqual([(e["id"], e["error"]["code"]) for e in out],
                             [(1, LIST_UNREADABLE), (2, LIST_UNREADABLE)])
        single = json.loads(filter_json(b"nope", LIST, PENDING, allowed, Counts.empty()))
        self.assertEqual(single["id"], 1)

    def test_an_answer_without_a_list_call_is_parsed_only_when_it_could_hold_a_list(
            self) -> None:
        call = McpRequest((McpCall(2, "tools/call", "search"),))
        # no list member named, no \u escape: no reader finds a list in it (not parsed)
        plain = b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}} not even JSON'
        self.assertIs(filter_json(plain, call, {}, allowed, Counts.empty()), plain)
        for hidden in (
                b'{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"x"}]}}',
                b'{"jsonrpc":"2.0","id":2,"result":{"\\u0074ools":[{"name":"x"}]}}',
                '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"x"}]}}'.encode(
                    "utf-16")):
            out = json.loads(filter_json(hidden, call, {}, allowed, Counts.empty()))
            self.assertEqual(out["result"]["tools"], [], hidden)

    def test_sse_data(self) -> None:
        counts = Counts.empty()
        self.assertIsNone(filter_data('{"jsonrpc":"2.0","method":"ping"}', PENDING,
                                      allowed, counts))
        self.assertIsNone(filter_data("", PENDING, allowed, counts))
        data = filter_data(json.dumps(response(1, {"tools": tools("a", "search")})),
                           PENDING, allowed, counts)
        assert data is not None
        self.assertEqual(json.loads(data)["result"]["tools"], tools("search"))
        # data that cannot name a result goes on unparsed; an escape is parsed
        self.assertIsNone(filter_data("{not json, no such member", PENDING, allowed, counts))
        escaped = filter_data('{"id":1,"\\u0072esult":{"tools":[{"name":"x"}]}}', PENDING,
                              allowed, counts)
        assert escaped is not None
        self.assertEqual(json.loads(escaped)["result"]["tools"], [])
        refused = filter_data("{not json, result", PENDING, allowed, counts)
        assert refused is not None
        self.assertEqual(json.loads(refused)["error"]["code"], LIST_UNREADABLE)
