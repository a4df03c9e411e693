"""A request body of an MCP route read into its JSON-RPC messages (``McpRequest``), or
the JSON-RPC error refusing it.

The whole body is read (the data plane holds it to ``mcp.max_request_bytes``), never a
prefix: a tool name after 4 KiB of arguments is read as surely as one before them.
Strictly, because the gateway decides on what it reads and the MCP server acts on what
it reads, and any body the two could read differently is a way past the policy:

- UTF-8 only (RFC 8259 8.1), no byte order mark; anything else is ``-32700``;
- JSON only: no ``NaN``/``Infinity``, no duplicate member names anywhere in the body
  (RFC 8259 leaves their meaning to the parser: one server takes the first, another
  the last), nesting and numbers within the parser's bounds; ``-32700`` otherwise;
- the JSON-RPC 2.0 envelope: an object (or, up to 2025-03-26, a non-empty array of
  them) with ``"jsonrpc": "2.0"``; a request or notification has a non-empty string
  ``method`` and an object ``params`` if any (MCP's params are always objects), a
  request's ``id`` is a string or an integer (MCP: never null), ids in a batch are
  distinct; a client's response (2025-11-25 and earlier) has an id and exactly one of
  ``result`` and ``error``. Anything else is ``-32600`` for the whole body;
- the name a method is about is a string: ``params.name`` of ``tools/call`` and
  ``prompts/get``, ``params.uri`` of ``resources/read``, ``resources/subscribe`` and
  ``resources/unsubscribe`` (``-32602`` otherwise), as are ``tools/call``'s
  ``arguments`` an object.

A batch is refused for protocol versions from 2025-06-18 on (the version that removed
JSON-RPC batching from MCP): a server of those versions would refuse it too, and
nothing is gained by reading what no client of them sends.

Python's ``json`` reads the body (its C scanner, some 100 MB/s, reads every value); only
the members of a message and of its ``params`` are walked here (``_object``, as
``json.decoder.JSONObject`` walks them), so that the exact text of ``params.arguments``
is known: what the audit stream's hash is of (``arguments_sha256``). A differential test
holds the reading to ``json.loads``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from json.decoder import JSONDecodeError
from typing import Any

from gateway.mcp.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Refusal
from gateway.mcp.messages import McpCall, McpRequest, RequestId
from gateway.wire.json_members import DuplicateMember, unique_members

# the parameter each method's name (``McpCall.name``) is read from
NAME_PARAMETERS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "resources/subscribe": "uri",
    "resources/unsubscribe": "uri",
}
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
# the first protocol version without JSON-RPC batches
NO_BATCHES_FROM = "2025-06-18"
# Entries of one batch at most: each is decided, audited, counted and traced, so a body
# of tiny messages (some 370,000 notifications fit in 16 MiB) would hold the reactor for
# seconds; MCP clients batch a handful at most (and 2025-06-18 dropped batches).
MAX_BATCH = 100


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# json.decoder's string reader (C), which the decoder's object reading uses for names;
# the public module's name for it (the stubs do not list it)
scanstring: Callable[[str, int, bool], tuple[str, int]] = \
    json.decoder.scanstring  # type: ignore[attr-defined]
_DECODER = json.JSONDecoder(object_pairs_hook=unique_members, parse_constant=_no_constant)
# the decoder's own scanner (C), which reads each value and says where it ends
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's white space (json.decoder.WHITESPACE)
# a member's name without escapes or control characters, and its colon
_NAME = re.compile(r'"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
# after a member's value: the object goes on (and the next name's white space) or ends
_AFTER = re.compile(r'[ \t\n\r]*(?:(,)[ \t\n\r]*|(\}))')
Span = tuple[int, int]
"""Where a value's text starts and ends in the body's text."""


def _loads(text: str) -> tuple[Any, list[Span | None]]:
    """``json.loads(text)`` with the strict hooks, and the span of each message's
    ``params.arguments`` (``None`` where it has none), in body order."""
    index = _skip(text, 0)
    spans: list[Span | None] = []
    value: Any
    if text.startswith("{", index):
        value, span, end = _object(text, index, "params")
        spans.append(span)
    elif text.startswith("[", index):
        value, end = _array(text, index, spans)
    else:
        value, end = _value(text, index)
    end = _skip(text, end)
    if end != len(text):
        raise JSONDecodeError("Extra data", text, end)
    return value, spans


def _skip(text: str, index: int) -> int:
    """Past the white space at ``text[index]``."""
    space = _SPACE.match(text, index)
    assert space is not None  # (it matches none too)
    return space.end()


def _value(text: str, index: int) -> tuple[Any, int]:
    try:
        return _scan(text, index)
    except StopIteration as stop:
        raise JSONDecodeError("Expecting value", text, stop.value) from None


def _array(text: str, index: int, spans: list[Span | None]) -> tuple[list[Any], int]:
    """The array at ``text[index]`` (a batch): each object in it walked as a message."""
    values: list[Any] = []
    index = _skip(text, index + 1)
    if text.startswith("]", index):
        return values, index + 1
    while True:
        if text.startswith("{", index):
            value, span, index = _object(text, index, "params")
            spans.append(span)
        else:
            value, index = _value(text, index)
            spans.append(None)
        values.append(value)
        index = _skip(text, index)
        if text.startswith("]", index):
            return values, index + 1
        if not text.startswith(",", index):
            raise JSONDecodeError("Expecting ',' delimiter", text, index)
        index = _skip(text, index + 1)


def _object(text: str, index: int, inner: str) -> tuple[dict[str, Any], Span | None, int]:
    """The object at ``text[index]``, member by member: the member named ``inner``,
    when it is an object, walked the same way for its ``arguments`` member; the span of
    that (``inner`` is ``""`` there: the span of this object's ``arguments``)."""
    pairs: list[tuple[str, Any]] = []
    span: Span | None = None
    index = _skip(text, index + 1)
    if text.startswith("}", index):
        return {}, None, index + 1
    while True:
        head = _NAME.match(text, index)
        if head is not None:  # (a name without escapes: one match for it and its colon)
            key, index = head.group(1), head.end()
        else:
            if not text.startswith('"', index):
                raise JSONDecodeError("Expecting property name enclosed in double quotes",
                                      text, index)
            key, index = scanstring(text, index + 1, True)
            index = _skip(text, index)
            if not text.startswith(":", index):
                raise JSONDecodeError("Expecting ':' delimiter", text, index)
            index = _skip(text, index + 1)
        start = index
        value: Any
        if inner and key == inner and text.startswith("{", index):
            value, found, index = _object(text, index, "")
            span = found
        else:
            value, index = _value(text, index)
            if not inner and key == "arguments":
                span = (start, index)
        pairs.append((key, value))
        after = _AFTER.match(text, index)
        if after is None:
            raise JSONDecodeError("Expecting ',' delimiter", text, _skip(text, index))
        index = after.end()
        if after.lastindex == 2:  # the "}"
            return unique_members(pairs), span, index


def read_request(body: bytes, protocol_version: str = "") -> McpRequest | Refusal:
    """The messages of ``body``, or the error refusing it (HTTP 400 with a JSON-RPC
    error; for one message whose id could be read, that id). ``protocol_version``: the
    ``MCP-Protocol-Version`` header ("" when absent), kept on the request."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _parse_error(f"the body is not UTF-8 (byte {exc.start})")
    try:
        value, spans = _loads(text)
    except DuplicateMember as exc:
        return _parse_error(f"the body is not valid JSON: {exc}")
    except json.JSONDecodeError as exc:
        return _parse_error(f"the body is not valid JSON: {exc.msg} at byte "
                            f"{len(text[:exc.pos].encode('utf-8', 'surrogatepass'))}")
    except (ValueError, RecursionError) as exc:
        return _parse_error(f"the body is not valid JSON: {exc}")
    if isinstance(value, dict):
        call = _message(value, text, spans[0])
        if isinstance(call, Refusal):
            return call
        return McpRequest((call,), False, protocol_version)
    if not isinstance(value, list):
        return _invalid("the body must be a JSON-RPC message (an object)")
    if not value:
        return _invalid("an empty batch")
    if protocol_version >= NO_BATCHES_FROM:
        return _invalid(f"JSON-RPC batches are not part of MCP {protocol_version}")
    if len(value) > MAX_BATCH:
        return _invalid(f"a batch of {len(value)} messages; at most {MAX_BATCH} are read")
    calls: list[McpCall] = []
    ids: set[tuple[type, RequestId]] = set()
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            return _invalid(f"batch entry {index} is not a JSON-RPC message (an object)")
        call = _message(entry, text, spans[index])
        if isinstance(call, Refusal):
            return Refusal(call.status, call.code, f"batch entry {index}: {call.message}")
        if call.answered:
            key = (type(call.id), call.id)
            if key in ids:
                return _invalid(f"batch entry {index} repeats the id {call.id!r}")
            ids.add(key)
        calls.append(call)
    return McpRequest(tuple(calls), True, protocol_version)


def _message(message: dict[str, Any], text: str, span: Span | None
              ) -> McpCall | Refusal:
    """One message of the body, its envelope checked; ``arguments``: where the text of
    its ``params.arguments`` is in ``text``, the body (``span``)."""
    if message.get("jsonrpc") != "2.0":
        return _invalid('"jsonrpc" must be "2.0"')
    has_id = "id" in message
    id_ = message.get("id")
    if has_id and not _good_id(id_):
        return _invalid('"id" must be a string or an integer')
    if "method" not in message:
        # a client's answer to a request of the server (2025-11-25 and earlier)
        if not has_id or ("result" in message) == ("error" in message):
            return _invalid('a message needs "method" (a request or notification) or '
                            '"id" and one of "result" and "error" (a response)')
        return McpCall(id_, "")
    method = message["method"]
    if not isinstance(method, str) or not method:
        return _invalid('"method" must be a non-empty string', id_)
    if "result" in message or "error" in message:
        return _invalid('a request has no "result" or "error"', id_)
    params = message.get("params", {})
    if not isinstance(params, dict):
        return _invalid('"params" must be an object', id_)
    name = ""
    key = NAME_PARAMETERS.get(method)
    if key is not None:
        value = params.get(key)
        if not isinstance(value, str) or not _encodable(value):
            return Refusal(400, INVALID_PARAMS, f"{method}: params.{key} must be a string",
                           id_)
        name = value
    arguments = params.get("arguments")
    if method == "tools/call" and "arguments" in params and not isinstance(arguments, dict):
        return Refusal(400, INVALID_PARAMS, "tools/call: params.arguments must be an object",
                       id_)
    digest = ""
    if "arguments" in params:
        assert span is not None  # (``_object`` found it)
        digest = arguments_sha256(text[span[0]:span[1]])
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META, "") if isinstance(meta, dict) else ""
    if not isinstance(version, str):
        return Refusal(400, INVALID_PARAMS,
                       f"params._meta.{PROTOCOL_VERSION_META} must be a string", id_)
    return McpCall(id_ if has_id else None, method, name, digest, version)


def arguments_sha256(text: str) -> str:
    """The hex SHA-256 of the UTF-8 of ``text``, the arguments exactly as the client
    sent them (the body's bytes from the value's first character to its last: the
    body is forwarded as read, so this is what the server got). It is what the audit
    stream records of them. Exact bytes, not a canonical form: hashing them costs
    some 10 ms for 14 MiB where a canonical form (``json.dumps`` with sorted keys)
    cost 0.4 s for a million tiny objects, on the reactor; and a canonical form
    through Python's values says less, not more: ``1e400`` and ``2e400`` both become
    ``Infinity``, two numbers differing past a float's precision one number, which a
    server reading decimals tells apart. The price: the same arguments spaced or
    ordered differently hash differently."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _good_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _encodable(text: str) -> bool:
    """No lone surrogate (``"\\ud800"`` is valid JSON but no character a server reads
    the same way as we do)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_error(message: str) -> Refusal:
    return Refusal(400, PARSE_ERROR, f"Parse error: {message}")


def _invalid(message: str, id_: RequestId = None) -> Refusal:
    return Refusal(400, INVALID_REQUEST, f"Invalid Request: {message}",
                   id_ if _good_id(id_) else None)
