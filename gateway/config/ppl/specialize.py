"""A compiled policy specialised for one person: what it says of who they are is
decided once, and only what it says of the request is left to test.

A decider that remembers a signed-in person's decision asks the policy again on each
request when the policy reads the request (method, path, address, clock, ...). Most of
a typical policy is about the person (groups, e-mail, claims), and that part cannot
change while the decision is remembered. ``specialize`` evaluates those criteria on the
person's facts and folds them into their operators: an ``and`` loses the entries that
matched and is settled by one that did not, an ``or`` stops at the first that matched,
and so on. What is left are functions of the request only, returning the very verdicts
the whole policy returns, in the same order (a test holds the two to each other on
random policies and requests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.ppl.compile import Node, Policy, Test
from gateway.config.ppl.criteria import CLOSED, IDENTITY_KINDS
from gateway.config.ppl.explain import refusal
from gateway.config.ppl.facts import Facts
from gateway.config.ppl.nodes import AND, NOR, NOT, OR, RULE
from gateway.config.ppl.verdict import Verdict

# Criteria whose outcome the person's facts settle: who they are (and accept/reject).
_FIXED_KINDS = IDENTITY_KINDS | {CLOSED}


class _Part:
    """A node as specialised: ``fixed`` (the person settled it) with its ``verdict``
    (``None``: it did not match), or a ``test`` (and ``pred``) of the request."""

    __slots__ = ("fixed", "pred", "test", "verdict")

    def __init__(self, test: Test, pred: Callable[[Facts], bool], fixed: bool = False,
                 verdict: Verdict | None = None) -> None:
        self.test = test
        self.pred = pred
        self.fixed = fixed
        self.verdict = verdict


def _settled(verdict: Verdict | None) -> _Part:
    matched = verdict is not None
    return _Part(lambda f: verdict, lambda f: matched, True, verdict)


def _part(node: Node, person: Facts) -> _Part:
    if not node.op:
        if not node.reads and node.kind in _FIXED_KINDS:
            return _settled(node.test(person))
        return _Part(node.test, node.pred)
    parts = [_part(child, person) for child in node.children]
    if node.op in (OR, RULE):
        return _any(parts, node.children)
    if node.op == AND:
        return _all(parts, node.hit)
    if node.op == NOT:
        return _none(parts, node.hit)
    if node.op == NOR:
        return _not_all(parts, node.children)
    raise AssertionError(f"unknown operator {node.op}")


def _any(parts: list[_Part], children: tuple[Node, ...]) -> _Part:
    """The first entry that matches gives its verdict (a criterion's hit, an operator's
    own verdict); a settled match ends the list, settled misses drop out."""
    entries: list[tuple[Callable[[Facts], Any], Verdict | None]] = []
    last: Verdict | None = None
    for part, child in zip(parts, children, strict=True):
        if part.fixed:
            if part.verdict is not None:
                last = part.verdict
                break
            continue
        entries.append((part.pred, child.hit) if not child.op else (part.test, None))
    if not entries:
        return _settled(last)
    final = last

    def any_of(f: Facts) -> Verdict | None:
        for call, verdict in entries:
            if verdict is None:
                found: Verdict | None = call(f)
                if found is not None:
                    return found
            elif call(f):
                return verdict
        return final

    return _Part(any_of, lambda f: any_of(f) is not None)


def _all(parts: list[_Part], hit: Verdict) -> _Part:
    if any(p.fixed and p.verdict is None for p in parts):
        return _settled(None)
    preds = tuple(p.pred for p in parts if not p.fixed)
    if not preds:
        return _settled(hit)

    def all_of(f: Facts) -> Verdict | None:
        for pred in preds:
            if not pred(f):
                return None
        return hit

    return _Part(all_of, lambda f: all_of(f) is not None)


def _none(parts: list[_Part], hit: Verdict) -> _Part:
    if any(p.fixed and p.verdict is not None for p in parts):
        return _settled(None)
    preds = tuple(p.pred for p in parts if not p.fixed)
    if not preds:
        return _settled(hit)

    def none_of(f: Facts) -> Verdict | None:
        for pred in preds:
            if pred(f):
                return None
        return hit

    return _Part(none_of, lambda f: none_of(f) is not None)


def _not_all(parts: list[_Part], children: tuple[Node, ...]) -> _Part:
    """The first entry that does not match gives its miss; a settled miss ends the
    list (the entries before it are still asked), settled matches drop out."""
    pairs: list[tuple[Callable[[Facts], bool], Verdict]] = []
    last: Verdict | None = None
    for part, child in zip(parts, children, strict=True):
        if part.fixed:
            if part.verdict is None:
                last = child.miss
                break
            continue
        pairs.append((part.pred, child.miss))
    if not pairs:
        return _settled(last)
    final = last

    def not_all_of(f: Facts) -> Verdict | None:
        for pred, miss in pairs:
            if not pred(f):
                return miss
        return final

    return _Part(not_all_of, lambda f: not_all_of(f) is not None)


class Specialized:
    """``policy`` for the person of ``person`` (``Facts`` with their identity; the
    request fields are ignored): ``evaluate`` takes that person's facts of a request and
    returns exactly what ``policy.evaluate`` would."""

    __slots__ = ("_allow", "_deny", "policy")

    def __init__(self, policy: Policy, person: Facts) -> None:
        self.policy = policy
        self._deny = self._tests(policy.deny_rules, person)
        self._allow = self._tests(policy.allow_rules, person)

    @staticmethod
    def _tests(rules: tuple[Node, ...], person: Facts) -> tuple[Test, ...]:
        """Each rule's test, settled ones as constants; none after one that always
        matches (evaluation stops there)."""
        tests: list[Test] = []
        for rule in rules:
            part = _part(rule, person)
            if part.fixed:
                if part.verdict is not None:
                    tests.append(part.test)
                    break
                continue
            tests.append(part.test)
        return tuple(tests)

    def evaluate(self, facts: Facts) -> Verdict:
        for test in self._deny:
            verdict = test(facts)
            if verdict is not None:
                return verdict
        for test in self._allow:
            verdict = test(facts)
            if verdict is not None:
                return verdict
        policy = self.policy
        if not policy.allow_rules:
            return policy.no_allow_verdict
        return refusal(policy.allow_rules, facts)


def specialize(policy: Policy, person: Facts) -> Specialized:
    return Specialized(policy, person)
