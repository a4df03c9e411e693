"""Operators, rules and what a verdict says: PPL's exact ``not`` (none matches) and ``nor``
(not all match), alternatives within a body, nesting, deny over allow, the deciding
path and criterion, the kind shown to the person, the trace and the facts read."""

from __future__ import annotations

import itertools
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.policy import Facts, Policy, parse_document

# Two independent criteria A (the path starts with /a) and B (the method is POST).
A, B = "{http_path: {starts_with: /a}}", "{http_method: POST}"


def compiled(text: str) -> Policy:
    problems = Problems()
    document = parse_document(yaml.safe_load(text), "policy", problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document)


def facts(a: bool, b: bool) -> Facts:
    return Facts(path="/a" if a else "/b", method="POST" if b else "GET")


USER: dict[str, Any] = {"authenticated": True, "user_id": "u-1", "email": "ada@example.com",
                        "groups": ("engineering",), "groups_available": True,
                        "client_ip": "203.0.113.7"}


def user(**changes: Any) -> Facts:
    """Ada, signed in, in engineering, from 203.0.113.7; as changed."""
    return Facts(**{**USER, **changes})


class OperatorTests(SynchronousTestCase):
    def truth(self, op: str) -> dict[tuple[bool, bool], bool]:
        policy = compiled(f"allow: {{{op}: [{A}, {B}]}}")
        return {(a, b): policy.evaluate(facts(a, b)).allowed
                for a, b in itertools.product((False, True), repeat=2)}

    def test_and(self) -> None:
        self.assertEqual(self.truth("and"), {(False, False): False, (False, True): False,
                                             (True, False): False, (True, True): True})

    def test_or(self) -> None:
        self.assertEqual(self.truth("or"), {(False, False): False, (False, True): True,
                                            (True, False): True, (True, True): True})

    def test_not_means_none_matches(self) -> None:
        """PPL's ``not``: (not A) and (not B), traditionally NOR."""
        self.assertEqual(self.truth("not"), {(False, False): True, (False, True): False,
                                             (True, False): False, (True, True): False})

    def test_nor_means_not_all_match(self) -> None:
        """PPL's ``nor``: (not A) or (not B), traditionally NAND."""
        self.assertEqual(self.truth("nor"), {(False, False): True, (False, True): True,
                                             (True, False): True, (True, True): False})

    def test_single_entry(self) -> None:
        for op, expected in (("and", (False, True)), ("or", (False, True)),
                             ("not", (True, False)), ("nor", (True, False))):
            policy = compiled(f"allow: {{{op}: [{A}]}}")
            self.assertEqual((policy.evaluate(facts(False, False)).allowed,
                              policy.evaluate(facts(True, False)).allowed), expected, op)

    def test_operators_of_one_body_are_alternatives(self) -> None:
        """``{and: [A], or: [B, C]}`` is A or B or C (the PPL documentation's example)."""
        policy = compiled("allow: {and: [{claim/family_name: Smith}], or: [{domain: d1.test}, "
                          "{domain: d2.test}]}")
        smith = Facts(authenticated=True, user_id="u", claims={"family_name": ("Smith",)})
        self.assertTrue(policy.evaluate(smith).allowed)
        self.assertTrue(policy.evaluate(Facts(authenticated=True, user_id="u",
                                              email="x@d2.test")).allowed)
        self.assertFalse(policy.evaluate(Facts(authenticated=True, user_id="u",
                                               email="x@d3.test")).allowed)
        split = compiled("- allow: {and: [{claim/family_name: Smith}]}\n"
                         "- allow: {or: [{domain: d1.test}, {domain: d2.test}]}")
        for email in ("x@d1.test", "x@d2.test", "x@d3.test"):
            one = Facts(authenticated=True, user_id="u", email=email)
            self.assertEqual(policy.evaluate(one).allowed, split.evaluate(one).allowed)

    def test_nesting(self) -> None:
        """(A or B) and not-all(A, B): exactly one of them."""
        policy = compiled(f"allow: {{and: [{{or: [{A}, {B}]}}, {{nor: [{A}, {B}]}}]}}")
        self.assertEqual([policy.evaluate(facts(a, b)).allowed
                          for a, b in itertools.product((False, True), repeat=2)],
                         [False, True, True, False])
        deep = compiled(f"allow: {{not: [{{not: [{{or: [{{and: [{A}, {B}]}}]}}]}}]}}")
        self.assertEqual([deep.evaluate(facts(a, b)).allowed
                          for a, b in itertools.product((False, True), repeat=2)],
                         [False, False, False, True])


class RuleTests(SynchronousTestCase):
    def test_deny_wins_over_allow(self) -> None:
        policy = compiled(f"- allow: {{or: [{A}]}}\n- deny: {{or: [{B}]}}")
        self.assertTrue(policy.evaluate(facts(True, False)).allowed)
        self.assertFalse(policy.evaluate(facts(True, True)).allowed)
        self.assertFalse(policy.evaluate(facts(False, False)).allowed)

    def test_access_needs_an_allow(self) -> None:
        policy = compiled(f"deny: {{or: [{B}]}}")
        verdict = policy.evaluate(facts(False, False))
        self.assertFalse(verdict.allowed)
        self.assertEqual(str(verdict), "allow: no allow rule")

    def test_any_allow_rule(self) -> None:
        policy = compiled(f"- allow: {{or: [{A}]}}\n- allow: {{or: [{B}]}}")
        self.assertEqual([policy.evaluate(facts(a, b)).allowed
                          for a, b in itertools.product((False, True), repeat=2)],
                         [False, True, True, True])


ISSUE = """
- allow:
    or:
      - email: {is: ceo@example.com}
      - groups: {has: engineering}
- deny:
    or:
      - http_method: {in: [DELETE, PUT]}
      - source_ip: [203.0.113.0/24]
      - time_of_day: {after: "22:00", before: "06:00", timezone: Europe/Berlin}
"""
NOON = 1767268800.0  # 2026-01-01T12:00:00Z, 13:00 in Berlin


class VerdictTests(SynchronousTestCase):
    def test_the_deciding_rule_and_criterion(self) -> None:
        policy = compiled(ISSUE)
        allowed = policy.evaluate(user(client_ip="10.0.0.1", now=NOON))
        self.assertEqual(str(allowed), "allow[0].or[1] groups has engineering: matched")
        self.assertEqual((allowed.allowed, allowed.code), (True, "policy-allow-matched"))
        denied = policy.evaluate(user(now=NOON))
        self.assertEqual(str(denied), "deny[0].or[1] source_ip: matched")
        self.assertEqual((denied.allowed, denied.kind, denied.code),
                         (False, "network", "policy-deny-matched"))
        self.assertEqual(denied.text, "your network is not allowed on this route")

    def test_verdicts_of_matches_are_made_once(self) -> None:
        """An allowed request returns a verdict made at compile time: no allocation."""
        policy = compiled(ISSUE)
        one = user(client_ip="10.0.0.1", now=NOON)
        self.assertIs(policy.evaluate(one), policy.evaluate(one))

    def test_kind_of_a_refusal(self) -> None:
        """Words for the condition, never the policy's values."""
        hours = compiled("allow: {and: [{groups: engineering}, {time_of_day: "
                         "{after: '9:00', before: '17:00'}}]}")
        night = hours.evaluate(user(now=NOON + 10 * 3600))
        self.assertEqual(str(night), "allow[0].and[1] time_of_day after 09:00 before 17:00: "
                                     "not matched")
        self.assertEqual((night.kind, night.code), ("outside-hours", "policy-no-allow-matched"))
        self.assertEqual(night.text, "this route is closed at this time of day")
        self.assertNotIn("17", night.text)
        group = compiled("allow: {or: [{groups: admins}, {groups: ops}]}").evaluate(
            user())
        self.assertEqual((str(group), group.kind), ("allow[0].or: none matched", "group"))
        who = compiled("allow: {or: [{groups: admins}, {email: boss@example.com}]}").evaluate(
            user())
        self.assertEqual(who.kind, "user")
        mixed = compiled("allow: {or: [{groups: admins}, {http_method: POST}]}").evaluate(
            user())
        self.assertEqual(mixed.kind, "policy")
        method = compiled("allow: {and: [{groups: engineering}, {http_method: POST}]}")
        self.assertEqual(method.evaluate(user()).kind, "method")

    def test_not_and_nor_verdicts(self) -> None:
        outside = compiled("allow: {not: [{source_ip: 203.0.113.0/24}, {http_method: PUT}]}")
        self.assertEqual(str(outside.evaluate(Facts(client_ip="10.0.0.1"))),
                         "allow[0].not: none matched")
        refused = outside.evaluate(Facts(client_ip="203.0.113.1"))
        self.assertEqual((str(refused), refused.kind),
                         ("allow[0].not[0] source_ip: matched", "network"))
        nand = compiled(f"allow: {{nor: [{A}, {B}]}}")
        self.assertEqual(str(nand.evaluate(facts(True, False))),
                         "allow[0].nor[1] http_method is POST: not matched")
        self.assertEqual(str(nand.evaluate(facts(True, True))), "allow[0].nor: all matched")

    def test_several_allow_rules_refused(self) -> None:
        policy = compiled("- allow: {or: [{groups: a}]}\n- allow: {or: [{groups: b}]}")
        verdict = policy.evaluate(user())
        self.assertEqual((str(verdict), verdict.kind), ("allow: none matched", "group"))

    def test_nested_paths(self) -> None:
        policy = compiled("deny: {or: [{and: [{http_method: DELETE}, {http_path: "
                          "{starts_with: /admin}}]}]}\nallow: {or: [{accept: true}]}")
        verdict = policy.evaluate(Facts(method="DELETE", path="/admin/x"))
        self.assertEqual(str(verdict), "deny[0].or[0].and: all matched")


class TraceTests(SynchronousTestCase):
    def test_every_rule_hit_miss_or_not_evaluated(self) -> None:
        policy = compiled(ISSUE)
        trace = policy.explain(user(email="ceo@example.com", method="PUT", now=NOON))
        self.assertEqual(trace.lines(), [
            "denied: deny[0].or[0] http_method in [DELETE, PUT]: matched",
            "  allow[0]: hit",
            "    allow[0].or: hit",
            "      allow[0].or[0] email is ceo@example.com: hit",
            "      allow[0].or[1] groups has engineering: not evaluated",
            "  deny[0]: hit",
            "    deny[0].or: hit",
            "      deny[0].or[0] http_method in [DELETE, PUT]: hit",
            "      deny[0].or[1] source_ip: not evaluated",
            "      deny[0].or[2] time_of_day after 22:00 before 06:00 Europe/Berlin: "
            "not evaluated",
        ])
        self.assertEqual(trace.verdict, policy.evaluate(
            user(email="ceo@example.com", method="PUT", now=NOON)))

    def test_json(self) -> None:
        policy = compiled(f"allow: {{and: [{A}, {B}]}}")
        data = policy.explain(facts(False, True)).as_json()
        self.assertEqual(data["allowed"], False)
        self.assertEqual(data["kind"], "path")
        self.assertEqual(data["rules"][0]["children"][0]["children"], [
            {"path": "allow[0].and[0]", "state": "miss",
             "criterion": "http_path starts_with /a"},
            {"path": "allow[0].and[1]", "state": "not evaluated",
             "criterion": "http_method is POST"}])

    def test_short_circuits_follow_each_operator(self) -> None:
        for op, states in (("and", ["miss", "not evaluated"]), ("or", ["miss", "hit"]),
                           ("not", ["miss", "hit"]), ("nor", ["miss", "not evaluated"])):
            trace = compiled(f"allow: {{{op}: [{A}, {B}]}}").explain(facts(False, True))
            children = trace.rules[0].children[0].children
            self.assertEqual([c.state for c in children], states, op)


class ReadsTests(SynchronousTestCase):
    def test_request_facts_read(self) -> None:
        self.assertEqual(compiled(ISSUE).reads, frozenset({"method", "client_ip", "clock"}))
        self.assertEqual(compiled("allow: {or: [{groups: a}, {email: b@c.d}, {claim/x: y}]}"
                                  ).reads, frozenset())
        self.assertEqual(compiled("allow: {or: [{http_path: /x}, {client_certificate: true},"
                                  " {cors_preflight: true}, {date: {after: 2026-01-01}},"
                                  " {gateway_routes: true}, {ssh_username: root}]}").reads,
                         frozenset({"path", "client_cert", "cors", "clock", "ssh_username"}))

    def test_nested_reads(self) -> None:
        self.assertEqual(compiled("deny: {not: [{or: [{day_of_week: mon-fri}]}]}").reads,
                         frozenset({"clock"}))
