"""What the gateway read of one MCP request, as values: the seam between the request
side (reading and deciding, ``gateway.mcp.jsonrpc``) and the response side (list
filtering, ``gateway.mcp.listing``) and the audit stream."""

from __future__ import annotations

from dataclasses import dataclass

RequestId = str | int | None
"""A JSON-RPC id (``None``: a notification, which gets no answer)."""


@dataclass(frozen=True, slots=True)
class McpCall:
    """One JSON-RPC message of a request body.

    ``name``: what the message is about, the ``mcp_tool`` of a ``tools/call`` and the
    name of a ``prompts/get`` (``params.name``), the URI of a ``resources/read``,
    ``resources/subscribe`` or ``resources/unsubscribe`` (``params.uri``); ``""`` for
    every other method. ``arguments_sha256``: the hex SHA-256 of ``params.arguments``'
    bytes exactly as sent (``mcp.jsonrpc.arguments_sha256``; ``""`` when there are
    none): the audit stream records the hash, never the arguments.
    ``protocol_version``: the 2026-07-28 ``_meta`` field
    ``io.modelcontextprotocol/protocolVersion`` of ``params`` (``""`` when absent),
    which the ``MCP-Protocol-Version`` header must equal. A message without a method
    (a client's JSON-RPC response to a server's request, 2025-03-26 to 2025-11-25)
    and the body-less GET and DELETE of an MCP route have the method ``""``."""

    id: RequestId
    method: str
    name: str = ""
    arguments_sha256: str = ""
    protocol_version: str = ""

    @property
    def answered(self) -> bool:
        """A request, which gets a JSON-RPC response (not a notification, not a
        client's response)."""
        return self.id is not None and self.method != ""


@dataclass(frozen=True, slots=True)
class McpRequest:
    """The messages of one HTTP request to an MCP route, in body order. ``batch``: the
    body was a JSON array. ``protocol_version``: the ``MCP-Protocol-Version`` header
    (``""`` when absent)."""

    calls: tuple[McpCall, ...]
    batch: bool = False
    protocol_version: str = ""


@dataclass(frozen=True, slots=True)
class McpVerdict:
    """The decision on one message: allowed or not, the rule that decided (``""``:
    none matched) and the reason codes the 403 page and the audit stream show."""

    call: McpCall
    allowed: bool
    rule: str = ""
    reasons: tuple[str, ...] = ()


@dataclass(slots=True)
class McpDecided:
    """What the request side made of one HTTP request to an MCP route, kept on the
    exchange (its ``mcp`` slot) for the response filter and the audit event: the
    request as read and the verdict on each of its messages, in body order (empty
    until decided; a public route's are all allowed, with the rule ``public``)."""

    request: McpRequest
    verdicts: tuple[McpVerdict, ...] = ()
