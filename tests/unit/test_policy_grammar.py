"""The ``policy`` field's grammar: what parses into which tree, and every kind of mistake
named at its exact key path, through the configuration loader (``gateway check`` and a
reload) as well as on its own."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import yaml
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import load_snapshot
from gateway.config.errors import Problems
from gateway.config.running import ConfigSource
from gateway.policy import parse_document
from gateway.policy.nodes import (
    Criterion,
    Document,
    Flag,
    Has,
    Networks,
    Operator,
    Rule,
    StringMatch,
    Strings,
)

from .config.helpers import IDENTITY, base_config, errors_of, load, write

ROUTE = {"from": "https://wiki.example.com", "to": "http://127.0.0.1:8080"}


def parse(text: str) -> tuple[Document | None, list[str]]:
    problems = Problems()
    document = parse_document(yaml.safe_load(text), "policy", problems)
    return document, [str(p) for p in problems.errors]


def errors(text: str) -> list[str]:
    document, found = parse(text)
    assert document is None, "expected problems"
    return found


def route_errors(policy: Any, **route: Any) -> list[str]:
    return errors_of(base_config(policy=[dict(ROUTE, policy=policy, **route)], **IDENTITY))


class ShapeTests(SynchronousTestCase):
    def test_one_rule_or_a_list(self) -> None:
        """A document is one rule object or a list of them; both read the same."""
        one, _ = parse("allow: {or: [{accept: true}]}")
        listed, _ = parse("- allow: {or: [{accept: true}]}")
        self.assertEqual(one, listed)
        assert one is not None
        self.assertEqual(one.rules, (Rule("allow", (Operator("or", (
            Criterion("accept", Flag()),)),)),))

    def test_allow_and_deny_in_one_object(self) -> None:
        """PPL lets one object hold both actions, in their order."""
        document, _ = parse("allow: {or: [{accept: true}]}\ndeny: {or: [{reject: true}]}")
        assert document is not None
        self.assertEqual([r.action for r in document.rules], ["allow", "deny"])

    def test_several_operators_in_one_body(self) -> None:
        """They are kept as alternatives of one rule, in order."""
        document, _ = parse("allow: {and: [{email: a@x.test}], or: [{domain: y.test}]}")
        assert document is not None
        self.assertEqual([o.op for o in document.rules[0].body], ["and", "or"])

    def test_nested_operator_entry(self) -> None:
        """Our extension: an operator object as an entry of another operator's list."""
        document, _ = parse("allow: {and: [{or: [{groups: a}, {groups: b}]}, "
                            "{http_method: GET}]}")
        assert document is not None
        inner = document.rules[0].body[0].entries[0]
        self.assertEqual(inner, Operator("or", (Criterion("groups", Has("a")),
                                                Criterion("groups", Has("b")))))

    def test_operand_forms(self) -> None:
        """Bare scalars are ``is`` (strings) or ``has`` (lists); e-mail folds case;
        numbers and booleans compare as the strings claims flatten to."""
        document, _ = parse("""
allow:
  or:
    - email: Boss@Example.com
    - http_method: {in: [get, head]}
    - claim/level: 2.0
    - claim/admin: true
    - source_ip: 10.1.0.0/16
""")
        assert document is not None
        entries = document.rules[0].body[0].entries
        self.assertEqual([e.operand for e in entries if isinstance(e, Criterion)], [
            Strings((StringMatch("is", ("boss@example.com",)),)),
            Strings((StringMatch("in", ("GET", "HEAD")),)),
            Has("2"), Has("true"), Networks(("10.1.0.0/16",))])
        self.assertEqual([e.sub for e in entries if isinstance(e, Criterion)],
                         ["", "", "level", "admin", ""])

    def test_claim_names_keep_their_slashes(self) -> None:
        """A namespaced claim (``https://example.com/roles``) is the part after the first
        slash, whole."""
        document, _ = parse("allow: {or: [{claim/https://example.com/roles: admin}]}")
        assert document is not None
        criterion = document.rules[0].body[0].entries[0]
        assert isinstance(criterion, Criterion)
        self.assertEqual(criterion.sub, "https://example.com/roles")


class ErrorPathTests(SynchronousTestCase):
    """Every class of mistake, with the key path that names it."""

    def test_unknown_criterion(self) -> None:
        self.assertEqual(errors("- allow: {or: [{grups: {has: x}}]}"), [
            "policy[0].allow.or[0].grups: unknown criterion; did you mean 'groups'?"])

    def test_unknown_operator(self) -> None:
        self.assertEqual(errors("allow: {xor: [{accept: true}]}"), [
            "policy.allow.xor: unknown operator; use and, or, not or nor; did you mean "
            "'or'?"])

    def test_criterion_directly_in_a_body(self) -> None:
        self.assertIn("policy.allow.email: email is a criterion: put it in a list under an "
                      "operator", errors("allow: {email: a@b.test}")[0])

    def test_unknown_action(self) -> None:
        self.assertEqual(errors("- permit: {or: [{accept: true}]}"), [
            "policy[0].permit: unknown action; a rule is allow or deny"])

    def test_unknown_matcher(self) -> None:
        self.assertEqual(errors("allow: {or: [{email: {equals: a@b.test}}]}"), [
            "policy.allow.or[0].email.equals: unknown string matcher; use one of is, "
            "starts_with, ends_with, contains, in, not_in"])
        self.assertEqual(errors("allow: {or: [{groups: {in: [a]}}]}"), [
            "policy.allow.or[0].groups.in: a list matcher takes exactly one operator, has"])
        # issue 42's example wrote claim/repository: {is: example/app}: say what works
        self.assertEqual(errors("allow: {or: [{claim/repository: {is: example/app}}]}"), [
            "policy.allow.or[0].claim/repository.is: a list matcher takes exactly one "
            "operator, has: a list may hold several values, so {is: V} is {has: V} (or the "
            "bare value)"])

    def test_bare_lists_are_refused(self) -> None:
        """PPL compares a bare list whole (never matching); ``in:`` is what was meant."""
        self.assertIn("write in: [\"GET\", \"HEAD\"]",
                      errors("allow: {or: [{http_method: [GET, HEAD]}]}")[0])
        self.assertIn("policy.allow.or[0].groups: has takes one value",
                      errors("allow: {or: [{groups: [a, b]}]}")[0])

    def test_bad_cidr(self) -> None:
        self.assertEqual(errors("""
- allow: {or: [{accept: true}]}
- deny:
    or:
      - http_method: {in: [DELETE]}
      - authenticated_user: true
      - source_ip: "10.0.0.0/33"
"""), ['policy[1].deny.or[2].source_ip: not a CIDR: "10.0.0.0/33"'])
        self.assertEqual(errors("deny: {or: [{source_ip: [10.0.0.0/8, nonsense]}]}"), [
            'policy.deny.or[0].source_ip[1]: not a CIDR: "nonsense"'])
        self.assertIn("has host bits set; the network is 10.0.0.0/8",
                      errors("deny: {or: [{source_ip: 10.0.0.1/8}]}")[0])

    def test_bad_time_zone(self) -> None:
        self.assertEqual(errors(
            "allow: {and: [{time_of_day: {after: '9:00', timezone: Mars/Olympus}}]}"), [
            'policy.allow.and[0].time_of_day.timezone: unknown time zone "Mars/Olympus": '
            "use an IANA name such as Europe/Berlin, America/New_York or UTC"])
        self.assertIn("policy.allow.and[0].day_of_week.timezone: unknown time zone",
                      errors("allow: {and: [{day_of_week: {days: mon, timezone: '../etc'}}]}"
                             )[0])

    def test_bad_dates(self) -> None:
        self.assertEqual(errors("allow: {and: [{date: {after: yesterday}}]}"), [
            'policy.allow.and[0].date.after: not an RFC 3339 date: "yesterday" (write it as '
            "2026-01-31T18:00:00Z or 2026-01-31)"])
        self.assertIn("after must be earlier than before", errors(
            "allow: {and: [{date: {after: 2026-02-01, before: 2026-01-01}}]}")[0])
        self.assertIn("policy.allow.and[0].date.since: unknown key; use after, before",
                      errors("allow: {and: [{date: {since: 2026-01-01}}]}")[0])

    def test_bad_times(self) -> None:
        self.assertIn("policy.allow.and[0].time_of_day.after: not a time of day: \"25:00\"",
                      errors("allow: {and: [{time_of_day: {after: '25:00'}}]}")[0])
        self.assertIn("1320 is a number: YAML reads an unquoted time such as 22:00 as one",
                      errors("allow: {and: [{time_of_day: {after: 22:00}}]}")[0])
        self.assertIn("the window is empty", errors(
            "allow: {and: [{time_of_day: {after: '9:00', before: '09:00:00'}}]}")[0])
        self.assertIn("before midnight, with no after: the window is empty",
                      errors("allow: {and: [{time_of_day: {before: '12 AM'}}]}")[0])
        self.assertIn("give after, before or both",
                      errors("allow: {and: [{time_of_day: {timezone: UTC}}]}")[0])

    def test_bad_days(self) -> None:
        self.assertIn('policy.allow.and[0].day_of_week: not a day-of-week list: "mon-fry"',
                      errors("allow: {and: [{day_of_week: mon-fry}]}")[0])

    def test_empty_blocks(self) -> None:
        self.assertEqual(errors("[]"), ["policy: empty policy: give at least one allow or "
                                        "deny rule, or leave the key out"])
        self.assertIn("policy.allow: empty rule", errors("allow: {}")[0])
        self.assertIn("policy.allow: empty rule", errors("allow:")[0])
        self.assertEqual(errors("allow: {or: []}"), [
            "policy.allow.or: empty list: give at least one criterion"])
        self.assertEqual(errors("allow: {or: [{and: []}]}"), [
            "policy.allow.or[0].and: empty list: give at least one criterion"])
        self.assertIn("policy[0]: expected a rule", errors("- {}")[0])
        self.assertEqual(errors("allow: {or: [{email: {in: []}}]}"), [
            "policy.allow.or[0].email.in: empty list"])
        self.assertIn("policy.allow.or[0].email: empty string matcher",
                      errors("allow: {or: [{email: {}}]}")[0])

    def test_entry_shapes(self) -> None:
        self.assertIn("policy.allow.or[0]: expected one criterion ({name: value}); an "
                      "object with several keys",
                      errors("allow: {or: [{email: a@b.test, domain: b.test}]}")[0])
        self.assertIn("policy.allow.or[1]: expected one criterion",
                      errors("allow: {or: [{accept: true}, accept]}")[0])
        self.assertIn("policy.allow.or: expected a list of criteria",
                      errors("allow: {or: {accept: true}}")[0])

    def test_sub_paths(self) -> None:
        self.assertIn("policy.allow.or[0].claim: claim needs a name after a slash",
                      errors("allow: {or: [{claim: x}]}")[0])
        self.assertIn("policy.allow.or[0].email/x: email takes no /sub-path",
                      errors("allow: {or: [{email/x: y}]}")[0])

    def test_flags_take_true(self) -> None:
        """``authenticated_user: false`` would let every signed-in user in under PPL's
        "the value is ignored"; it is refused instead."""
        self.assertIn("policy.allow.or[0].authenticated_user: takes true, got false",
                      errors("allow: {or: [{authenticated_user: false}]}")[0])
        self.assertEqual(parse("allow: {or: [{accept: }]}")[1], [])

    def test_certificate_matcher(self) -> None:
        self.assertIn("client_certificate.fingerprint: not a SHA-256 certificate fingerprint",
                      errors("allow: {or: [{client_certificate: {fingerprint: abc}}]}")[0])
        self.assertIn("client_certificate.spki_hash[1]: not an SPKI hash", errors(
            "allow: {or: [{client_certificate: {spki_hash: ["
            "'FsDbM0rUYIiL3V339eIKqiz6HPSB+Pz2WeAWhqlqh8U=', 'bm90IDMyIGJ5dGVz']}}]}")[0])
        self.assertIn("client_certificate.issuer: unknown certificate matcher key",
                      errors("allow: {or: [{client_certificate: {issuer: x}}]}")[0])
        self.assertIn("client_certificate: expected true", errors(
            "allow: {or: [{client_certificate: false}]}")[0])
        lower_long = ":".join(["ab"] * 32)
        self.assertIn("not a SHA-256 certificate fingerprint", errors(
            f"allow: {{or: [{{client_certificate: {{fingerprint: '{lower_long}'}}}}]}}")[0])

    def test_every_problem_is_reported(self) -> None:
        """All mistakes of a document at once, not the first only."""
        found = errors("""
- allow: {or: [{grups: a}, {email: {equals: b}}]}
- deny: {xor: []}
""")
        self.assertEqual(len(found), 3)

    def test_deep_nesting_is_bounded(self) -> None:
        text = "allow: " + "{or: [" * 20 + "{accept: true}" + "]}" * 20
        self.assertIn("operators nested more than 16 deep", errors(text)[0])


class ConfigTests(SynchronousTestCase):
    """The field on a route: parsed with it, compiled into ``route.policy``."""

    def test_route_prefix(self) -> None:
        """Problems carry the route's path in front: ``policy[0].policy[1]...``."""
        self.assertEqual(route_errors([{"allow": {"or": [{"accept": True}]}},
                                       {"deny": {"or": [{"source_ip": "10.0.0.0/33"}]}}]),
                         ['policy[0].policy[1].deny.or[0].source_ip: not a CIDR: '
                          '"10.0.0.0/33"'])

    def test_valid_policy_is_compiled(self) -> None:
        snapshot = load(base_config(policy=[dict(ROUTE, policy={
            "allow": {"or": [{"groups": {"has": "eng"}}]},
            "deny": {"or": [{"http_method": {"in": ["DELETE"]}}]}})], **IDENTITY))
        route = snapshot.routes[0]
        self.assertIsNotNone(route.policy_document)
        self.assertEqual(repr(route.policy), "Policy(1 allow, 1 deny)")
        self.assertEqual(route.policy.reads, frozenset({"method"}))

    def test_public_route_with_policy(self) -> None:
        found = route_errors({"allow": {"or": [{"accept": True}]}},
                             allow_public_unauthenticated_access=True)
        self.assertEqual(len(found), 1)
        self.assertIn("policy[0]: allow_public_unauthenticated_access and policy are both set",
                      found[0])

    def test_allow_fields_beside_a_policy(self) -> None:
        """They stay: each one more allow rule, under the policy's deny rules."""
        snapshot = load(base_config(policy=[dict(ROUTE, allowed_users=["a@x.test"],
                                                 allow_any_authenticated_user=False, policy={
            "deny": {"or": [{"http_method": "DELETE"}]}})], **IDENTITY))
        policy = snapshot.routes[0].policy
        self.assertEqual(repr(policy), "Policy(1 allow, 1 deny)")
        self.assertEqual(snapshot.warnings, ())

    def test_deny_only_policy_warns(self) -> None:
        snapshot = load(base_config(policy=[dict(ROUTE, policy={
            "deny": {"or": [{"http_method": "DELETE"}]}})], **IDENTITY))
        self.assertIn("policy[0].policy: has no allow rule and the route no allow field",
                      str(snapshot.warnings[0]))

    def test_groups_without_service_account_warns(self) -> None:
        snapshot = load(base_config(policy=[dict(ROUTE, policy={
            "allow": {"or": [{"or": [{"groups": "eng"}]}]}})], **IDENTITY))
        self.assertEqual([str(w) for w in snapshot.warnings], [
            "idp_service_account: unset, but the groups criterion is used by "
            "policy[0].policy: it never matches without it"])

    def test_routes_without_policy_compile_their_allow_fields(self) -> None:
        snapshot = load(base_config(policy=[dict(ROUTE, allowed_domains=["x.test"])],
                                    **IDENTITY))
        route = snapshot.routes[0]
        self.assertIsNone(route.policy_document)
        self.assertEqual(repr(route.policy), "Policy(1 allow, 0 deny)")

    def test_reload_keeps_running_config(self) -> None:
        """A bad policy in an edit is logged with its key path; the snapshot stays."""
        directory = tempfile.mkdtemp()
        good = base_config(policy=[dict(ROUTE, policy={"allow": {"or": [{"accept": True}]}})],
                           **IDENTITY)
        path = write(directory, "config.yaml", yaml.safe_dump(good))
        clock = Clock()
        clock.advance(1000)
        source = ConfigSource(path, load_snapshot(path, {}), clock, environ={},
                              poll_interval=1.0)
        source.startService()
        self.addCleanup(source.stopService)
        before = source.current
        bad = base_config(policy=[dict(ROUTE, policy={"allow": {"or": [
            {"time_of_day": {"after": "9:00", "timezone": "Nowhere/Land"}}]}})], **IDENTITY)
        write(directory, "config.yaml", yaml.safe_dump(bad))
        stat = os.stat(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        with capturedLogs() as events:
            clock.advance(1)
        self.assertIs(source.current, before)
        logged = [e for e in events if e.get("errors")]
        self.assertEqual(logged[0]["errors"], [
            'policy[0].policy.allow.or[0].time_of_day.timezone: unknown time zone '
            '"Nowhere/Land": use an IANA name such as Europe/Berlin, America/New_York or UTC'])
