"""Each criterion compiled to a plain function of ``Facts`` -> bool.

Operands are turned into what a test needs once (sets, prefix tuples, network groups, a
zone's offset), so evaluating a criterion is a few attribute reads and a comparison.
Identity criteria never match a request that is not signed in, and an empty e-mail,
domain or user id matches nothing, whatever the matcher (``not_in`` included).

The MCP criteria match nothing but a JSON-RPC message of an MCP route (``Facts.mcp_method``
is ``None`` for every other request). ``mcp_method`` matches its method. ``mcp_tool``
matches the tool a ``tools/call`` names; for any other method it is false, except for
the housekeeping every session needs (``facts.is_housekeeping``: ``initialize``, ``ping``,
notifications, the lists, ...), which it lets past: there it takes the value that
leaves the rule to its other criteria, true where it stands for "may" (in an ``allow``
rule, or under one ``not``/``nor`` of a ``deny`` rule) and false where it stands for
"may not" (in a ``deny`` rule, or under one ``not``/``nor`` of an ``allow`` rule).
So ``allow: {and: [{groups: {has: support}}, {mcp_tool: {in: [a, b]}}]}`` lets a
support person connect, list and call exactly ``a`` and ``b``, and ``deny: {mcp_tool:
{in: [drop_db]}}`` refuses that tool alone, as it does in Pomerium, where ``mcp_tool``
is false for everything but ``tools/call``. ``compile`` says which value
(``housekeeping``) each occurrence takes.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Callable

from gateway.policy.facts import CertFacts, Facts
from gateway.policy.network import network_test
from gateway.policy.nodes import (
    Certificate,
    ClaimName,
    Criterion,
    DateRange,
    Has,
    Networks,
    Strings,
    TimeWindow,
    Weekdays,
)

Predicate = Callable[[Facts], bool]
# zones whose offset is always 0: a time of day there needs no zone lookup
UTC_ZONES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Zulu", "Etc/Zulu"})
StringTest = Callable[[str], bool]
DAY = 86400.0


def string_test(matcher: Strings) -> StringTest:
    """All of the matcher's operators, as one test of a string."""
    tests = [_one(m.op, m.values) for m in matcher.matches]
    if len(tests) == 1:
        return tests[0]

    def every(value: str) -> bool:
        for test in tests:  # noqa: SIM110 - all() would make a generator per call
            if not test(value):
                return False
        return True

    return every


def _one(op: str, values: tuple[str, ...]) -> StringTest:
    value = values[0]
    if op == "is":
        return value.__eq__
    if op == "in":
        return frozenset(values).__contains__
    if op == "not_in":
        excluded = frozenset(values)
        return lambda text: text not in excluded
    if op == "starts_with":
        return lambda text: text.startswith(value)
    if op == "ends_with":
        return lambda text: text.endswith(value)
    if op == "contains":
        return lambda text: value in text
    raise AssertionError(f"unknown string matcher {op}")


class ZoneClock:
    """A zone's UTC offset at an instant, looked up once a minute: every transition of
    the time zone database since 1970 falls on a whole minute, so within one minute the
    offset is one. (The minute and its offset are one tuple, replaced whole: a reader in
    another thread never pairs a minute with another minute's offset.)"""

    __slots__ = ("cached", "zone")

    def __init__(self, name: str) -> None:
        self.zone = zoneinfo.ZoneInfo(name)
        self.cached = (-1, 0.0)

    def local(self, now: float) -> float:
        """Local wall-clock seconds since the epoch at ``now``."""
        minute = int(now // 60)
        cached = self.cached
        if cached[0] == minute:
            return now + cached[1]
        offset = dt.datetime.fromtimestamp(now, self.zone).utcoffset()
        seconds = offset.total_seconds() if offset is not None else 0.0
        self.cached = (minute, seconds)
        return now + seconds


_CLOCKS: dict[str, ZoneClock] = {}


def zone_clock(name: str) -> ZoneClock:
    clock = _CLOCKS.get(name)
    if clock is None:
        clock = _CLOCKS[name] = ZoneClock(name)
    return clock


def weekday(local: float) -> int:
    """Monday 0 .. Sunday 6 of local epoch seconds (1970-01-01 was a Thursday)."""
    return int((local // DAY + 3) % 7)


def predicate(criterion: Criterion, housekeeping: bool = True) -> Predicate:
    """The test of one criterion. ``housekeeping``: the value ``mcp_tool`` takes for an
    MCP message every session needs (the module's docstring says why it varies)."""
    name, operand = criterion.name, criterion.operand
    if name == "accept":
        return lambda f: True
    if name == "reject":
        return lambda f: False
    if name == "authenticated_user":
        return lambda f: f.authenticated
    if name == "cors_preflight":
        return lambda f: f.cors_preflight
    if name == "gateway_routes":
        return lambda f: f.internal
    if isinstance(operand, Strings):
        if name == "mcp_tool":
            return mcp_tool_test(string_test(operand), housekeeping)
        return _strings(name, operand)
    if isinstance(operand, Has):
        return _has(name, criterion.sub, operand.value)
    if isinstance(operand, Networks):
        test = network_test(operand)
        return lambda f: test(f.client_ip)
    if isinstance(operand, Certificate):
        return _certificate(operand)
    if isinstance(operand, DateRange | TimeWindow | Weekdays):
        return _clock(operand)
    if name == "ssh_username_matches_email":
        return lambda f: (f.authenticated and f.ssh_username is not None and f.email != ""
                          and f.ssh_username == f.email.partition("@")[0])
    if isinstance(operand, ClaimName):
        claim = operand.name
        return lambda f: (f.authenticated and f.ssh_username is not None
                          and f.ssh_username in f.claims.get(claim, ()))
    raise AssertionError(f"no predicate for {criterion!r}")


def _strings(name: str, matcher: Strings) -> Predicate:
    members = lone_members(matcher)
    if members is not None:  # is / in: one set lookup, no call
        if name == "user":
            return lambda f: f.authenticated and f.user_id in members
        if name == "email":
            return lambda f: f.authenticated and f.email in members
        if name == "domain":
            return lambda f: f.authenticated and f.domain in members
        if name == "provider":
            return lambda f: f.authenticated and f.provider in members
        if name == "http_method":
            return lambda f: f.method in members
        if name == "mcp_method":
            return lambda f: f.mcp_method in members
    lone = _lone_affix(name, matcher)
    if lone is not None:
        return lone
    test = string_test(matcher)
    if name == "user":
        return lambda f: f.authenticated and f.user_id != "" and test(f.user_id)
    if name == "email":
        return lambda f: f.authenticated and f.email != "" and test(f.email)
    if name == "domain":
        return lambda f: f.authenticated and f.domain != "" and test(f.domain)
    if name == "provider":
        return lambda f: f.authenticated and f.provider != "" and test(f.provider)
    if name == "http_method":
        return lambda f: test(f.method)
    if name == "http_path":
        return lambda f: test(f.path)
    if name == "ssh_username":
        return lambda f: f.ssh_username is not None and test(f.ssh_username)
    if name == "mcp_method":
        return lambda f: f.mcp_method is not None and test(f.mcp_method)
    raise AssertionError(f"{name} takes no string matcher")


def mcp_tool_test(test: StringTest, housekeeping: bool) -> Predicate:
    """``mcp_tool``: ``test`` on a ``tools/call``'s tool; ``housekeeping`` for the
    methods every MCP session needs; false for every other method and request."""
    if housekeeping:
        return lambda f: test(f.mcp_tool) if f.mcp_tool is not None else f.mcp_housekeeping
    return lambda f: f.mcp_tool is not None and test(f.mcp_tool)


def _lone_affix(name: str, matcher: Strings) -> Predicate | None:
    """The commonest string criteria besides ``is``/``in`` (a path prefix, an e-mail
    suffix) as one function each, with no string test to call."""
    if len(matcher.matches) != 1:
        return None
    op, value = matcher.matches[0].op, matcher.matches[0].values[0]
    if name == "http_path" and op == "starts_with":
        return lambda f: f.path.startswith(value)
    if name == "email" and op == "ends_with":
        return lambda f: f.authenticated and f.email != "" and f.email.endswith(value)
    return None


def lone_members(matcher: Strings) -> frozenset[str] | None:
    """The values of a lone ``is`` or ``in``, without the empty string (which no
    identity and no method is)."""
    if len(matcher.matches) != 1 or matcher.matches[0].op not in ("is", "in"):
        return None
    return frozenset(matcher.matches[0].values) - {""}


def _has(name: str, sub: str, value: str) -> Predicate:
    if name == "groups":
        return lambda f: f.authenticated and f.groups_available and value in f.groups
    return lambda f: f.authenticated and value in f.claims.get(sub, ())


def _certificate(matcher: Certificate) -> Predicate:
    tests: list[Callable[[CertFacts], bool]] = []
    if matcher.fingerprints:
        fingerprints = frozenset(matcher.fingerprints)
        tests.append(lambda c: c.fingerprint in fingerprints)
    if matcher.spki_hashes:
        hashes = frozenset(matcher.spki_hashes)
        tests.append(lambda c: c.spki_hash in hashes)
    for names, strings in ((lambda c: c.san_email, matcher.san_email),
                           (lambda c: c.san_dns, matcher.san_dns),
                           (lambda c: c.san_uri, matcher.san_uri)):
        if strings is not None:
            tests.append(_any_name(names, string_test(strings)))

    def presented(f: Facts) -> bool:
        cert = f.client_cert
        if cert is None:
            return False
        for test in tests:  # noqa: SIM110 - all() would make a generator per call
            if not test(cert):
                return False
        return True

    return presented


def _any_name(names: Callable[[CertFacts], tuple[str, ...]],
              test: StringTest) -> Callable[[CertFacts], bool]:
    return lambda c: any(test(name) for name in names(c))


def _clock(operand: DateRange | TimeWindow | Weekdays) -> Predicate:
    if isinstance(operand, DateRange):
        after = operand.after if operand.after is not None else float("-inf")
        before = operand.before if operand.before is not None else float("inf")
        return lambda f: after <= f.now < before
    clock = zone_clock(operand.timezone)
    if isinstance(operand, Weekdays):
        days = operand.days
        return lambda f: weekday(clock.local(f.now)) in days
    start = operand.after if operand.after is not None else 0.0
    end = operand.before if operand.before is not None else DAY
    within = start < end or operand.after is None or operand.before is None
    if operand.timezone in UTC_ZONES:
        if within:
            return lambda f: start <= f.now % DAY < end
        return lambda f: not end <= f.now % DAY < start
    if within:
        return lambda f: start <= clock.local(f.now) % DAY < end
    return lambda f: not end <= clock.local(f.now) % DAY < start
