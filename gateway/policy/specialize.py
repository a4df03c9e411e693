"""A compiled policy specialised for one person: one generated function of the request.

A decider that remembers a signed-in person's decision asks the policy again on each
request when the policy reads the request (method, path, address, clock, ...). Most of
a typical policy is about the person (groups, e-mail, claims), which cannot change while
the decision is remembered, and each criterion the general evaluation calls is a Python
call of its own, the dearest thing on this path. ``specialize`` decides the person's
criteria once, folds them into their operators (an ``and`` loses the entries that
matched and is settled by one that did not, an ``or`` stops at the first that matched,
and so on), and writes what is left as the body of one function: a line per rule or
entry, ``if method in K3 and path.startswith(K4): return K5``, with the common request
criteria as expressions and any other as a call of its compiled predicate. It returns
the very verdicts the whole policy returns, in the same order: a test holds the two to
each other on random policies, people and requests.

The generated source holds no value of the configuration: every constant (sets,
prefixes, verdicts, predicates) is a name bound in the function's globals, so no text
from a policy is ever compiled as code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.policy.compile import Node, Policy
from gateway.policy.criteria import CLOSED, IDENTITY_KINDS
from gateway.policy.explain import refusal
from gateway.policy.facts import CertFacts, Facts
from gateway.policy.network import network_test
from gateway.policy.nodes import (
    AND,
    NOR,
    NOT,
    OR,
    RULE,
    DateRange,
    Networks,
    Strings,
    TimeWindow,
)
from gateway.policy.predicates import DAY, UTC_ZONES, lone_members
from gateway.policy.verdict import Verdict

# Criteria whose outcome the person's facts settle: who they are (and accept/reject).
_FIXED_KINDS = IDENTITY_KINDS | {CLOSED}
# What the generated function is called with, by name.
_ARGUMENTS = "method, path, client_ip, cert, cors, now"
_FACTS = "P.for_request(method, path, client_ip, cert, cors, False, now)"
Decide = Callable[[str, str, str, "CertFacts | None", bool, float], Verdict]
Expr = str | bool  # an expression's source, or its value when the person settled it


class _Writer:
    """The body of one function, and the constants its lines name."""

    def __init__(self, person: Facts) -> None:
        self.person = person
        self.names: dict[str, Any] = {}
        self.lines: list[str] = []
        self.facts = False  # some line reads ``f``, the request's whole facts

    def const(self, value: Any) -> str:
        name = f"K{len(self.names)}"
        self.names[name] = value
        return name

    def criterion(self, node: Node) -> Expr:
        if not node.reads and node.kind in _FIXED_KINDS:
            return bool(node.pred(self.person))
        criterion = node.criterion
        assert criterion is not None
        name, operand = criterion.name, criterion.operand
        if isinstance(operand, Strings) and name in ("http_method", "http_path"):
            field = "method" if name == "http_method" else "path"
            members = lone_members(operand)
            if members is not None:
                return f"{field} in {self.const(members)}"
            only = operand.matches[0] if len(operand.matches) == 1 else None
            if only is not None and only.op == "starts_with":
                return f"{field}.startswith({self.const(only.values[0])})"
        if isinstance(operand, Networks):
            return f"{self.const(network_test(operand))}(client_ip)"
        if name == "cors_preflight":
            return "cors"
        if isinstance(operand, DateRange):
            after = operand.after if operand.after is not None else float("-inf")
            before = operand.before if operand.before is not None else float("inf")
            return f"{self.const(after)} <= now < {self.const(before)}"
        if isinstance(operand, TimeWindow) and operand.timezone in UTC_ZONES:
            start = operand.after if operand.after is not None else 0.0
            end = operand.before if operand.before is not None else DAY
            start_name, end_name = self.const(start), self.const(end)
            if start < end or operand.after is None or operand.before is None:
                return f"{start_name} <= now % {DAY!r} < {end_name}"
            return f"not {end_name} <= now % {DAY!r} < {start_name}"
        self.facts = True
        return f"{self.const(node.pred)}(f)"

    def pred(self, node: Node) -> Expr:
        """Whether ``node`` matches, as an expression (or a constant)."""
        if not node.op:
            return self.criterion(node)
        parts = [self.pred(child) for child in node.children]
        if node.op == AND:
            return _joined(parts, "and", settles=False, negate=False)
        if node.op in (OR, RULE):
            return _joined(parts, "or", settles=True, negate=False)
        if node.op == NOT:
            return _joined(parts, "or", settles=True, negate=True)
        if node.op == NOR:
            return _joined(parts, "and", settles=False, negate=True)
        raise AssertionError(f"unknown operator {node.op}")

    def verdict(self, node: Node) -> bool:
        """Lines returning ``node``'s verdict when it matches (falling through when it
        does not); True when they always return, so that nothing after them is
        reached."""
        if node.op in (OR, RULE):
            for child in node.children:
                if child.op:
                    if self.verdict(child):
                        return True
                elif self.returns(self.pred(child), child.hit):
                    return True
            return False
        if node.op == NOR:
            for child in node.children:
                matched = self.pred(child)
                if matched is True:
                    continue
                if self.returns(_negated(matched), child.miss):
                    return True
            return False
        return self.returns(self.pred(node), node.hit)

    def returns(self, condition: Expr, verdict: Verdict) -> bool:
        if condition is False:
            return False
        if condition is True:
            self.lines.append(f"return {self.const(verdict)}")
            return True
        self.lines.append(f"if {condition}: return {self.const(verdict)}")
        return False


def _joined(parts: list[Expr], op: str, *, settles: bool, negate: bool) -> Expr:
    """``a op b op ...`` without the entries the person settled, or the constant the
    person settled it to (``settles``: the constant that decides ``op``); negated for
    ``not``/``nor``."""
    if settles in parts:
        return settles if not negate else not settles
    rest = [p for p in parts if p is not (not settles)]
    if not rest:
        return (not settles) if not negate else settles
    joined = str(rest[0]) if len(rest) == 1 else f" {op} ".join(f"({p})" for p in rest)
    return f"not ({joined})" if negate else joined


def _negated(expr: Expr) -> Expr:
    return (not expr) if isinstance(expr, bool) else f"not ({expr})"


class Specialized:
    """``policy`` for the person of ``person`` (``Facts`` with their identity; its
    request fields are not read). ``decide(method, path, client_ip, cert, cors, now)``
    returns exactly what ``policy.evaluate`` returns for that person's facts of that
    request; ``source`` is the generated function's body, for tests and debugging."""

    __slots__ = ("decide", "source")

    def __init__(self, policy: Policy, person: Facts) -> None:
        writer = _Writer(person)
        if not person.authenticated:
            # nobody signed in: criteria about the person are unknown, not false
            # (``compile``), and deciders remember no such decision; the whole policy
            writer.lines.append(f"return {writer.const(policy.evaluate)}({_FACTS})")
        else:
            self._write(policy, writer)
        body = writer.lines
        if writer.facts:  # the request's whole facts, for a criterion not written inline
            body = [f"f = {_FACTS}", *body]
        self.source = f"def decide({_ARGUMENTS}):\n" + "".join(f"    {line}\n"
                                                             for line in body)
        namespace: dict[str, Any] = {"__builtins__": {}, "P": person, **writer.names}
        exec(compile(self.source, "<policy specialised>", "exec"), namespace)
        self.decide: Decide = namespace["decide"]

    @staticmethod
    def _write(policy: Policy, writer: _Writer) -> None:
        for rule in policy.deny_rules + policy.allow_rules:
            if writer.verdict(rule):
                return
        if policy.allow_rules:  # why none matched, from the whole facts (refusals only)
            writer.lines.append(f"return {writer.const(refusal)}("
                                f"{writer.const(policy.allow_rules)}, {_FACTS})")
        else:
            writer.lines.append(f"return {writer.const(policy.no_allow_verdict)}")

    def evaluate(self, facts: Facts) -> Verdict:
        """``decide`` on the request fields of ``facts`` (whose person must be this
        one's)."""
        return self.decide(facts.method, facts.path, facts.client_ip, facts.client_cert,
                           facts.cors_preflight, facts.now)


def specialize(policy: Policy, person: Facts) -> Specialized:
    return Specialized(policy, person)
