"""The reference's allow fields as policy rules: each one ``allow`` alternative.

=====================================  ==========================================
field                                  PPL
=====================================  ==========================================
allow_public_unauthenticated_access    ``allow: {or: [{accept: true}]}``
cors_allow_preflight                   ``allow: {or: [{cors_preflight: true}]}``
allow_any_authenticated_user           ``allow: {or: [{authenticated_user: true}]}``
allowed_users: [U, ...]                ``allow: {or: [{email: {in: [U, ...]}},
                                       {user: {in: [U, ...]}}]}``
allowed_domains: [D, ...]              ``allow: {or: [{domain: {in: [D, ...]}}]}``
allowed_groups: [G, H]                 ``allow: {or: [{groups: {has: G}},
                                       {groups: {has: H}}]}``
allowed_idp_claims: {K: [V, W]}        ``allow: {or: [{claim/K: V}, {claim/K: W}]}``
=====================================  ==========================================

Each rule is labelled with its field (``allowed_users.or[1] user in [...]: matched``).
E-mail and domain compare case-insensitively, user ids exactly, as the fields always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.policy.criteria import describe
from gateway.policy.nodes import (
    ALLOW,
    OR,
    Criterion,
    Flag,
    Has,
    Operand,
    Operator,
    Rule,
    StringMatch,
    Strings,
)


class LegacyFields(Protocol):
    """The allow fields of a route (``gateway.config.routes.Route`` has them)."""

    @property
    def allow_public_unauthenticated_access(self) -> bool: ...
    @property
    def cors_allow_preflight(self) -> bool: ...
    @property
    def allow_any_authenticated_user(self) -> bool: ...
    @property
    def allowed_users(self) -> tuple[str, ...]: ...
    @property
    def allowed_domains(self) -> tuple[str, ...]: ...
    @property
    def allowed_groups(self) -> tuple[str, ...]: ...
    @property
    def allowed_idp_claims(self) -> Mapping[str, tuple[str, ...]]: ...


def _criterion(name: str, operand: Operand, sub: str = "") -> Criterion:
    return Criterion(name, operand, sub, describe(Criterion(name, operand, sub)))


def _in(values: tuple[str, ...], fold: bool) -> Strings:
    texts = tuple(dict.fromkeys(v.lower() if fold else v for v in values))
    return Strings((StringMatch("in", texts),))


def _rule(label: str, *criteria: Criterion) -> Rule:
    return Rule(ALLOW, (Operator(OR, criteria),), label)


def legacy_rules(route: LegacyFields) -> tuple[Rule, ...]:
    """The route's allow fields as rules, in the order ``evaluate`` tries them."""
    rules: list[Rule] = []
    for field, name in (("allow_public_unauthenticated_access", "accept"),
                        ("cors_allow_preflight", "cors_preflight"),
                        ("allow_any_authenticated_user", "authenticated_user")):
        if getattr(route, field):
            rules.append(_rule(field, _criterion(name, Flag())))
    if route.allowed_users:
        rules.append(_rule("allowed_users",
                           _criterion("email", _in(route.allowed_users, True)),
                           _criterion("user", _in(route.allowed_users, False))))
    if route.allowed_domains:
        rules.append(_rule("allowed_domains",
                           _criterion("domain", _in(route.allowed_domains, True))))
    if route.allowed_groups:
        rules.append(_rule("allowed_groups", *(
            _criterion("groups", Has(group)) for group in dict.fromkeys(route.allowed_groups))))
    claims = [_criterion("claim", Has(value), name)
              for name, values in route.allowed_idp_claims.items()
              for value in dict.fromkeys(values)]
    if claims:
        rules.append(_rule("allowed_idp_claims", *claims))
    return tuple(rules)


def legacy_ppl(route: LegacyFields) -> list[dict[str, Any]]:
    """The same rules written as PPL (for documentation and ``gateway policy check``)."""
    written: list[dict[str, Any]] = []
    for rule in legacy_rules(route):
        entries = [_written(c) for op in rule.body for c in op.entries
                   if isinstance(c, Criterion)]
        written.append({rule.action: {OR: entries}})
    return written


def _written(criterion: Criterion) -> dict[str, Any]:
    operand = criterion.operand
    if isinstance(operand, Flag):
        return {criterion.name: True}
    if isinstance(operand, Has):
        key = f"claim/{criterion.sub}" if criterion.name == "claim" else criterion.name
        return {key: operand.value} if criterion.name == "claim" else {key: {"has": operand.value}}
    assert isinstance(operand, Strings)
    match = operand.matches[0]
    return {criterion.name: {match.op: list(match.values)}}
