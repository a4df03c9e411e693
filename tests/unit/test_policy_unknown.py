"""Someone not signed in, in three values (issue 39 part 3): a criterion about the person
is unknown for them, ``not`` and ``nor`` of unknown are unknown, and an unknown ``allow``
or ``deny`` waits for sign-in (the decider sends them to sign in; with their identity the
rule is decided again). Before, such a criterion was false, so
``allow: {not: [{groups: {has: contractors}}]}`` let in everyone who did not sign in, and
so did the README's workaround as written (``authenticated_user: true`` as a sibling
operator, which is an alternative). ``gateway check`` counts and warns about every route
whose policy may let someone in without sign-in; ``gateway policy check`` traces the
unknown entries."""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
from types import MappingProxyType
from typing import Any

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli import main
from gateway.cli.check import open_without_sign_in
from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.routes import parse_policy
from gateway.policy import Facts, Policy, parse_document
from gateway.policy.unsigned import admits_without_sign_in
from gateway.policy.verdict import NO_ALLOW_MATCHED, NOT_SIGNED_IN, UNKNOWN

from .config.helpers import IDENTITY, base_config, write
from .test_policy_specialize import request, rule

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
NOBODY = Facts(method="GET", path="/", client_ip="10.1.2.3")
CONTRACTORS = {"groups": {"has": "contractors"}}
ADMINS = {"groups": {"has": "admins"}}
SIGNED_IN = {"authenticated_user": True}


def compiled(rules: Any) -> Policy:
    problems = Problems()
    document = parse_document(rules, "policy", problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document)


def person(*groups: str, path: str = "/") -> Facts:
    return Facts(authenticated=True, user_id="u-1", email="a@example.test", groups=groups,
                 groups_available=True, path=path, client_ip="10.1.2.3")


def nobody(path: str = "/", **request: Any) -> Facts:
    return Facts(**{"method": "GET", "path": path, "client_ip": "10.1.2.3", **request})


class ThreeValuesTests(SynchronousTestCase):
    def value(self, entry: Any, facts: Facts = NOBODY) -> bool | None:
        """The three-valued outcome of one operator holding ``entry``."""
        policy = compiled({"allow": {"or": [entry]}})
        return policy.allow_rules[0].children[0].tri(facts)

    def test_criteria_about_the_person_are_unknown(self) -> None:
        for entry in ({"user": "u-1"}, {"email": {"ends_with": "@example.test"}},
                      {"domain": "example.test"}, CONTRACTORS, {"claim/dept": "sales"},
                      {"email": {"not_in": ["x@y.test"]}}, {"ssh_username_matches_email": True},
                      {"ssh_username_matches_claim": "logins"}, {"provider": "corp"},
                      {"provider": {"not_in": ["corp"]}}):
            self.assertIsNone(self.value(entry), entry)

    def test_whether_anyone_is_signed_in_is_known(self) -> None:
        """``authenticated_user`` asks whether there is a person: for nobody signed in the
        answer is no, not unknown (else ``and: [authenticated_user, X]`` would wait for a
        sign-in it needs anyway, and ``not: [authenticated_user]`` would never hold)."""
        self.assertIs(self.value(SIGNED_IN), False)

    def test_request_criteria_keep_two_values(self) -> None:
        self.assertIs(self.value({"accept": True}), True)
        self.assertIs(self.value({"reject": True}), False)
        self.assertIs(self.value({"http_path": {"starts_with": "/"}}), True)
        self.assertIs(self.value({"http_method": "POST"}), False)
        self.assertIs(self.value({"source_ip": "10.0.0.0/8"}), True)
        self.assertIs(self.value({"ssh_username": "root"}), False)  # no login on HTTP
        self.assertIs(self.value({"client_certificate": True}), False)

    def test_kleene_operators(self) -> None:
        u, t, f = CONTRACTORS, {"accept": True}, {"reject": True}
        table: list[tuple[str, list[Any], bool | None]] = [
            ("and", [u, t], None), ("and", [u, f], False), ("and", [t, t], True),
            ("or", [u, f], None), ("or", [u, t], True), ("or", [f, f], False),
            ("not", [u], None), ("not", [u, f], None), ("not", [u, t], False),
            ("nor", [u], None), ("nor", [u, t], None), ("nor", [u, f], True),
        ]
        for op, entries, expected in table:
            policy = compiled({"allow": {op: entries}})
            self.assertIs(policy.allow_rules[0].tri(NOBODY), expected, (op, entries))
        nested = compiled({"allow": {"and": [{"not": [{"or": [u, f]}]}, t]}})
        self.assertIsNone(nested.allow_rules[0].tri(NOBODY))


class DecisionTests(SynchronousTestCase):
    def assert_waits(self, policy: Policy, facts: Facts, rule: str) -> None:
        verdict = policy.evaluate(facts)
        self.assertFalse(verdict.allowed)
        self.assertEqual((verdict.code, verdict.rule, verdict.outcome),
                         (NOT_SIGNED_IN, rule, UNKNOWN))

    def test_not_waits_for_sign_in(self) -> None:
        policy = compiled({"allow": {"not": [CONTRACTORS]}})
        self.assert_waits(policy, NOBODY, "allow[0]")
        self.assertTrue(policy.evaluate(person("engineering")).allowed)
        self.assertFalse(policy.evaluate(person("contractors")).allowed)

    def test_nor_waits_for_sign_in(self) -> None:
        policy = compiled({"allow": {"nor": [CONTRACTORS, ADMINS]}})
        self.assert_waits(policy, NOBODY, "allow[0]")
        self.assertTrue(policy.evaluate(person("contractors")).allowed)
        self.assertFalse(policy.evaluate(person("contractors", "admins")).allowed)

    def test_a_sibling_operator_is_an_alternative_and_no_longer_opens_the_route(self) -> None:
        """The README's old workaround read literally: ``authenticated_user`` as a sibling
        operator of ``not`` (the issue measured it admitting everyone)."""
        policy = compiled({"allow": {"not": [CONTRACTORS], "and": [SIGNED_IN]}})
        self.assert_waits(policy, NOBODY, "allow[0]")
        self.assertTrue(policy.evaluate(person("contractors")).allowed)  # the and holds

    def test_and_with_authenticated_user_is_false_not_unknown(self) -> None:
        policy = compiled({"allow": {"and": [SIGNED_IN, {"not": [CONTRACTORS]}]}})
        verdict = policy.evaluate(NOBODY)
        self.assertEqual((verdict.allowed, verdict.code), (False, NO_ALLOW_MATCHED))
        self.assertFalse(policy.evaluate(person("contractors")).allowed)
        self.assertTrue(policy.evaluate(person()).allowed)

    def test_a_rule_true_whoever_signs_in_admits(self) -> None:
        policy = compiled({"allow": {"or": [CONTRACTORS, {"source_ip": "10.0.0.0/8"}]}})
        verdict = policy.evaluate(NOBODY)
        self.assertTrue(verdict.allowed)
        self.assertEqual(str(verdict), "allow[0].or[1] source_ip: matched")
        self.assert_waits(policy, nobody(client_ip="192.0.2.1"), "allow[0]")

    def test_an_unknown_deny_waits_for_sign_in_even_beside_accept(self) -> None:
        """Chosen so: taken as not matching, this deny would open the admins' pages to
        everyone who does not sign in (``not`` again, in a deny)."""
        policy = compiled([{"allow": {"or": [{"accept": True}]}},
                           {"deny": {"and": [{"http_path": {"starts_with": "/admin/"}},
                                             {"not": [ADMINS]}]}}])
        self.assertTrue(policy.evaluate(nobody("/")).allowed)  # and(false, unknown)
        self.assert_waits(policy, nobody("/admin/x"), "deny[0]")
        self.assertTrue(policy.evaluate(person("admins", path="/admin/x")).allowed)
        self.assertFalse(policy.evaluate(person(path="/admin/x")).allowed)

    def test_a_deny_about_the_person_waits_for_sign_in(self) -> None:
        policy = compiled([{"allow": {"or": [{"accept": True}]}}, {"deny": {"or": [CONTRACTORS]}}])
        self.assert_waits(policy, NOBODY, "deny[0]")
        self.assertTrue(policy.evaluate(person()).allowed)
        self.assertFalse(policy.evaluate(person("contractors")).allowed)

    def test_a_deny_true_whoever_signs_in_names_its_criterion(self) -> None:
        policy = compiled([{"allow": {"or": [{"accept": True}]}},
                           {"deny": {"or": [CONTRACTORS, {"http_method": "DELETE"}]}}])
        verdict = policy.evaluate(nobody(method="DELETE"))
        self.assertEqual(str(verdict), "deny[0].or[1] http_method is DELETE: matched")

    def test_an_allow_false_whoever_signs_in_is_a_refusal(self) -> None:
        policy = compiled({"allow": {"and": [CONTRACTORS, {"source_ip": "192.0.2.0/24"}]}})
        self.assertEqual(policy.evaluate(NOBODY).code, NO_ALLOW_MATCHED)

    @settings(max_examples=400, derandomize=True, deadline=None)
    @given(st.lists(rule(), min_size=1, max_size=3), request(),
           st.lists(st.fixed_dictionaries({
               "user_id": st.sampled_from(["u-1", "u-2"]),
               "email": st.sampled_from(["a@x.test", "b@y.test", ""]),
               "groups": st.lists(st.sampled_from(["eng", "ops"]), unique=True).map(tuple),
               "groups_available": st.booleans(),
               "claims": st.sampled_from([MappingProxyType({}),
                                          MappingProxyType({"dept": ("r&d",)})])}),
               min_size=1, max_size=4))
    def test_nobody_is_let_in_whom_some_person_would_not_be(
            self, rules: list[dict[str, Any]], asked: dict[str, Any],
            people: list[dict[str, Any]]) -> None:
        """Fail safe: a request without a person is let in only where every signed-in
        person making it would be (an allow true and every deny false whoever they are),
        unless the policy asks whether anyone is signed in (``not: [authenticated_user]``
        means just that)."""
        assume("authenticated_user" not in repr(rules))
        policy = compiled(rules)
        if policy.evaluate(Facts(**asked)).allowed:
            for who in people:
                self.assertTrue(policy.evaluate(Facts(authenticated=True, **who,
                                                      **asked)).allowed, (rules, who))


class WithoutSignInTests(SynchronousTestCase):
    """``admits_without_sign_in``: which allow rules may let in someone not signed in."""

    def test_rules(self) -> None:
        table: list[tuple[Any, tuple[str, ...]]] = [
            ({"allow": {"or": [{"accept": True}]}}, ("allow[0]",)),
            ({"allow": {"or": [{"source_ip": "10.0.0.0/8"}]}}, ("allow[0]",)),
            ({"allow": {"not": [CONTRACTORS]}}, ()),
            ({"allow": {"nor": [CONTRACTORS, ADMINS]}}, ()),
            ({"allow": {"not": [CONTRACTORS], "and": [SIGNED_IN]}}, ()),
            ({"allow": {"not": [CONTRACTORS, {"http_path": "/x"}]}}, ()),
            ({"allow": {"or": [CONTRACTORS, {"http_path": "/x"}]}}, ("allow[0]",)),
            ({"allow": {"not": [SIGNED_IN]}}, ("allow[0]",)),
            ({"allow": {"or": [{"cors_preflight": True}]}}, ()),  # preflights aside
            ({"allow": {"or": [{"reject": True}]}}, ()),
            ([{"allow": {"or": [{"accept": True}]}}, {"deny": {"or": [CONTRACTORS]}}], ()),
            ([{"allow": {"or": [{"accept": True}]}},
              {"deny": {"and": [{"http_path": {"starts_with": "/admin/"}}, {"not": [ADMINS]}]}}],
             ("allow[0]",)),
            ([{"allow": {"or": [{"accept": True}]}}, {"deny": {"not": [SIGNED_IN]}}], ()),
            ([{"allow": {"or": [SIGNED_IN]}}, {"allow": {"or": [{"http_method": "GET"}]}}],
             ("allow[1]",)),
        ]
        for rules, expected in table:
            self.assertEqual(admits_without_sign_in(compiled(rules)), expected, rules)

    @settings(max_examples=300, derandomize=True, deadline=None)
    @given(st.lists(rule(), min_size=1, max_size=3), st.lists(request(), min_size=1,
                                                             max_size=6))
    def test_never_misses_a_rule_that_lets_someone_in(
            self, rules: list[dict[str, Any]], asked: list[dict[str, Any]]) -> None:
        policy = compiled(rules)
        open_rules = admits_without_sign_in(policy)
        for one in asked:
            verdict = policy.evaluate(Facts(**{**one, "cors_preflight": False}))
            if verdict.allowed:
                self.assertIn(verdict.rule.split(".")[0], open_rules, (rules, one))


class CommandTests(SynchronousTestCase):
    def config(self, routes: list[dict[str, Any]]) -> str:
        directory = tempfile.mkdtemp(prefix="gw-unknown-")
        self.addCleanup(shutil.rmtree, directory, True)
        return write(directory, "config.yaml",
                     yaml.safe_dump(base_config(**{**IDENTITY, "policy": routes})))

    def run_cli(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        self.patch(sys, "stdout", out)
        self.patch(sys, "stderr", err)
        return main(list(argv)), out.getvalue(), err.getvalue()

    @staticmethod
    def route(host: str, **fields: Any) -> dict[str, Any]:
        return {"from": f"https://{host}", "to": "http://127.0.0.1:9", **fields}

    def test_check_warns_about_and_counts_each_route_open_without_sign_in(self) -> None:
        path = self.config([
            self.route("public.test", allow_public_unauthenticated_access=True),
            self.route("accept.test", policy={"allow": {"or": [{"accept": True}]}}),
            self.route("office.test", policy={"allow": {"or": [{"source_ip": "10.0.0.0/8"}]}}),
            self.route("not.test", policy={"allow": {"not": [CONTRACTORS]}}),
            self.route("sibling.test", policy={"allow": {"not": [CONTRACTORS],
                                                         "and": [SIGNED_IN]}}),
            self.route("fields.test", allowed_domains=["example.com"],
                       cors_allow_preflight=True),
        ])
        code, out, err = self.run_cli("check", "--config", path)
        self.assertEqual(code, 0, err)
        # (the one other warning: groups criteria without idp_service_account)
        self.assertEqual(err.count("warning: "), 3, err)
        self.assertIn("routes=6 (hosts=6, public=3, tcp=0) warnings=3", out)
        warned = [line for line in err.splitlines() if "without sign-in" in line]
        self.assertEqual(warned, [
            "warning: policy[1].policy: lets some requests in without sign-in (allow[0]); "
            "the route is counted as public",
            "warning: policy[2].policy: lets some requests in without sign-in (allow[0]); "
            "the route is counted as public"])

    def test_an_ssh_route_is_never_open_without_sign_in(self) -> None:
        """Native SSH signs everyone in before any decision: ``accept`` there is no
        public route."""
        problems = Problems()
        routes = parse_policy([
            {"from": "ssh://db", "to": "ssh://127.0.0.1", "ssh_upstream_host_keys": [KEY],
             "policy": {"allow": {"or": [{"accept": True}]}}},
            {"from": "https://web.test", "to": "http://127.0.0.1:9",
             "policy": {"allow": {"or": [{"accept": True}]}}}],
            Reader(tempfile.gettempdir()), problems, 30.0)
        self.assertEqual(problems.errors, [])
        self.assertEqual([open_without_sign_in(r) for r in routes], [(), ("allow[0]",)])

    def test_policy_check_traces_unknown_entries(self) -> None:
        path = self.config([self.route("not.test", policy={
            "allow": {"not": [CONTRACTORS], "and": [SIGNED_IN]}})])
        code, out, _ = self.run_cli("policy", "check", "--config", path, "--url",
                                    "https://not.test/")
        self.assertEqual(code, 1)
        self.assertIn("decision: denied by allow[0]: unknown: not signed in "
                      "(policy-unknown-not-signed-in)", out)
        self.assertIn("the person sees: sign-in required", out)
        self.assertIn("      allow[0].not[0] groups has contractors: unknown: not signed in",
                      out)
        self.assertIn("      allow[0].and[0] authenticated_user: miss", out)
        code, out, _ = self.run_cli("policy", "check", "--config", path, "--url",
                                    "https://not.test/", "--user", "bob", "--email",
                                    "bob@example.com", "--groups", "engineering")
        self.assertEqual(code, 0, out)
