"""A request body of an MCP route read into its messages (``gateway/mcp/jsonrpc.py``),
and the adversarial bodies refused: the strictness is what keeps the gateway and the
MCP server reading the same messages."""

from __future__ import annotations

import hashlib
import json

from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Refusal
from gateway.mcp.jsonrpc import MAX_BATCH, arguments_sha256, read_request
from gateway.mcp.messages import McpCall, McpRequest


def _body(value: object) -> bytes:
    return json.dumps(value).encode()


def _call(id_: object, name: str, arguments: object = None) -> dict[str, object]:
    params: dict[str, object] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


def _strict_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({name for name, _ in pairs}) != len(pairs):
        raise ValueError("duplicate")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(name)


class ReadTests(SynchronousTestCase):
    def read(self, body: bytes, version: str = "") -> McpRequest:
        request = read_request(body, version)
        assert isinstance(request, McpRequest), request
        return request

    def refused(self, body: bytes, code: int, version: str = "") -> Refusal:
        refusal = read_request(body, version)
        assert isinstance(refusal, Refusal), refusal
        self.assertEqual((refusal.status, refusal.code), (400, code), refusal.message)
        return refusal

    def test_a_tool_call_names_its_tool_and_hashes_its_arguments(self) -> None:
        request = self.read(_body(_call(7, "search_tickets", {"q": "ü", "n": 1})), "2025-11-25")
        sent = b'{"q": "\\u00fc", "n": 1}'  # as json.dumps spelled them in the body
        self.assertEqual(request, McpRequest(
            (McpCall(7, "tools/call", "search_tickets", hashlib.sha256(sent).hexdigest()),),
            False, "2025-11-25"))
        self.assertEqual(arguments_sha256('{"q": "ü"}'),
                         hashlib.sha256('{"q": "ü"}'.encode()).hexdigest())

    def test_the_hash_is_of_the_arguments_exactly_as_sent(self) -> None:
        """The audit hash is of the arguments' bytes as the client sent them (and the
        server got them), cut out of the body exactly, wherever they are in it: not of
        a canonical form through Python's values, which cost 0.4 s for a million tiny
        objects on the reactor and made different numbers one (``1e400`` and ``2e400``
        were both ``Infinity``)."""
        def sent(arguments: bytes, before: bytes = b"", after: bytes = b"") -> str:
            body = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                    b'{' + before + b'"arguments" :\t' + arguments + b' ,"name":"t"' + after
                    + b'}}')
            request = self.read(body)
            self.assertEqual(request.calls[0].name, "t")
            return request.calls[0].arguments_sha256

        for arguments in (b'{ "b" : [1, 2.50, {"c":"\\\\"}], "a":"\xc3\xbc\\u00fc" }', b"{}",
                          b'{"x":"}"}'):
            with self.subTest(arguments=arguments):
                self.assertEqual(sent(arguments, b'"_meta":{"arguments":1}, '),
                                 hashlib.sha256(arguments).hexdigest())
        self.assertNotEqual(sent(b'{"n":1e400}'), sent(b'{"n":2e400}'))
        self.assertNotEqual(sent(b'{"n":0.1000000000000000000001}'), sent(b'{"n":0.1}'))
        self.assertNotEqual(sent(b'{"a":1,"b":2}'), sent(b'{"b":2,"a":1}'))  # documented
        escaped = self.read(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","par\\u0061ms":'
                            b'{"name":"t","\\u0061rguments": {"k":1} }}')
        self.assertEqual(escaped.calls[0].arguments_sha256,
                         hashlib.sha256(b'{"k":1}').hexdigest())
        batch = self.read(b'[ {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":'
                          b'"t","arguments":{"k":[1]}}} ,{"jsonrpc":"2.0","method":"n","params":'
                          b'{"arguments":[ 2 ]}}]')
        self.assertEqual([c.arguments_sha256 for c in batch.calls],
                         [hashlib.sha256(b'{"k":[1]}').hexdigest(),
                          hashlib.sha256(b"[ 2 ]").hexdigest()])

    def test_the_walk_refuses_what_json_refuses(self) -> None:
        """A differential of the member walk (``_object``) against ``json.loads`` on
        the places it reads itself: separators, white space, what comes after."""
        message = '"jsonrpc":"2.0","id":1,"method":"tools/call","params":{P}'
        params = '"name":"t","arguments":{"a":1}'
        for text in (
                "{" + message.replace("P", params) + "}",
                " \n{ " + message.replace("P", " " + params + " ") + " }\r\n",
                "{" + message.replace("P", params) + "} x",
                "{" + message.replace("P", params) + ",}",
                "{" + message.replace("P", params + ",") + "}",
                "{" + message.replace("P", params.replace(":", " ")) + "}",
                "{" + message.replace("P", params.replace(",", " ")) + "}",
                "{" + message.replace("P", "'name':1") + "}",
                "{" + message.replace("P", params).replace('"id":1', '"id" 1') + "}",
                "{" + message.replace("P", params) + "}}",
                "\ufeff{" + message.replace("P", params) + "}",
                "\u00a0{" + message.replace("P", params) + "}",
                "{" + message.replace("P", params.replace("}", "")) + "}",
                "{" + message.replace("P", params + ',"arguments":{}') + "}",
                "[{" + message.replace("P", params) + "},]",
                "[{" + message.replace("P", params) + "} {}]",
                "[{" + message.replace("P", params) + "}", "[]", "[ ]", "{}", "{ }", "",
                "{" + message.replace("P", '"name":"t","arguments":{"a":"\x01"}') + "}",
                "{" + message.replace("P", '"name":"t\x01","arguments":{}') + "}",
                "{" + message.replace("P", '"name":"t","arguments":NaN') + "}",
                "{" + message.replace("P", '"name":"t","arguments":[1,]') + "}"):
            with self.subTest(text=text):
                try:
                    json.loads(text, object_pairs_hook=_strict_pairs,
                               parse_constant=_no_constant)
                except ValueError:
                    self.refused(text.encode(), PARSE_ERROR)
                else:
                    self.assertNotEqual(getattr(read_request(text.encode()), "code", None),
                                        PARSE_ERROR)

    def test_names_of_each_method(self) -> None:
        for method, params, name in (
                ("prompts/get", {"name": "summary"}, "summary"),
                ("resources/read", {"uri": "file:///a"}, "file:///a"),
                ("resources/subscribe", {"uri": "file:///b"}, "file:///b"),
                ("tools/list", {}, ""), ("initialize", {"protocolVersion": "x"}, "")):
            with self.subTest(method=method):
                request = self.read(_body({"jsonrpc": "2.0", "id": "a", "method": method,
                                           "params": params}))
                self.assertEqual((request.calls[0].method, request.calls[0].name),
                                 (method, name))

    def test_notifications_and_client_responses(self) -> None:
        request = self.read(_body([
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 4, "result": {}},
            {"jsonrpc": "2.0", "id": 5, "error": {"code": 1, "message": "no"}}]))
        self.assertEqual([(c.id, c.method, c.answered) for c in request.calls],
                         [(None, "notifications/initialized", False), (4, "", False),
                          (5, "", False)])

    def test_the_meta_protocol_version_is_read(self) -> None:
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
        request = self.read(_body({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                   "params": {"_meta": meta}}))
        self.assertEqual(request.calls[0].protocol_version, "2026-07-28")

    def test_a_batch_hiding_a_call_after_allowed_ones_is_read_whole(self) -> None:
        calls = [_call(i, "get_ticket") for i in range(50)] + [_call(99, "delete_everything")]
        request = self.read(_body(calls))
        self.assertTrue(request.batch)
        self.assertEqual(len(request.calls), 51)
        self.assertEqual(request.calls[-1].name, "delete_everything")

    def test_a_10_mib_body_whose_tool_name_comes_last(self) -> None:
        body = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"blob":"'
                + b"x" * (10 * 1024 * 1024) + b'"},"name":"delete_everything"}}')
        request = self.read(body)
        self.assertEqual(request.calls[0].name, "delete_everything")

    def test_duplicate_keys_are_refused_wherever_they_are(self) -> None:
        for body in (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call",'
                b'"params":{"name":"x"}}',
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                b'"params":{"name":"get_ticket","name":"delete_everything"}}',
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                b'"params":{"name":"a","arguments":{"k":1,"k":2}}}',
                b'[{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}]'):
            with self.subTest(body=body):
                self.assertIn("duplicate member", self.refused(body, PARSE_ERROR).message)

    def test_not_json_is_a_parse_error(self) -> None:
        for body in (b"", b"{", b"\xef\xbb\xbf{}", b'{"jsonrpc":"2.0","id":NaN}',
                     b'{"a":Infinity}', b"[" * 100_000, b'{"jsonrpc":"2.0"} x',
                     b'{"jsonrpc":"2.0","id":1,"method":"p\xff"}',
                     b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xc0\xae"}}',
                     b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}'):
            with self.subTest(body=body[:40]):
                refusal = self.refused(body, PARSE_ERROR)
                self.assertIsNone(refusal.id)

    def test_envelopes_that_are_not_json_rpc(self) -> None:
        for value in (
                3, "x", [], [1], {"id": 1, "method": "ping"},
                {"jsonrpc": "1.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": None, "method": "ping"},
                {"jsonrpc": "2.0", "id": True, "method": "ping"},
                {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
                {"jsonrpc": "2.0", "id": [1], "method": "ping"},
                {"jsonrpc": "2.0", "id": 1, "method": ""},
                {"jsonrpc": "2.0", "id": 1, "method": 5},
                {"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}},
                {"jsonrpc": "2.0", "id": 1},
                {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}},
                {"jsonrpc": "2.0", "result": {}},
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["delete"]},
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"},
                [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                 {"jsonrpc": "2.0", "id": 1, "method": "ping"}]):
            with self.subTest(value=value):
                self.refused(_body(value), INVALID_REQUEST)

    def test_non_object_params_name_the_id(self) -> None:
        refusal = self.refused(_body({"jsonrpc": "2.0", "id": "q", "method": "tools/call",
                                      "params": [1]}), INVALID_REQUEST)
        self.assertEqual(refusal.id, "q")

    def test_names_that_are_not_strings(self) -> None:
        for params in ({}, {"name": 5}, {"name": None}, {"name": ["a"]},
                       {"name": "\ud800"}, {"name": "a", "arguments": [1]},
                       {"name": "a", "arguments": "x"}):
            with self.subTest(params=params):
                self.refused(_body({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": params}), INVALID_PARAMS)
        self.refused(_body({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                            "params": {"name": "x"}}), INVALID_PARAMS)

    def test_batches_are_refused_from_2025_06_18(self) -> None:
        batch = _body([_call(1, "a")])
        self.read(batch, "2025-03-26")
        self.read(batch, "")
        for version in ("2025-06-18", "2025-11-25", "2026-07-28"):
            with self.subTest(version=version):
                self.refused(batch, INVALID_REQUEST, version)

    def test_a_batch_is_bounded(self) -> None:
        """At most ``MAX_BATCH`` entries: a 16 MiB batch of 372,827 notifications (a
        security review's input) took 1.5 s to read and 5 s more to decide, audit and
        count, all on the reactor."""
        self.read(_body([_call(i, "a") for i in range(MAX_BATCH)]), "2025-03-26")
        self.refused(_body([_call(i, "a") for i in range(MAX_BATCH + 1)]), INVALID_REQUEST,
                     "2025-03-26")

    def test_same_messages_as_json_reads(self) -> None:
        """The reading agrees with ``json`` on every body it accepts (a differential:
        what the gateway decides on is what a JSON parser reads)."""
        bodies = [_call(1, "é\u2028x", {"a": [1, 2.5, None, True]}),
                  _call("id", "", {}),
                  [_call(1, "a"), {"jsonrpc": "2.0", "method": "notifications/x"}],
                  {"jsonrpc": "2.0", "id": -3, "method": "prompts/get",
                   "params": {"name": "p", "arguments": {"z": "1"}}, "extra": 1}]
        for value in bodies:
            raw = json.dumps(value, ensure_ascii=False).encode()
            request = self.read(raw)
            messages = value if isinstance(value, list) else [value]
            for call, message in zip(request.calls, messages, strict=True):
                params = message.get("params", {})
                self.assertEqual(call.id, message.get("id"))
                self.assertEqual(call.method, message.get("method", ""))
                self.assertEqual(call.name, params.get("name", "") if "name" in params else "")
                if "arguments" in params:
                    self.assertEqual(call.arguments_sha256, hashlib.sha256(json.dumps(
                        params["arguments"], ensure_ascii=False).encode()).hexdigest())
