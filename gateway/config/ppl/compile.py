"""A ``Document`` compiled to plain functions: a ``Policy`` the gateway calls per request.

Each node becomes a closure ``Facts -> Verdict | None``: the verdict made at compile
time for the node that settled the match (a criterion for ``or``, the operator itself
for ``and`` and ``not``, the entry that failed for ``nor``), ``None`` for no match. PPL's
meaning, exactly: ``and`` all match, ``or`` any matches, ``not`` none matches (not A and not B),
``nor`` not all match (not A or not B); the operators of one body are alternatives; access needs
a matching ``allow`` and no matching ``deny``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.ppl.criteria import CRITERIA, POLICY, REQUEST_FACTS, common_kind
from gateway.config.ppl.explain import refusal, trace
from gateway.config.ppl.facts import Facts
from gateway.config.ppl.nodes import (
    ALLOW,
    AND,
    NOR,
    NOT,
    OR,
    RULE,
    Criterion,
    Document,
    Operator,
    Rule,
)
from gateway.config.ppl.predicates import Predicate, predicate
from gateway.config.ppl.verdict import (
    ALLOW_MATCHED,
    DENY_MATCHED,
    NO_ALLOW_MATCHED,
    Trace,
    Verdict,
)

Test = Callable[[Facts], Verdict | None]
_HIT_OUTCOME = {AND: "all matched", NOT: "none matched", OR: "matched", NOR: "not all matched",
                RULE: "matched"}
_MISS_OUTCOME = {AND: "not all matched", NOT: "one matched", OR: "none matched",
                 NOR: "all matched", RULE: "not matched"}


class Node:
    """One compiled rule, operator or criterion: its ``test`` (the verdict of a match, or
    ``None``), its ``pred`` (only whether it matched: what ``and``, ``not`` and ``nor``
    need of their entries, one call fewer for a criterion), and what the trace and the
    explanation of a refusal need (``path``, ``text``, ``kind``, ``children``)."""

    __slots__ = ("allowed", "children", "criterion", "hit", "kind", "miss", "op", "path",
                 "pred", "reads", "test", "text")

    def __init__(self, path: str, text: str, op: str, kind: str, allowed: bool,
                 children: tuple[Node, ...], reads: frozenset[str]) -> None:
        self.path = path
        self.text = text
        self.op = op  # "" for a criterion
        self.kind = kind
        self.allowed = allowed  # in an allow rule
        self.children = children
        self.reads = reads
        code = ALLOW_MATCHED if allowed else DENY_MATCHED
        self.hit = Verdict(allowed, path, text, _HIT_OUTCOME.get(op, "matched"), kind, code)
        self.miss = Verdict(allowed, path, text, _MISS_OUTCOME.get(op, "not matched"), kind,
                            code)
        self.test: Test = _never
        self.pred: Predicate = _false
        self.criterion: Criterion | None = None  # a criterion's (``specialize`` reads it)


def _never(facts: Facts) -> Verdict | None:
    return None


def _false(facts: Facts) -> bool:
    return False


def compile_criterion(criterion: Criterion, path: str, allowed: bool) -> Node:
    spec = CRITERIA[criterion.name]
    node = Node(path, criterion.text, "", spec.kind, allowed, (), spec.reads)
    node.criterion = criterion
    test, hit = predicate(criterion), node.hit
    node.pred = test
    node.test = lambda f: hit if test(f) else None
    return node


def compile_operator(operator: Operator, path: str, allowed: bool) -> Node:
    children = tuple(
        compile_operator(entry, f"{path}[{i}].{entry.op}", allowed)
        if isinstance(entry, Operator) else compile_criterion(entry, f"{path}[{i}]", allowed)
        for i, entry in enumerate(operator.entries))
    node = Node(path, "", operator.op, _common_kind(children), allowed, children,
                frozenset().union(*(c.reads for c in children)))
    _set_tests(operator.op, node)
    return node


def _set_tests(op: str, node: Node) -> None:
    """``node.test`` and ``node.pred`` for an operator (or a rule: alternatives)."""
    test = _operator_test(op, node)
    node.test = test
    node.pred = lambda f: test(f) is not None


def _operator_test(op: str, node: Node) -> Test:
    preds = tuple(child.pred for child in node.children)
    hit = node.hit
    if op in (OR, RULE):
        if len(node.children) == 1:
            return node.children[0].test
        # a criterion: its predicate, then its verdict; an operator: its own test
        entries: tuple[tuple[Callable[[Facts], Any], Verdict | None], ...] = tuple(
            (child.pred, child.hit) if not child.op else (child.test, None)
            for child in node.children)

        def any_of(f: Facts) -> Verdict | None:
            for call, verdict in entries:
                if verdict is None:
                    found: Verdict | None = call(f)
                    if found is not None:
                        return found
                elif call(f):
                    return verdict
            return None
        return any_of
    if op == AND:
        def all_of(f: Facts) -> Verdict | None:
            for pred in preds:
                if not pred(f):
                    return None
            return hit
        return all_of
    if op == NOT:
        def none_of(f: Facts) -> Verdict | None:
            for pred in preds:
                if pred(f):
                    return None
            return hit
        return none_of
    if op == NOR:
        pairs = tuple((child.pred, child.miss) for child in node.children)

        def not_all_of(f: Facts) -> Verdict | None:
            for pred, miss in pairs:
                if not pred(f):
                    return miss
            return None
        return not_all_of
    raise AssertionError(f"unknown operator {op}")


def compile_rule(rule: Rule, label: str) -> Node:
    allowed = rule.action == ALLOW
    children = tuple(compile_operator(op, f"{label}.{op.op}", allowed) for op in rule.body)
    node = Node(label, "", RULE, _common_kind(children), allowed, children,
                frozenset().union(*(c.reads for c in children)))
    _set_tests(RULE, node)
    return node


def _common_kind(children: tuple[Node, ...]) -> str:
    return common_kind({child.kind for child in children})


class Policy:
    """A compiled policy. ``evaluate(facts)`` decides; ``explain(facts)`` decides and
    traces every rule; ``reads`` names the request facts any criterion reads
    (``method``, ``path``, ``client_ip``, ``client_cert``, ``clock``, ``cors``,
    ``ssh_username``): a decision that read one of them (``REQUEST_FACTS``) is made
    again for every request."""

    __slots__ = ("_allow", "_deny", "_none", "allow_rules", "deny_rules", "document",
                 "per_request", "reads", "rules")

    def __init__(self, document: Document) -> None:
        self.document = document
        counts = {ALLOW: 0, "deny": 0}
        rules: list[Node] = []
        for rule in document.rules:
            label = rule.label
            if not label:  # allow[i] / deny[j]: the i-th allow (j-th deny) of ``policy``
                label = f"{rule.action}[{counts[rule.action]}]"
                counts[rule.action] += 1
            rules.append(compile_rule(rule, label))
        self.rules = tuple(rules)
        self.allow_rules = tuple(r for r in rules if r.allowed)
        self.deny_rules = tuple(r for r in rules if not r.allowed)
        self._allow = tuple(r.test for r in self.allow_rules)
        self._deny = tuple(r.test for r in self.deny_rules)
        self.reads: frozenset[str] = frozenset().union(*(r.reads for r in rules))
        self.per_request = bool(self.reads & REQUEST_FACTS)  # decided again per request
        self._none = Verdict(False, ALLOW, "", "no allow rule", POLICY, NO_ALLOW_MATCHED)

    def evaluate(self, facts: Facts) -> Verdict:
        for test in self._deny:
            verdict = test(facts)
            if verdict is not None:
                return verdict
        for test in self._allow:
            verdict = test(facts)
            if verdict is not None:
                return verdict
        if not self.allow_rules:
            return self._none
        return refusal(self.allow_rules, facts)

    @property
    def no_allow_verdict(self) -> Verdict:
        """The verdict of a policy with deny rules only, when none of them matched."""
        return self._none

    def explain(self, facts: Facts) -> Trace:
        return Trace(self.evaluate(facts), tuple(trace(rule, facts) for rule in self.rules))

    def __repr__(self) -> str:
        return f"Policy({len(self.allow_rules)} allow, {len(self.deny_rules)} deny)"
