"""Every criterion the policy language knows: how its operand is read, what request facts
it reads (so callers know what a cached decision rests on) and the kind of condition it
is (the words of a refusal, never its values)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.policy.certificate import parse_certificate
from gateway.policy.network import parse_networks
from gateway.policy.nodes import (
    Certificate,
    ClaimName,
    Criterion,
    DateRange,
    Flag,
    Has,
    Networks,
    Operand,
    Strings,
    TimeWindow,
    Weekdays,
)
from gateway.policy.operands import describe_strings, parse_has, parse_strings, show
from gateway.policy.problems import Problems
from gateway.policy.times import (
    UTC,
    clock_text,
    days_text,
    instant_text,
    parse_date,
    parse_time_of_day,
    parse_weekdays,
)

# The request facts a criterion reads (``Policy.reads``).
METHOD, PATH, CLIENT_IP, CLIENT_CERT, CLOCK, CORS, SSH_USERNAME, MCP = (
    "method", "path", "client_ip", "client_cert", "clock", "cors", "ssh_username", "mcp")
# What a policy may read of a request besides the identity: a decision that read one of
# these holds for that request only, and is not remembered for the next.
REQUEST_FACTS = frozenset({METHOD, PATH, CLIENT_IP, CLIENT_CERT, CLOCK, CORS, SSH_USERNAME,
                           MCP})
# Kinds of condition (``Verdict.kind``).
CLOSED, USER, DOMAIN, GROUP, CLAIM, METHOD_KIND, PATH_KIND, NETWORK, CERTIFICATE = (
    "closed", "user", "domain", "group", "claim", "method", "path", "network", "certificate")
PROVIDER = "provider"
MCP_KIND = "mcp"
OUTSIDE_DATES, OUTSIDE_DAYS, OUTSIDE_HOURS, SSH_USER, POLICY = (
    "outside-dates", "outside-days", "outside-hours", "ssh-user", "policy")

IDENTITY_KINDS = frozenset({USER, DOMAIN, GROUP, CLAIM, PROVIDER})

Parse = Callable[[Any, str, Problems], Operand | None]


def common_kind(kinds: set[str]) -> str:
    """The kind of several conditions together: theirs when they share one, ``user`` when
    all are about who the person is, else ``policy``."""
    if len(kinds) == 1:
        return next(iter(kinds))
    return USER if kinds <= IDENTITY_KINDS else POLICY


@dataclass(frozen=True, slots=True)
class Spec:
    parse: Parse
    kind: str
    reads: frozenset[str] = frozenset()
    sub: bool = False  # takes a sub-path: ``claim/NAME``
    # about the person: unknown for someone not signed in (``compile``'s three values)
    person: bool = False


def _flag(value: Any, where: str, problems: Problems) -> Flag | None:
    """PPL ignores the operand of these criteria (it is typically ``true``); ``false``
    is refused here, since whoever wrote it meant the opposite of what it would do."""
    if value is True or value is None:
        return Flag()
    problems.error(where, f"takes true, got {show(value)} (for the opposite, put the "
                          "criterion under not:)")
    return None


def _lower(value: Any, where: str, problems: Problems) -> Strings | None:
    return parse_strings(value, where, problems, str.lower)


def _upper(value: Any, where: str, problems: Problems) -> Strings | None:
    return parse_strings(value, where, problems, str.upper)


def _exact(value: Any, where: str, problems: Problems) -> Strings | None:
    return parse_strings(value, where, problems)


def _claim_name(value: Any, where: str, problems: Problems) -> ClaimName | None:
    if isinstance(value, str) and value.strip():
        return ClaimName(value.strip())
    problems.error(where, f"expected a claim name, got {show(value)}")
    return None


CRITERIA: dict[str, Spec] = {
    "accept": Spec(_flag, CLOSED),
    "reject": Spec(_flag, CLOSED),
    # not ``person``: whether anyone is signed in is known for someone who is not (no)
    "authenticated_user": Spec(_flag, USER),
    "user": Spec(_exact, USER, person=True),
    "email": Spec(_lower, USER, person=True),
    "domain": Spec(_lower, DOMAIN, person=True),
    "groups": Spec(parse_has, GROUP, person=True),
    "claim": Spec(parse_has, CLAIM, sub=True, person=True),
    # the id of the identity provider the person signed in (or the token came) through
    "provider": Spec(_exact, PROVIDER, person=True),
    "http_method": Spec(_upper, METHOD_KIND, frozenset({METHOD})),
    "http_path": Spec(_exact, PATH_KIND, frozenset({PATH})),
    "source_ip": Spec(parse_networks, NETWORK, frozenset({CLIENT_IP})),
    "client_certificate": Spec(parse_certificate, CERTIFICATE, frozenset({CLIENT_CERT})),
    "cors_preflight": Spec(_flag, METHOD_KIND, frozenset({CORS})),
    "date": Spec(parse_date, OUTSIDE_DATES, frozenset({CLOCK})),
    "day_of_week": Spec(parse_weekdays, OUTSIDE_DAYS, frozenset({CLOCK})),
    "time_of_day": Spec(parse_time_of_day, OUTSIDE_HOURS, frozenset({CLOCK})),
    # the gateway's own /.gateway/ endpoints are answered before any route's policy is
    # asked, so in a route's policy this never matches (a warning at load says so)
    "gateway_routes": Spec(_flag, PATH_KIND),
    "ssh_username": Spec(_exact, SSH_USER, frozenset({SSH_USERNAME})),
    # a JSON-RPC message of an MCP route: its method, and the tool a tools/call names
    # (``predicates.mcp_tool_test`` says which messages the tool criterion is about)
    "mcp_method": Spec(_exact, MCP_KIND, frozenset({MCP})),
    "mcp_tool": Spec(_exact, MCP_KIND, frozenset({MCP})),
    # these two compare the login name with the person's e-mail or claim: about the person
    "ssh_username_matches_email": Spec(_flag, SSH_USER, frozenset({SSH_USERNAME}),
                                       person=True),
    "ssh_username_matches_claim": Spec(_claim_name, SSH_USER, frozenset({SSH_USERNAME}),
                                       person=True),
}


def describe(criterion: Criterion) -> str:
    """How logs and traces name a criterion: ``groups has engineering``, ``email is
    a@example.com``, ``time_of_day after 22:00 before 06:00 Europe/Berlin``. Network
    lists and certificate hashes are left out (``source_ip``)."""
    name = f"claim/{criterion.sub}" if criterion.name == "claim" else criterion.name
    operand = criterion.operand
    if isinstance(operand, Strings):
        return f"{name} {describe_strings(operand)}"
    if isinstance(operand, Has):
        return f"{name} has {operand.value}"
    if isinstance(operand, ClaimName):
        return f"{name} {operand.name}"
    if isinstance(operand, Certificate):
        keys = [k for k, v in (("fingerprint", operand.fingerprints),
                               ("spki_hash", operand.spki_hashes),
                               ("san_email", operand.san_email), ("san_dns", operand.san_dns),
                               ("san_uri", operand.san_uri)) if v]
        return f"{name} {', '.join(keys)}" if keys else name
    if isinstance(operand, DateRange):
        bounds = [f"{k} {instant_text(v)}" for k, v in (("after", operand.after),
                                                        ("before", operand.before))
                  if v is not None]
        return f"{name} {' '.join(bounds)}"
    if isinstance(operand, TimeWindow):
        bounds = [f"{k} {clock_text(v)}" for k, v in (("after", operand.after),
                                                      ("before", operand.before))
                  if v is not None]
        zone = f" {operand.timezone}" if operand.timezone != UTC else ""
        return f"{name} {' '.join(bounds)}{zone}"
    if isinstance(operand, Weekdays):
        zone = f" {operand.timezone}" if operand.timezone != UTC else ""
        return f"{name} {days_text(operand.days)}{zone}"
    if isinstance(operand, Networks | Flag):
        return name
    raise AssertionError(f"no description for {operand!r}")
