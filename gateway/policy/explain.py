"""Why no allow rule matched, and the trace of a whole evaluation.

Only refused requests and ``gateway policy check`` come here, so this part may allocate.
Both walk the compiled nodes and call their own tests, so they cannot disagree with
``Policy.evaluate``.

The refusal names the condition that stopped the nearest rule: for ``and`` the first
entry that did not match, for ``not`` the entry that did; where several alternatives
all failed (``or``, several rules), the node itself, with their kind when they share one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.policy.criteria import common_kind
from gateway.policy.nodes import ALLOW, AND, NOR, NOT, OR, RULE
from gateway.policy.verdict import (
    HIT,
    MISS,
    NO_ALLOW_MATCHED,
    NOT_EVALUATED,
    UNKNOWN,
    TraceNode,
    Verdict,
)

if TYPE_CHECKING:
    from gateway.policy.compile import Node
    from gateway.policy.facts import Facts

def refusal(allow_rules: tuple[Node, ...], facts: Facts) -> Verdict:
    """The verdict when none of ``allow_rules`` (each tested and missed) matched."""
    if len(allow_rules) == 1:
        return why_not(allow_rules[0], facts)
    return _none_of(ALLOW, [why_not(rule, facts) for rule in allow_rules])


def why_not(node: Node, facts: Facts) -> Verdict:
    """Why ``node`` (whose test returned ``None``) did not match, as a refusal."""
    op = node.op
    if not op:
        return _refused(node.miss)
    if op == AND:
        for child in node.children:
            if child.test(facts) is None:
                return why_not(child, facts)
    elif op == NOT:
        for child in node.children:
            verdict = child.test(facts)
            if verdict is not None:
                return _refused(verdict)
    elif op in (OR, RULE):
        if len(node.children) == 1:
            return why_not(node.children[0], facts)
        return _none_of(node.path, [why_not(child, facts) for child in node.children])
    # nor (every entry matched), or an and whose entries all matched after all
    return _refused(node.miss)


def _refused(verdict: Verdict) -> Verdict:
    return Verdict(False, verdict.rule, verdict.criterion, verdict.outcome, verdict.kind,
                   NO_ALLOW_MATCHED)


def _none_of(path: str, reasons: list[Verdict]) -> Verdict:
    kind = common_kind({reason.kind for reason in reasons})
    return Verdict(False, path, "", "none matched", kind, NO_ALLOW_MATCHED)


def trace(node: Node, facts: Facts) -> TraceNode:
    """``node`` evaluated on ``facts``, with every entry hit, missed, unknown (about the
    person, for someone not signed in) or not evaluated (after the entry that settled its
    operator)."""
    if facts.authenticated:
        state = HIT if node.test(facts) is not None else MISS
    else:
        value = node.tri(facts)
        state = HIT if value else MISS if value is False else UNKNOWN
    if not node.op:
        return TraceNode(node.path, node.text, state)
    # the entry outcome that settles each operator: a miss for and/nor, a hit otherwise
    # (an unknown entry settles none: a later one may still)
    settles = MISS if node.op in (AND, NOR) else HIT
    children: list[TraceNode] = []
    settled = False
    for child in node.children:
        if settled:
            children.append(skipped(child))
            continue
        traced = trace(child, facts)
        children.append(traced)
        settled = traced.state == settles
    return TraceNode(node.path, node.text, state, tuple(children))


def skipped(node: Node) -> TraceNode:
    return TraceNode(node.path, node.text, NOT_EVALUATED,
                     tuple(skipped(child) for child in node.children))
