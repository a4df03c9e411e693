"""MCP traffic in the process's registry (issue 43), counted only on MCP routes:

- ``gateway_mcp_messages_total{route,method,tool,decision}``: every JSON-RPC message of a
  request to an MCP route, by the route's label, the method (one the specification
  defines, else ``other``), the tool of a ``tools/call`` and the decision (``allow``,
  ``deny``);
- ``gateway_mcp_list_entries_total{route,method,result}``: entries of list results
  (``tools/list``, ``prompts/list``, ``resources/list``, ``resources/templates/list``)
  ``shown`` to the caller or ``hidden`` by its policy;
- ``gateway_mcp_list_refused_total{route,method}``: list results not passed on because
  the gateway could not filter them (malformed, too large, undecodable; ``unknown``:
  an event whose data was not JSON, or a stream cut short).

Cardinality: a tool name is chosen by the client, so ``tool`` is a name only when the
route's policy allowed the call, and at most ``TOOLS_PER_ROUTE`` names per route; every
other call's is ``other`` (``""`` for methods that name no tool). Routes and methods
come from bounded sets (the configuration, the specification).
"""

from __future__ import annotations

from typing import Any, Protocol

from prometheus_client import Counter

from gateway.observability.metrics import REGISTRY

TOOLS_PER_ROUTE = 50
OTHER = "other"
METHODS = frozenset({
    "initialize", "ping", "tools/list", "tools/call", "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "completion/complete", "logging/setLevel", "tasks/get",
    "tasks/list", "tasks/result", "tasks/cancel", "notifications/initialized",
    "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed",
    "", "server/discover"})

MESSAGES = Counter(
    "gateway_mcp_messages", "JSON-RPC messages of requests to MCP routes, by route, "
    "method, tool (a tools/call the policy allowed; other beyond a bound) and decision.",
    ["route", "method", "tool", "decision"], registry=REGISTRY)
LIST_ENTRIES = Counter(
    "gateway_mcp_list_entries", "Entries of MCP list results shown to the caller or "
    "hidden by its policy, by route, list method and result.",
    ["route", "method", "result"], registry=REGISTRY)
LIST_REFUSED = Counter(
    "gateway_mcp_list_refused", "MCP list results not passed on because the gateway "
    "could not filter them, by route and list method.", ["route", "method"],
    registry=REGISTRY)


class ListCounts(Protocol):
    """What a response filter counted (``gateway.mcp.listing.Counts``)."""

    shown: dict[str, int]
    hidden: dict[str, int]
    refused: dict[str, int]


class McpMetrics:
    """The counters' children by label values (a ``labels`` lookup costs more than the
    increment) and the tool names labelled so far per route."""

    def __init__(self) -> None:
        self.enabled = True
        self.children: dict[tuple[Any, ...], Any] = {}
        self.tools: dict[str, set[str]] = {}

    def _child(self, counter: Counter, *labels: str) -> Any:
        key = (counter, *labels)
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = counter.labels(*labels)
        return child

    def tool_label(self, route: str, method: str, name: str, allowed: bool) -> str:
        if method != "tools/call":
            return ""
        if not allowed:
            return OTHER
        names = self.tools.setdefault(route, set())
        if name in names:
            return name
        if len(names) >= TOOLS_PER_ROUTE:
            return OTHER
        names.add(name)
        return name

    def message(self, route: str, method: str, name: str, allowed: bool) -> None:
        """One message of a request to ``route``, decided."""
        tool = self.tool_label(route, method, name, allowed)
        self._child(MESSAGES, route, method if method in METHODS else OTHER, tool,
                    "allow" if allowed else "deny").inc()

    def listed(self, route: str, counts: ListCounts) -> None:
        """What one response's filter did."""
        for method, n in counts.shown.items():
            if n:
                self._child(LIST_ENTRIES, route, method, "shown").inc(n)
        for method, n in counts.hidden.items():
            if n:
                self._child(LIST_ENTRIES, route, method, "hidden").inc(n)
        for method, n in counts.refused.items():
            self._child(LIST_REFUSED, route, method).inc(n)


MCP_METRICS = McpMetrics()
