"""A ``Document`` compiled to plain functions: a ``Policy`` the gateway calls per request.

Each node becomes a closure ``Facts -> Verdict | None``: the verdict made at compile
time for the node that settled the match (a criterion for ``or``, the operator itself
for ``and`` and ``not``, the entry that failed for ``nor``), ``None`` for no match. PPL's
meaning, exactly: ``and`` all match, ``or`` any matches, ``not`` none matches (not A and not B),
``nor`` not all match (not A or not B); the operators of one body are alternatives; access needs
a matching ``allow`` and no matching ``deny``.

For someone not signed in a criterion about the person (``Spec.person``: user, e-mail,
domain, groups, claims, the login-name-against-the-person SSH criteria) is neither true
nor false but unknown, and operators combine the three values as Kleene's logic does
(``and``: false wins, ``or``: true wins, the negation of unknown is unknown). Pomerium
takes such a criterion as false, so ``not`` over it matches everyone not signed in: an
``allow: {not: [{groups: {has: contractors}}]}`` would let in anyone who does not sign
in. Here a decision with an unknown ``allow`` or ``deny`` waits for sign-in and is made
again with the person (``Policy.evaluate``). Each node has a second closure for this,
``tri``, called only for facts without a person, so a signed-in person's decision pays
nothing for it: one test of ``facts.authenticated`` in ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.policy.criteria import CORS, CRITERIA, POLICY, REQUEST_FACTS, common_kind
from gateway.policy.explain import refusal, trace
from gateway.policy.facts import Facts
from gateway.policy.nodes import (
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
from gateway.policy.predicates import Predicate, predicate
from gateway.policy.verdict import (
    ALLOW_MATCHED,
    DENY_MATCHED,
    NO_ALLOW_MATCHED,
    NOT_SIGNED_IN,
    UNKNOWN,
    Trace,
    Verdict,
)

Test = Callable[[Facts], Verdict | None]
# True, False, or None (unknown): a node's value for facts without a person
Tri = Callable[[Facts], bool | None]
_HIT_OUTCOME = {AND: "all matched", NOT: "none matched", OR: "matched", NOR: "not all matched",
                RULE: "matched"}
_MISS_OUTCOME = {AND: "not all matched", NOT: "one matched", OR: "none matched",
                 NOR: "all matched", RULE: "not matched"}


class Node:
    """One compiled rule, operator or criterion: its ``test`` (the verdict of a match, or
    ``None``), its ``pred`` (only whether it matched: what ``and``, ``not`` and ``nor``
    need of their entries, one call fewer for a criterion), and what the trace and the
    explanation of a refusal need (``path``, ``text``, ``kind``, ``children``); ``tri``,
    its three-valued outcome for facts without a person (never called with a person), and
    ``unknown``, the verdict of a rule whose outcome waits for sign-in."""

    __slots__ = ("allowed", "children", "criterion", "hit", "kind", "miss", "op", "path",
                 "pred", "reads", "test", "text", "tri", "unknown")

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
        self.unknown = Verdict(False, path, text, UNKNOWN, kind, NOT_SIGNED_IN)
        self.test: Test = _never
        self.pred: Predicate = _false
        self.tri: Tri = _false
        self.criterion: Criterion | None = None  # a criterion's (``specialize`` reads it)


def _never(facts: Facts) -> Verdict | None:
    return None


def _false(facts: Facts) -> bool:
    return False


def _unknown(facts: Facts) -> bool | None:
    return None


def compile_criterion(criterion: Criterion, path: str, allowed: bool,
                      negated: bool = False) -> Node:
    """``negated``: under an odd number of ``not``/``nor``; with ``allowed`` it says
    whether the criterion stands for "may" or "may not" (``mcp_tool``'s housekeeping
    value, ``predicates``)."""
    spec = CRITERIA[criterion.name]
    node = Node(path, criterion.text, "", spec.kind, allowed, (), spec.reads)
    node.criterion = criterion
    test, hit = predicate(criterion, housekeeping=allowed != negated), node.hit
    node.pred = test
    node.test = lambda f: hit if test(f) else None
    node.tri = _unknown if spec.person else test
    return node


def compile_operator(operator: Operator, path: str, allowed: bool,
                     negated: bool = False) -> Node:
    inner = negated != (operator.op in (NOT, NOR))
    children = tuple(
        compile_operator(entry, f"{path}[{i}].{entry.op}", allowed, inner)
        if isinstance(entry, Operator)
        else compile_criterion(entry, f"{path}[{i}]", allowed, inner)
        for i, entry in enumerate(operator.entries))
    node = Node(path, "", operator.op, _common_kind(children), allowed, children,
                frozenset().union(*(c.reads for c in children)))
    _set_tests(operator.op, node)
    return node


def _set_tests(op: str, node: Node) -> None:
    """``node.test``, ``node.pred`` and ``node.tri`` for an operator (or a rule:
    alternatives)."""
    test = _operator_test(op, node)
    node.test = test
    node.pred = lambda f: test(f) is not None
    node.tri = _operator_tri(op, tuple(child.tri for child in node.children))


def _operator_tri(op: str, tris: tuple[Tri, ...]) -> Tri:
    """Kleene's ``and``/``or`` over the entries' values, and their negations."""
    if op in (OR, RULE, NOT):
        def any_of(f: Facts) -> bool | None:
            value: bool | None = False
            for tri in tris:
                entry = tri(f)
                if entry:
                    return True
                if entry is None:
                    value = None
            return value
        return any_of if op != NOT else _negation(any_of)
    if op in (AND, NOR):
        def all_of(f: Facts) -> bool | None:
            value: bool | None = True
            for tri in tris:
                entry = tri(f)
                if entry is False:
                    return False
                if entry is None:
                    value = None
            return value
        return all_of if op != NOR else _negation(all_of)
    raise AssertionError(f"unknown operator {op}")


def _negation(tri: Tri) -> Tri:
    def negated(f: Facts) -> bool | None:
        value = tri(f)
        return None if value is None else not value
    return negated


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
        # decided again per request. Not for ``cors_preflight`` alone: a preflight is an
        # OPTIONS request, which no decision cache keeps or answers, and for every other
        # request it is false, so a decision remembered for one holds for the next (the
        # allow fields' ``cors_allow_preflight`` would otherwise make each request decide).
        self.per_request = bool(self.reads & REQUEST_FACTS - {CORS})
        self._none = Verdict(False, ALLOW, "", "no allow rule", POLICY, NO_ALLOW_MATCHED)

    def evaluate(self, facts: Facts) -> Verdict:
        if not facts.authenticated:
            return self._without_person(facts)
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

    def _without_person(self, facts: Facts) -> Verdict:
        """``evaluate`` for someone not signed in, in three values: let in only by an
        allow rule that is true whoever they are, with no deny rule true or unknown;
        refused (by the first deny rule that is true, or with the first unknown rule's
        verdict, which sends them to sign in) otherwise.

        An unknown deny waits for sign-in even where an allow rule lets in people not
        signed in: taken as not matching, ``deny: {and: [{http_path: ...}, {not: [{groups:
        {has: admins}}]}]}`` beside ``accept`` would open the admins' pages to everyone
        who does not sign in, the very trap of ``not`` in the other direction."""
        deny_waits: Node | None = None
        for rule in self.deny_rules:
            value = rule.tri(facts)
            if value:
                # true with the person unknown is true with each person criterion false
                # too, so the two-valued test matches, and names what matched
                return rule.test(facts) or rule.hit
            if value is None and deny_waits is None:
                deny_waits = rule
        allow_waits: Node | None = None
        for rule in self.allow_rules:
            value = rule.tri(facts)
            if value:
                if deny_waits is not None:
                    return deny_waits.unknown
                return rule.test(facts) or rule.hit
            if value is None and allow_waits is None:
                allow_waits = rule
        if allow_waits is not None:
            return allow_waits.unknown
        if not self.allow_rules:
            return self._none
        # every allow rule false whoever signs in: why, as for anyone
        return refusal(self.allow_rules, facts)

    @property
    def no_allow_verdict(self) -> Verdict:
        """The verdict of a policy with deny rules only, when none of them matched."""
        return self._none

    def explain(self, facts: Facts) -> Trace:
        return Trace(self.evaluate(facts), tuple(trace(rule, facts) for rule in self.rules))

    def __repr__(self) -> str:
        return f"Policy({len(self.allow_rules)} allow, {len(self.deny_rules)} deny)"
