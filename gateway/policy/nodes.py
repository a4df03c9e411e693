"""The policy language's syntax tree: what a route's ``policy`` says, parsed and checked.

Every value is already in the form evaluation compares (lower-cased e-mail matchers,
canonical networks, epoch instants, seconds since midnight), so compiling a node never
fails. Nodes are frozen and comparable: two routes with the same policy compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALLOW = "allow"
DENY = "deny"
ACTIONS = (ALLOW, DENY)
AND, OR, NOT, NOR = "and", "or", "not", "nor"
OPERATORS = (AND, OR, NOT, NOR)
RULE = "rule"  # a compiled rule: its operators are alternatives
STRING_MATCHERS = ("is", "starts_with", "ends_with", "contains", "in", "not_in")
LIST_MATCHERS = ("has",)


@dataclass(frozen=True, slots=True)
class StringMatch:
    """One string-matcher operator and its operand: one value, or several for ``in`` and
    ``not_in``."""

    op: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Flag:
    """A criterion that takes no operand (``accept``, ``authenticated_user``, ...)."""


@dataclass(frozen=True, slots=True)
class Strings:
    """A string matcher: every one of ``matches`` must hold."""

    matches: tuple[StringMatch, ...]


@dataclass(frozen=True, slots=True)
class Has:
    """A string-list matcher: the list holds ``value``."""

    value: str


@dataclass(frozen=True, slots=True)
class ClaimName:
    """The operand of ``ssh_username_matches_claim``: a (dotted) claim name."""

    name: str


@dataclass(frozen=True, slots=True)
class Networks:
    """Canonical CIDR strings (``10.0.0.0/8``, ``2001:db8::/32``)."""

    cidrs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Certificate:
    """A client-certificate matcher; an empty one asks only that a certificate was
    presented. Every condition given must hold."""

    fingerprints: tuple[str, ...] = ()  # SHA-256 of the DER, lower-case hex
    spki_hashes: tuple[str, ...] = ()  # SHA-256 of the SubjectPublicKeyInfo, base64
    san_email: Strings | None = None
    san_dns: Strings | None = None
    san_uri: Strings | None = None


@dataclass(frozen=True, slots=True)
class DateRange:
    """Instants (epoch seconds): ``after`` <= now < ``before``."""

    after: float | None
    before: float | None


@dataclass(frozen=True, slots=True)
class Weekdays:
    """Days of the week (Monday 0 .. Sunday 6) in ``timezone``."""

    days: frozenset[int]
    timezone: str


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Seconds since local midnight in ``timezone``: ``after`` <= t < ``before``, or,
    when ``after`` is later than ``before``, the window across midnight."""

    after: float | None
    before: float | None
    timezone: str


Operand = (Flag | Strings | Has | ClaimName | Networks | Certificate | DateRange | Weekdays
           | TimeWindow)


@dataclass(frozen=True, slots=True)
class Criterion:
    """``name`` (``claim`` with ``sub`` the claim's name) applied to ``operand``; ``text``
    is how logs and traces show it."""

    name: str
    operand: Operand
    sub: str = ""
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Operator:
    """``and``, ``or``, ``not`` or ``nor`` over its entries (criteria, or operators: the
    nesting PPL itself does not have)."""

    op: str
    entries: tuple[Criterion | Operator, ...]


@dataclass(frozen=True, slots=True)
class Rule:
    """``allow`` or ``deny`` with its body: operators that are alternatives (the body
    matches when any of them does). ``label`` names a rule that did not come from the
    ``policy`` list (the legacy fields: ``allowed_users``, ...)."""

    action: str
    body: tuple[Operator, ...]
    label: str = ""


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed ``policy``: its rules in order."""

    rules: tuple[Rule, ...] = ()


def criteria_of(document: Document) -> list[Criterion]:
    """Every criterion of ``document``, in order, however deeply nested."""
    found: list[Criterion] = []

    def visit(entry: Criterion | Operator) -> None:
        if isinstance(entry, Criterion):
            found.append(entry)
        else:
            for inner in entry.entries:
                visit(inner)

    for rule in document.rules:
        for operator in rule.body:
            visit(operator)
    return found
