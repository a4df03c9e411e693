"""What is recorded of an MCP route's request when its exchange ends: per JSON-RPC
message one audit event (``via: mcp``), one count (``observability.mcp_metrics``) and,
when the request is traced, one span.

The spans follow OpenTelemetry's semantic conventions for MCP (``gen-ai/mcp.md``):
named ``{mcp.method.name} {target}`` (the tool or prompt name; the method alone
otherwise: a resource URI is not a low-cardinality name), children of the request's
server span, with ``mcp.method.name``, ``jsonrpc.request.id`` (not for a notification),
``gen_ai.tool.name`` and ``gen_ai.operation.name: execute_tool`` for a ``tools/call``,
``gen_ai.prompt.name`` for a ``prompts/get``, ``mcp.resource.uri`` for the resource
methods, ``mcp.protocol.version`` (the message's own ``_meta`` version, else the
request's ``MCP-Protocol-Version``), ``network.transport`` and ``network.protocol.name``;
a message the policy refused has ``error.type`` and ``rpc.response.status_code`` (the
code the gateway answered it with) and the status ERROR. The gateway's own facts are
under ``gateway.*``: ``gateway.decision``, ``gateway.rule``, ``gateway.mcp.client_id``,
``gateway.mcp.arguments_sha256``. The spans are INTERNAL: the gateway decides and relays
the call, the MCP server executes it (its own server span, when it is instrumented, is a
child of the upstream request's). Not recorded: ``mcp.session.id`` (the session id lets
whoever holds it speak in the session) and the opt-in ``gen_ai.tool.call.arguments``
(the arguments are never recorded, only their hash).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from gateway.mcp.errors import REFUSED
from gateway.mcp.messages import McpCall, McpDecided, McpVerdict
from gateway.observability.audit import McpFields, reasons_and_rule
from gateway.observability.mcp_metrics import MCP_METRICS

if TYPE_CHECKING:
    from gateway.observability.tracing.tracer import RequestTrace

# The code the request side answers a refused message with (outside JSON-RPC's
# reserved range, as the specification asks)
REFUSED_CODE = str(REFUSED)
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe",
                               "resources/unsubscribe"})


def verdicts_of(decided: McpDecided, allowed: bool, reason: str) -> tuple[McpVerdict, ...]:
    """The verdict on each message: the request side's, or (a request refused before its
    messages were decided one by one) the request's own decision for each."""
    if decided.verdicts:
        return decided.verdicts
    codes, rule = reasons_and_rule(reason)
    return tuple(McpVerdict(call, allowed, rule, tuple(codes))
                 for call in decided.request.calls)


def id_text(call: McpCall) -> str:
    return "" if call.id is None else str(call.id)


def audit_fields(verdict: McpVerdict, client_id: str) -> McpFields:
    call = verdict.call
    return McpFields(client_id, call.method, call.name, id_text(call),
                     call.arguments_sha256, verdict.rule, verdict.reasons)


def count(route: str, verdicts: tuple[McpVerdict, ...]) -> None:
    for verdict in verdicts:
        call = verdict.call
        MCP_METRICS.message(route, call.method, call.name, verdict.allowed)


def span_attributes(verdict: McpVerdict, protocol_version: str, client_id: str
                    ) -> dict[str, str]:
    call = verdict.call
    method = call.method
    attributes = {"mcp.method.name": method, "network.transport": "tcp",
                  "network.protocol.name": "http",
                  "gateway.decision": "allow" if verdict.allowed else "deny"}
    if call.id is not None:
        attributes["jsonrpc.request.id"] = id_text(call)
    if method == "tools/call" and call.name:
        attributes["gen_ai.tool.name"] = call.name
        attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get" and call.name:
        attributes["gen_ai.prompt.name"] = call.name
    elif method in _RESOURCE_METHODS and call.name:
        attributes["mcp.resource.uri"] = call.name
    version = call.protocol_version or protocol_version  # (2026-07-28: per message)
    if version:
        attributes["mcp.protocol.version"] = version
    if verdict.rule:
        attributes["gateway.rule"] = verdict.rule
    if client_id:
        attributes["gateway.mcp.client_id"] = client_id
    if call.arguments_sha256:
        attributes["gateway.mcp.arguments_sha256"] = call.arguments_sha256
    if not verdict.allowed:
        attributes["error.type"] = REFUSED_CODE
        attributes["rpc.response.status_code"] = REFUSED_CODE
    return attributes


def span_name(call: McpCall) -> str:
    if call.name and call.method in ("tools/call", "prompts/get"):
        return f"{call.method} {call.name}"
    return call.method or "mcp"


def trace_messages(trace: RequestTrace, verdicts: tuple[McpVerdict, ...],
                   protocol_version: str, client_id: str) -> None:
    """A span per message, under the request's server span, over the request's time."""
    server = trace.server
    parent = set_span_in_context(server.span)
    start: Any = getattr(server.span, "start_time", None)
    for verdict in verdicts:
        span = server.tracer.start_span(
            span_name(verdict.call), context=parent, kind=SpanKind.INTERNAL,
            attributes=span_attributes(verdict, protocol_version, client_id),
            start_time=start)
        if not verdict.allowed:
            span.set_status(Status(StatusCode.ERROR, "refused by the gateway's policy"))
        span.end()


def observe(exchange: Any, decided: McpDecided, trace: RequestTrace | None) -> None:
    """Count (and, when traced, span) the messages of ``exchange``'s MCP request; the
    audit events are written with the request's (``access.audit``)."""
    plan = exchange.plan
    if plan is None or not decided.request.calls:
        return
    verdicts = verdicts_of(decided, exchange.allow is not None, decision_reason(exchange))
    if trace is not None:
        caller = exchange.caller
        trace_messages(trace, verdicts, decided.request.protocol_version,
                       caller.client_id if caller is not None else "")
    if MCP_METRICS.enabled:
        count(plan.metric_labels[1], verdicts)


def decision_reason(exchange: Any) -> str:
    allow = exchange.allow
    return exchange.decision_reason or (allow.reason if allow is not None else "")
