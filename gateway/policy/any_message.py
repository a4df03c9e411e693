"""Whether a policy lets a signed-in person send some MCP message on its route: how the
requests of an MCP route that carry no message of their own are decided (the body-less
GET and DELETE of the 2025 transports, a client's JSON-RPC response to a request of the
server), which belong to a session the person uses for whatever they may call.

Each ``mcp_method`` and ``mcp_tool`` criterion may be true or false (some message makes
it so); every other criterion has its value for this person and request. A rule's
possible values follow from its entries' (as ``unsigned`` finds them for someone not
signed in), and the person may send some message when an allow rule can be true and no
deny rule must be. Taking each MCP criterion on its own may find a rule true that no
single message satisfies (``mcp_tool`` both ``a`` and ``b``); it never misses one that
some message does.
"""

from __future__ import annotations

from gateway.policy.compile import Node, Policy
from gateway.policy.criteria import POLICY
from gateway.policy.facts import Facts
from gateway.policy.nodes import AND, NOR, NOT, OR, RULE
from gateway.policy.verdict import NO_ALLOW_MATCHED, Verdict

_MCP = frozenset({"mcp_method", "mcp_tool"})
_EITHER = frozenset({True, False})
NONE_ALLOWED = Verdict(False, "allow", "", "no rule allows any MCP message", POLICY,
                       NO_ALLOW_MATCHED)


def any_message_allowed(policy: Policy, facts: Facts) -> Verdict:
    """The verdict on a request of ``facts`` (a signed-in person's; its MCP facts are
    not read) that carries no message: the first allow rule that some message lets
    match, unless a deny rule matches whatever the message."""
    for rule in policy.deny_rules:
        if False not in _values(rule, facts):
            return rule.hit
    for rule in policy.allow_rules:
        if True in _values(rule, facts):
            return rule.hit
    return NONE_ALLOWED


def _values(node: Node, facts: Facts) -> frozenset[bool]:
    if not node.op:
        criterion = node.criterion
        assert criterion is not None
        if criterion.name in _MCP:
            return _EITHER
        return frozenset({bool(node.pred(facts))})
    entries = [_values(child, facts) for child in node.children]
    if node.op in (OR, RULE, NOT):
        found = _fold(entries, any_of=True)
        return found if node.op != NOT else frozenset(not v for v in found)
    if node.op in (AND, NOR):
        found = _fold(entries, any_of=False)
        return found if node.op != NOR else frozenset(not v for v in found)
    raise AssertionError(f"unknown operator {node.op}")


def _fold(entries: list[frozenset[bool]], *, any_of: bool) -> frozenset[bool]:
    found = entries[0]
    for values in entries[1:]:
        found = frozenset((a or b) if any_of else (a and b) for a in found for b in values)
    return found
