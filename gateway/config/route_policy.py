"""A route's ``policy`` field: PPL rules, parsed (and so checked) with the route.

Problems carry the route's key path (``policy[3].policy[1].deny.or[2].source_ip``), so
``gateway check`` and a reload name them exactly and a reload keeps the running
configuration. The route compiles the rules with its allow fields (``Route.policy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.errors import Problems
from gateway.policy import parse_document
from gateway.policy.nodes import ALLOW

ALLOW_FIELDS = ("allow_public_unauthenticated_access", "allow_any_authenticated_user",
                "cors_allow_preflight", "allowed_users", "allowed_domains", "allowed_groups",
                "allowed_idp_claims")


def parse_route_policy(item: Mapping[str, Any], base: str, values: dict[str, Any],
                       problems: Problems) -> None:
    """Read ``item["policy"]`` into ``values["policy_document"]``; ``values`` already holds
    the route's other allow fields."""
    raw = item.get("policy")
    if raw is None:
        return
    document = parse_document(raw, f"{base}.policy", problems)
    if document is None:
        return
    values["policy_document"] = document
    if values.get("allow_public_unauthenticated_access"):
        problems.error(base, "allow_public_unauthenticated_access and policy are both set: "
                             "a public route is never authorized, so its policy would not "
                             "apply; remove one of them (accept: true in the policy lets "
                             "everyone in while its deny rules still hold)")
    if _names(raw, "gateway_routes"):
        problems.warn(f"{base}.policy", "gateway_routes never matches in a route's policy: the "
                                        "gateway's own /.gateway/ endpoints (sign-in, "
                                        "sign-out, who am I, your routes) are answered "
                                        "before any route policy is asked")
    if item.get("mcp") is None and (_names(raw, "mcp_method") or _names(raw, "mcp_tool")):
        problems.warn(f"{base}.policy", "mcp_method and mcp_tool never match on a route "
                                        "without mcp: only an MCP route's requests are read "
                                        "as JSON-RPC messages (add mcp: {})")
    if not any(rule.action == ALLOW for rule in document.rules) and not any(
            values.get(key) for key in ALLOW_FIELDS):
        problems.warn(f"{base}.policy", "has no allow rule and the route no allow field: "
                                        "access needs a matching allow rule, so nobody is "
                                        "let in")


def _names(raw: Any, key: str) -> bool:
    """Whether ``key`` is a key anywhere in the nested mappings and lists ``raw``."""
    if isinstance(raw, Mapping):
        return key in raw or any(_names(value, key) for value in raw.values())
    if isinstance(raw, list):
        return any(_names(item, key) for item in raw)
    return False
