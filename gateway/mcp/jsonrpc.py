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

Python's ``json`` reads the body (C code, some 100 MB/s); no parser of our own.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.mcp.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Refusal
from gateway.mcp.messages import McpCall, McpRequest, RequestId

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


class _Duplicate(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _Duplicate(f"duplicate member {name!r}")
            seen.add(name)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_request(body: bytes, protocol_version: str = "") -> McpRequest | Refusal:
    """The messages of ``body``, or the error refusing it (HTTP 400 with a JSON-RPC
    error; for one message whose id could be read, that id). ``protocol_version``: the
    ``MCP-Protocol-Version`` header ("" when absent), kept on the request."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _parse_error(f"the body is not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _Duplicate as exc:
        return _parse_error(f"the body is not valid JSON: {exc}")
    except json.JSONDecodeError as exc:
        return _parse_error(f"the body is not valid JSON: {exc.msg} at byte "
                            f"{len(text[:exc.pos].encode('utf-8', 'surrogatepass'))}")
    except (ValueError, RecursionError) as exc:
        return _parse_error(f"the body is not valid JSON: {exc}")
    if isinstance(value, dict):
        call = _message(value)
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
        call = _message(entry)
        if isinstance(call, Refusal):
            return Refusal(call.status, call.code, f"batch entry {index}: {call.message}")
        if call.answered:
            key = (type(call.id), call.id)
            if key in ids:
                return _invalid(f"batch entry {index} repeats the id {call.id!r}")
            ids.add(key)
        calls.append(call)
    return McpRequest(tuple(calls), True, protocol_version)


def _message(message: dict[str, Any]) -> McpCall | Refusal:
    """One message of the body, its envelope checked."""
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
    digest = arguments_sha256(arguments) if "arguments" in params else ""
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META, "") if isinstance(meta, dict) else ""
    if not isinstance(version, str):
        return Refusal(400, INVALID_PARAMS,
                       f"params._meta.{PROTOCOL_VERSION_META} must be a string", id_)
    return McpCall(id_ if has_id else None, method, name, digest, version)


def arguments_sha256(arguments: object) -> str:
    """The hex SHA-256 of ``arguments`` as canonical JSON (member names sorted, no
    white space, non-ASCII as ``\\u`` escapes): what the audit stream records of them."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


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
