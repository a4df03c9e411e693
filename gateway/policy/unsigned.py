"""Whether a policy can let in a request from someone not signed in: what ``gateway
check`` warns about and counts as public.

For someone not signed in a criterion about the person is unknown (``compile``), and
only an allow rule that is true whoever they are lets them in, with no deny rule true or
unknown. This finds the values each rule can take over every request (each request
criterion true or false, independently of the others), so it may name a rule that no
real request satisfies (``http_path`` both ``/a`` and ``/b``), never miss one that some
request does. A CORS preflight is left out: it carries no credentials and gets no
content, and ``cors_allow_preflight`` admits one on any route.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.policy.compile import Node, Policy
from gateway.policy.criteria import CRITERIA
from gateway.policy.nodes import AND, NOR, NOT, OR, RULE

Value = bool | None  # None: unknown
Values = frozenset[Value]
_ANY: Values = frozenset({True, False})
_CONSTANT: dict[str, Values] = {
    "accept": frozenset({True}),
    "reject": frozenset({False}),
    "authenticated_user": frozenset({False}),  # nobody is signed in: known
    "gateway_routes": frozenset({False}),  # never in a route's policy
    "cors_preflight": frozenset({False}),  # left out (above)
}


def admits_without_sign_in(policy: Policy) -> tuple[str, ...]:
    """The paths of the allow rules that may let in someone not signed in (``()``: the
    policy lets nobody in without sign-in)."""
    if any(False not in _values(rule) for rule in policy.deny_rules):
        return ()  # a deny rule that is never false stops every such request
    return tuple(rule.path for rule in policy.allow_rules if True in _values(rule))


def _values(node: Node) -> Values:
    if not node.op:
        criterion = node.criterion
        assert criterion is not None
        if CRITERIA[criterion.name].person:
            return frozenset({None})
        return _CONSTANT.get(criterion.name, _ANY)
    entries = [_values(child) for child in node.children]
    if node.op in (OR, RULE, NOT):
        found = _fold(entries, _any)
        return found if node.op != NOT else frozenset(_not(v) for v in found)
    if node.op in (AND, NOR):
        found = _fold(entries, _all)
        return found if node.op != NOR else frozenset(_not(v) for v in found)
    raise AssertionError(f"unknown operator {node.op}")


def _fold(entries: list[Values], join: Callable[[Value, Value], Value]) -> Values:
    """The values ``join`` of all entries can take, one pair at a time (Kleene's and
    and or are associative), so a wide operator costs no more than a narrow one."""
    found = entries[0]
    for values in entries[1:]:
        found = frozenset(join(a, b) for a in found for b in values)
    return found


def _any(a: Value, b: Value) -> Value:
    if a or b:
        return True
    return None if a is None or b is None else False


def _all(a: Value, b: Value) -> Value:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _not(value: Value) -> Value:
    return None if value is None else not value
