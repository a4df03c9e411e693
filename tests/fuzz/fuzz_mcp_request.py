"""Fuzz target: an MCP route's request body and metadata headers (``gateway.mcp.jsonrpc``,
``gateway.mcp.headers``).

Input: one selector byte (the ``MCP-Protocol-Version`` among a few, and which headers
are sent), then the ``Mcp-Name`` header value up to the first NUL byte, then the body.

Contract:

- reading the body and the headers never raises: a request, or a refusal of status 400
  with a JSON-RPC error code of the specification (-32700, -32600, -32602, -32020);
- a body that is read agrees with Python's ``json`` (a differential: what the gateway
  decides on is what a JSON parser reads): it is UTF-8 JSON without a member name twice
  anywhere, and each message's method and name are the ones ``json`` finds;
- a refusal of ``-32700`` is for a body that is not UTF-8 JSON, repeats a member name, or
  holds a constant JSON has not (NaN, Infinity).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from gateway.mcp.errors import Refusal
    from gateway.mcp.headers import McpHeaders, check_agreement, read_headers
    from gateway.mcp.jsonrpc import NAME_PARAMETERS, read_request
    from gateway.mcp.messages import McpRequest

VERSIONS = ("", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28", "DRAFT-x")
CODES = frozenset({-32700, -32600, -32602, -32020})


def _plain(body: bytes) -> tuple[bool, Any]:
    """Whether ``json`` reads ``body`` as RFC 8259 JSON without a repeated name, and what."""
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        if len({k for k, _ in items}) != len(items):
            repeated = True
        return dict(items)

    def constant(name: str) -> Any:
        raise ValueError(name)

    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=pairs,
                           parse_constant=constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None
    return not repeated, value


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    selector, rest = data[0], data[1:]
    name, nul, body = rest.partition(b"\x00")
    if not nul:
        name, body = b"", rest
    version = VERSIONS[selector % len(VERSIONS)]
    headers = [(b"MCP-Protocol-Version", version.encode())] if version else []
    if selector & 0x10:
        headers.append((b"Mcp-Name", name))
    if selector & 0x20:
        headers.append((b"Mcp-Method", b"tools/call"))
    found = read_headers(headers)
    request = read_request(body, version)
    if isinstance(request, Refusal):
        assert request.status == 400 and request.code in CODES, describe(request)
        if request.code == -32700:
            ok, _ = _plain(body)
            assert not ok, describe((body, request))
        return
    assert isinstance(request, McpRequest)
    ok, value = _plain(body)
    assert ok, describe(body)
    messages = value if isinstance(value, list) else [value]
    assert request.batch == isinstance(value, list)
    assert len(messages) == len(request.calls), describe(body)
    for call, message in zip(request.calls, messages, strict=True):
        assert call.method == message.get("method", ""), describe((call, message))
        key = NAME_PARAMETERS.get(call.method)
        expected = message.get("params", {})[key] if key is not None else ""
        assert call.name == expected, describe((call, message))
    if isinstance(found, McpHeaders):
        refusal = check_agreement(found, request)
        assert refusal is None or (refusal.status, refusal.code) == (400, -32020)


if __name__ == "__main__":
    fuzz(TestOneInput)
