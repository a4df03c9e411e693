"""A policy specialised for one person (``specialize``) decides every request of theirs
exactly as the whole policy does: the same verdict (rule, criterion, outcome, kind and
code), on random policies (every operator, nested, allow and deny rules, criteria of
the person and of the request) and random people and requests. Derandomised, so every
run checks the same cases."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.policy import CertFacts, Facts, Policy, parse_document, specialize

PERSON_CRITERIA: list[dict[str, Any]] = [
    {"authenticated_user": True}, {"email": {"is": "a@x.test"}},
    {"email": {"ends_with": "@x.test"}}, {"email": {"in": ["a@x.test", "b@y.test"]}},
    {"domain": {"is": "x.test"}}, {"groups": {"has": "eng"}}, {"groups": {"has": "ops"}},
    {"claim/dept": "r&d"}, {"user": {"starts_with": "u-1"}}, {"accept": True},
    {"reject": True}, {"provider": "corp"}, {"provider": {"in": ["corp", "partners"]}},
]
REQUEST_CRITERIA: list[dict[str, Any]] = [
    {"http_method": {"in": ["GET", "HEAD"]}}, {"http_method": {"is": "DELETE"}},
    {"http_path": {"starts_with": "/admin"}}, {"http_path": {"is": "/"}},
    {"http_path": {"ends_with": ".json"}}, {"http_method": {"not_in": ["POST"]}},
    {"source_ip": "10.0.0.0/8"}, {"source_ip": ["192.0.2.0/24", "2001:db8::/32"]},
    {"time_of_day": {"after": "09:00", "before": "17:00"}},
    {"time_of_day": {"after": "22:00", "before": "06:00"}},
    {"time_of_day": {"after": "12:00"}}, {"time_of_day": {"before": "08:30"}},
    {"time_of_day": {"after": "09:00", "before": "17:00", "timezone": "Europe/Berlin"}},
    {"date": {"after": "2027-01-14T06:00:00Z", "before": "2027-01-14T18:00:00Z"}},
    {"date": {"after": "2027-01-14T06:00:00Z"}}, {"day_of_week": "mon-fri"},
    {"cors_preflight": True}, {"client_certificate": True},
    {"client_certificate": {"san_dns": {"is": "a.test"}}},
]
OPERATORS = ("and", "or", "not", "nor")
DAY = 86400.0
MONDAY = 1_799_884_800.0  # 2027-01-14 00:00 UTC


def criterion() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(PERSON_CRITERIA + REQUEST_CRITERIA)


def operator(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    entry = criterion() if depth == 0 else st.one_of(criterion(), operator(depth - 1))
    return st.builds(lambda op, entries: {op: entries}, st.sampled_from(OPERATORS),
                     st.lists(entry, min_size=1, max_size=3))


def rule() -> st.SearchStrategy[dict[str, Any]]:
    body = st.lists(operator(1), min_size=1, max_size=2).map(
        lambda ops: {k: v for op in ops for k, v in op.items()})
    return st.builds(lambda action, b: {action: b}, st.sampled_from(["allow", "deny"]), body)


def person() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "authenticated": st.booleans(),
        "user_id": st.sampled_from(["u-1", "u-2", ""]),
        "provider": st.sampled_from(["corp", "partners", "default"]),
        "email": st.sampled_from(["a@x.test", "b@y.test", "c@x.test", ""]),
        "groups": st.lists(st.sampled_from(["eng", "ops"]), unique=True).map(tuple),
        "groups_available": st.booleans(),
        "claims": st.sampled_from([MappingProxyType({}),
                                   MappingProxyType({"dept": ("r&d",)})]),
    })


def request() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "method": st.sampled_from(["GET", "HEAD", "DELETE", "POST", "OPTIONS"]),
        "path": st.sampled_from(["/", "/admin/x", "/docs"]),
        "client_ip": st.sampled_from(["10.1.2.3", "192.0.2.1", "2001:db8::7", "x", ""]),
        "client_cert": st.sampled_from([None, CertFacts("ab", "cd", san_dns=("a.test",)),
                                        CertFacts("ab", "cd")]),
        "cors_preflight": st.booleans(),
        "now": st.sampled_from([MONDAY + 3 * 3600, MONDAY + 8 * 3600 + 1800,
                                MONDAY + 12 * 3600, MONDAY + 23 * 3600,
                                MONDAY + 3 * DAY + 10 * 3600, MONDAY - 60]),
    })


def compiled(rules: list[dict[str, Any]]) -> Policy:
    problems = Problems()
    document = parse_document(rules, "policy", problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document)


class SpecializeTests(SynchronousTestCase):
    @settings(max_examples=600, derandomize=True, deadline=None)
    @given(st.lists(rule(), min_size=1, max_size=3), person(),
           st.lists(request(), min_size=1, max_size=4))
    def test_same_verdict_as_the_whole_policy(self, rules: list[dict[str, Any]],
                                              who: dict[str, Any],
                                              requests: list[dict[str, Any]]) -> None:
        policy = compiled(rules)
        judge = specialize(policy, Facts(**who))
        for asked in requests:
            facts = Facts(**who, **asked)
            self.assertEqual(judge.evaluate(facts), policy.evaluate(facts), (rules, who, asked))

    def test_the_person_is_decided_once(self) -> None:
        """What is left of an ``and`` of groups and a method is the method alone, written
        inline; for someone outside the group nothing is left to test."""
        policy = compiled([{"allow": {"and": [{"groups": {"has": "eng"}},
                                              {"http_method": {"is": "GET"}}]}}])
        member = {"authenticated": True, "user_id": "u", "groups": ("eng",),
                  "groups_available": True}
        judge = specialize(policy, Facts(**member))
        self.assertTrue(judge.evaluate(Facts(**member, method="GET")).allowed)
        self.assertFalse(judge.evaluate(Facts(**member, method="PUT")).allowed)
        self.assertIn("if method in K", judge.source)
        self.assertNotIn("(f)", judge.source.split("return")[0])  # no predicate called
        stranger = specialize(policy, Facts(authenticated=True, user_id="v"))
        self.assertNotIn("if ", stranger.source)  # refused whatever the request

    def test_no_policy_value_is_written_into_the_code(self) -> None:
        """Values of the configuration are constants the code names, never its text."""
        policy = compiled([{"allow": {"and": [
            {"http_path": {"starts_with": "/x'); import os; os.system('true"}},
            {"http_method": {"in": ["GET"]}}]}}])
        judge = specialize(policy, Facts(authenticated=True, user_id="u"))
        self.assertNotIn("import", judge.source)
        self.assertNotIn("/x", judge.source)
        self.assertTrue(judge.evaluate(Facts(
            authenticated=True, user_id="u", method="GET",
            path="/x'); import os; os.system('true/y")).allowed)
