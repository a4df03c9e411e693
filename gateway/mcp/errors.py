"""Every JSON-RPC error the gateway answers an MCP client itself, built here and only
here: a body that is not JSON-RPC (``-32700``, ``-32600``, ``-32602``), headers that
disagree with the body (``-32020``, the 2026-07-28 ``HeaderMismatch``), a body too large,
a bad ``Origin``, and the messages the route's policy refused.

The gateway's own refusals use ``-31403``: the MCP specification (2026-07-28, "Error
Codes") reserves ``-32020`` to ``-32099`` for codes it defines and asks that other
codes be taken outside JSON-RPC's reserved ``-32768`` to ``-32000``; clients show the
message whatever the code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.mcp.messages import McpRequest, McpVerdict, RequestId

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
REFUSED = -31403
"""The gateway refused the message (its policy, or the request's ``Origin``)."""

JSON_HEADERS = ((b"content-type", b"application/json"),)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the gateway answers itself: the HTTP ``status`` and one JSON-RPC error
    (``code``, ``message``) for the message ``id`` (``None``: no id, as the
    specification asks for errors about the HTTP request rather than one message)."""

    status: int
    code: int
    message: str
    id: RequestId = None

    def body(self) -> bytes:
        return error_body(self.id, self.code, self.message)


def error_object(id: RequestId, code: int, message: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}


def error_body(id: RequestId, code: int, message: str) -> bytes:
    return _dump(error_object(id, code, message))


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def too_large(limit: int) -> Refusal:
    return Refusal(413, INVALID_REQUEST,
                   f"the request body is larger than this MCP route's limit of {limit} "
                   "bytes (mcp.max_request_bytes)")


def too_much_held(status: int, where: str, budget: int) -> Refusal:
    """413 (one connection's budget) or 503 (the process's): the MCP request bodies
    being read at once hold too much; each may come again once others are done."""
    return Refusal(status, INVALID_REQUEST,
                   f"the MCP request bodies being read {where} would hold more than "
                   f"{budget} bytes together; send this one again once others are done")


def unknown_session() -> Refusal:
    """404, as the transport answers a session id it does not know: one the gateway did
    not give this caller on this route (``mcp.session_ids``). The client starts a new
    session."""
    return Refusal(404, REFUSED, "Session not found: this Mcp-Session-Id was not given to "
                   "you on this MCP route; start a new session")


def bad_origin(origin: str) -> Refusal:
    return Refusal(403, REFUSED, f"Origin {origin!r} is not this MCP server's origin")


def denied_message(verdict: McpVerdict) -> str:
    """What a client shows for a message the route's policy refused."""
    call = verdict.call
    what = call.method or "this request"
    if call.name:
        what = f"{what} of {call.name!r}"
    return f"the gateway's policy does not allow {what}"


_NOT_FORWARDED = ("not forwarded: another message of this batch was refused by the "
                  "gateway's policy")


def denied_answer(request: McpRequest, verdicts: Sequence[McpVerdict]) -> tuple[int, bytes]:
    """The answer to a request holding a message the policy refused: nothing of it is
    forwarded, and every request in it gets an error (HTTP 200, JSON). A body with no
    request to answer (notifications, a client's responses, a GET or DELETE) gets 403
    and one error without an id, as the transport asks of a refused notification."""
    denied = next(v for v in verdicts if not v.allowed)
    answers = [error_object(v.call.id, REFUSED,
                            denied_message(v) if not v.allowed else _NOT_FORWARDED)
               for v in verdicts if v.call.answered]
    if not answers:
        return 403, error_body(None, REFUSED, denied_message(denied))
    if request.batch:
        return 200, _dump(answers)
    return 200, _dump(answers[0])
