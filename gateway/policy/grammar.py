"""A route's ``policy`` value read into a ``Document``, every problem at its key path.

The grammar is PPL's: one rule or a list of rules; a rule is an object with ``allow``
and/or ``deny``, each a body of operators (``and``, ``or``, ``not``, ``nor``), each a
list of one-key criterion objects. Beyond PPL an entry of an operator's list may itself
be an operator (``{or: [...]}``), to any depth up to ``MAX_DEPTH``. Empty rules, bodies
and lists are refused: in PPL they silently never (or always) match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.criteria import CRITERIA, describe
from gateway.policy.nodes import ACTIONS, OPERATORS, Criterion, Document, Operator, Rule
from gateway.policy.operands import show
from gateway.policy.problems import Problems, did_you_mean

MAX_DEPTH = 16


def parse_document(raw: Any, where: str, problems: Problems) -> Document | None:
    """``raw`` (the ``policy`` value as loaded from YAML, JSON or TOML) at key path
    ``where``; ``None`` when any problem was recorded."""
    before = len(problems.errors)
    if isinstance(raw, Mapping):
        items = [(where, raw)]
    elif isinstance(raw, list):
        if not raw:
            problems.error(where, "empty policy: give at least one allow or deny rule, or "
                                  "leave the key out")
            return None
        items = [(f"{where}[{i}]", item) for i, item in enumerate(raw)]
    else:
        problems.error(where, f"expected a rule ({{allow: ...}} or {{deny: ...}}) or a list "
                              f"of rules, got {show(raw)}")
        return None
    rules: list[Rule] = []
    for at, item in items:
        rules.extend(_rule_object(item, at, problems))
    if len(problems.errors) > before:
        return None
    return Document(tuple(rules))


def _rule_object(item: Any, where: str, problems: Problems) -> list[Rule]:
    if not isinstance(item, Mapping) or not item:
        problems.error(where, f"expected a rule: {{allow: BODY}} or {{deny: BODY}}, got "
                              f"{show(item)}")
        return []
    rules: list[Rule] = []
    for key, body in item.items():
        at = f"{where}.{key}"
        if key not in ACTIONS:
            problems.error(at, "unknown action; a rule is allow or deny"
                           + did_you_mean(key, ACTIONS))
            continue
        operators = _body(body, at, problems)
        if operators:
            rules.append(Rule(str(key), operators))
    return rules


def _body(body: Any, where: str, problems: Problems) -> tuple[Operator, ...]:
    if not isinstance(body, Mapping) or not body:
        problems.error(where, "empty rule: give and, or, not or nor, each with a list of "
                              f"criteria (got {show(body)})")
        return ()
    operators: list[Operator] = []
    for key, entries in body.items():
        at = f"{where}.{key}"
        if key in OPERATORS:
            operator = _operator(str(key), entries, at, problems, 1)
            if operator is not None:
                operators.append(operator)
        elif isinstance(key, str) and key.partition("/")[0] in CRITERIA:
            problems.error(at, f"{key} is a criterion: put it in a list under an operator "
                               f"(allow: {{or: [{{{key}: ...}}]}})")
        else:
            problems.error(at, "unknown operator; use and, or, not or nor"
                           + did_you_mean(key, OPERATORS))
    return tuple(operators)


def _operator(op: str, entries: Any, where: str, problems: Problems,
              depth: int) -> Operator | None:
    if not isinstance(entries, list):
        problems.error(where, f"expected a list of criteria, got {show(entries)}")
        return None
    if not entries:
        problems.error(where, "empty list: give at least one criterion")
        return None
    if depth > MAX_DEPTH:
        problems.error(where, f"operators nested more than {MAX_DEPTH} deep")
        return None
    parsed: list[Criterion | Operator] = []
    for i, entry in enumerate(entries):
        node = _entry(entry, f"{where}[{i}]", problems, depth)
        if node is not None:
            parsed.append(node)
    if len(parsed) != len(entries):
        return None
    return Operator(op, tuple(parsed))


def _entry(entry: Any, where: str, problems: Problems,
           depth: int) -> Criterion | Operator | None:
    if not isinstance(entry, Mapping) or len(entry) != 1:
        what = ("an object with several keys: give each criterion its own list entry"
                if isinstance(entry, Mapping) and entry else f"got {show(entry)}")
        problems.error(where, f"expected one criterion ({{name: value}}); {what}")
        return None
    key, value = next(iter(entry.items()))
    at = f"{where}.{key}"
    if key in OPERATORS:
        return _operator(str(key), value, at, problems, depth + 1)
    if not isinstance(key, str):
        problems.error(at, "unknown criterion" + did_you_mean(key, CRITERIA))
        return None
    name, slash, sub = key.partition("/")
    spec = CRITERIA.get(name)
    if spec is None:
        problems.error(at, "unknown criterion" + did_you_mean(key, CRITERIA))
        return None
    if spec.sub and not sub.strip():
        problems.error(at, f"{name} needs a name after a slash: {name}/NAME "
                           "(nested names with dots: claim/address.country)")
        return None
    if slash and not spec.sub:
        problems.error(at, f"{name} takes no /sub-path")
        return None
    operand = spec.parse(value, at, problems)
    if operand is None:
        return None
    criterion = Criterion(name, operand, sub.strip())
    return Criterion(name, operand, criterion.sub, describe(criterion))
