"""The MCP criteria ``mcp_method`` and ``mcp_tool`` (``gateway/policy``), decided through
``authorize.decide`` for a JSON-RPC message, explained, specialised, and asked about with
``gateway policy check --mcp-method/--mcp-name``; the issue's example policy passes
``gateway check``."""

from __future__ import annotations

from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller
from gateway.authorize.decide import Asked, decide, facts_of, mcp_asked
from gateway.config.errors import Problems
from gateway.mcp.messages import McpCall
from gateway.policy import Policy, parse_document, specialize
from gateway.policy.any_message import NONE_ALLOWED, any_message_allowed

from .test_policy_check_cli import GROUPS_FROM_CLAIM, CliCase

ISSUE_EXAMPLE = """
- allow:
    and:
      - groups: {has: support}
      - mcp_tool: {in: [search_tickets, get_ticket]}
- allow:
    and:
      - groups: {has: support-leads}
      - mcp_method: {in: [tools/call, tools/list, resources/read]}
"""
SUPPORT = Caller("u-1", "ada@example.com", ("support",), {}, 2e9, groups_available=True)
LEAD = Caller("u-2", "bo@example.com", ("support-leads",), {}, 2e9, groups_available=True)
NOW = 1.8e9


def compiled(text: str) -> Policy:
    problems = Problems()
    document = parse_document(yaml.safe_load(text), "policy", problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document)


def asked(method: str | None, name: str = "") -> Asked:
    base = Asked(NOW, "POST", "/mcp")
    return base if method is None else mcp_asked(base, McpCall(1, method, name))


class IssueExampleTests(SynchronousTestCase):
    policy = compiled(ISSUE_EXAMPLE)

    def allowed(self, caller: Caller | None, method: str | None, name: str = "") -> bool:
        return decide(self.policy, caller, asked(method, name)).allowed

    def test_support_connects_lists_and_calls_exactly_its_tools(self) -> None:
        for method in ("initialize", "notifications/initialized", "ping", "tools/list",
                       "prompts/list", "resources/list", "resources/templates/list",
                       "subscriptions/listen", ""):
            with self.subTest(method=method):
                self.assertTrue(self.allowed(SUPPORT, method))
        self.assertTrue(self.allowed(SUPPORT, "tools/call", "search_tickets"))
        self.assertTrue(self.allowed(SUPPORT, "tools/call", "get_ticket"))
        self.assertFalse(self.allowed(SUPPORT, "tools/call", "delete_ticket"))
        # a tool's name given to another method is no tool call
        for method in ("resources/read", "prompts/get", "completion/complete",
                       "logging/setLevel"):
            with self.subTest(method=method):
                self.assertFalse(self.allowed(SUPPORT, method, "get_ticket"))

    def test_leads_by_method(self) -> None:
        self.assertTrue(self.allowed(LEAD, "tools/call", "delete_ticket"))
        self.assertTrue(self.allowed(LEAD, "resources/read", "file:///x"))
        self.assertFalse(self.allowed(LEAD, "prompts/get", "p"))
        self.assertFalse(self.allowed(LEAD, "initialize"))

    def test_a_request_without_an_mcp_message_matches_neither(self) -> None:
        self.assertFalse(self.allowed(SUPPORT, None))
        self.assertFalse(self.allowed(LEAD, None))

    def test_nobody_signed_in_is_sent_to_sign_in(self) -> None:
        verdict = decide(self.policy, None, asked("tools/call", "get_ticket"))
        self.assertFalse(verdict.allowed)
        self.assertEqual(verdict.code, "policy-unknown-not-signed-in")

    def test_the_refusal_names_the_mcp_kind(self) -> None:
        verdict = decide(compiled("allow: {and: [{mcp_tool: {is: a}}]}"), SUPPORT,
                         asked("tools/call", "b"))
        self.assertEqual((verdict.allowed, verdict.kind), (False, "mcp"))


class PolarityTests(SynchronousTestCase):
    """``mcp_tool`` lets housekeeping past in whichever sense it is written."""

    def allowed(self, text: str, method: str, name: str = "") -> bool:
        return decide(compiled(text), SUPPORT, asked(method, name)).allowed

    def test_deny_refuses_the_tool_alone(self) -> None:
        policy = ("[{allow: {or: [{groups: {has: support}}]}}, "
                  "{deny: {or: [{mcp_tool: {in: [drop_db]}}]}}]")
        self.assertFalse(self.allowed(policy, "tools/call", "drop_db"))
        for method, name in (("tools/call", "get_ticket"), ("initialize", ""),
                             ("tools/list", ""), ("resources/read", "drop_db")):
            with self.subTest(method=method):
                self.assertTrue(self.allowed(policy, method, name))

    def test_allowlist_under_deny(self) -> None:
        """Pomerium's allowlist pattern: deny every tool not listed."""
        policy = ("[{allow: {or: [{groups: {has: support}}]}}, "
                  "{deny: {or: [{mcp_tool: {not_in: [get_ticket]}}]}}]")
        self.assertTrue(self.allowed(policy, "tools/call", "get_ticket"))
        self.assertFalse(self.allowed(policy, "tools/call", "drop_db"))
        self.assertTrue(self.allowed(policy, "tools/list"))
        negated = ("[{allow: {or: [{groups: {has: support}}]}}, "
                   "{deny: {not: [{mcp_tool: {in: [get_ticket]}}]}}]")
        self.assertTrue(self.allowed(negated, "tools/call", "get_ticket"))
        self.assertFalse(self.allowed(negated, "tools/call", "drop_db"))
        self.assertTrue(self.allowed(negated, "ping"))

    def test_negated_in_an_allow_rule(self) -> None:
        policy = "allow: {and: [{groups: {has: support}}, {not: [{mcp_tool: {in: [drop_db]}}]}]}"
        self.assertFalse(self.allowed(policy, "tools/call", "drop_db"))
        self.assertTrue(self.allowed(policy, "tools/call", "x"))
        self.assertTrue(self.allowed(policy, "initialize"))
        nested = "allow: {nor: [{nor: [{mcp_tool: {is: a}}]}]}"
        self.assertTrue(self.allowed(nested, "tools/call", "a"))
        self.assertTrue(self.allowed(nested, "ping"))
        self.assertFalse(self.allowed(nested, "tools/call", "b"))

    def test_mcp_method_matchers(self) -> None:
        self.assertTrue(self.allowed("allow: {or: [{mcp_method: {starts_with: tools/}}]}",
                                     "tools/list"))
        # not_in matches "" (a GET), but never a request with no MCP message
        policy = compiled("allow: {or: [{mcp_method: {not_in: [tools/call]}}]}")
        self.assertTrue(decide(policy, SUPPORT, asked("")).allowed)
        self.assertFalse(decide(policy, SUPPORT, asked(None)).allowed)


class AnyMessageTests(SynchronousTestCase):
    """A request that carries no message (GET, DELETE, a client's response): allowed when
    some message would be."""

    def verdict(self, text: str, caller: Caller, method: str = "GET") -> Any:
        return any_message_allowed(compiled(text), facts_of(caller, Asked(NOW, method, "/mcp")))

    def test_the_issue_example(self) -> None:
        self.assertEqual(self.verdict(ISSUE_EXAMPLE, SUPPORT).rule, "allow[0]")
        self.assertEqual(self.verdict(ISSUE_EXAMPLE, LEAD).rule, "allow[1]")
        nobody_of_theirs = Caller("u-3", "cy@example.com", ("sales",), {}, 2e9,
                                  groups_available=True)
        self.assertIs(self.verdict(ISSUE_EXAMPLE, nobody_of_theirs), NONE_ALLOWED)

    def test_deny_rules(self) -> None:
        # a deny that some message escapes does not stop it; one that holds whatever the
        # message does
        some = ("[{allow: {or: [{groups: {has: support}}]}}, "
                "{deny: {or: [{mcp_tool: {in: [drop_db]}}]}}]")
        self.assertTrue(self.verdict(some, SUPPORT).allowed)
        every = ("[{allow: {or: [{groups: {has: support}}]}}, "
                 "{deny: {or: [{http_method: GET}]}}]")
        verdict = self.verdict(every, SUPPORT)
        self.assertEqual((verdict.allowed, verdict.rule), (False, "deny[0]"))
        self.assertTrue(self.verdict(every, SUPPORT, "DELETE").allowed)

    def test_operators(self) -> None:
        negated = "allow: {and: [{groups: {has: support}}, {not: [{mcp_method: {is: x}}]}]}"
        self.assertTrue(self.verdict(negated, SUPPORT).allowed)
        self.assertFalse(self.verdict(negated, LEAD).allowed)
        nor = "allow: {nor: [{groups: {has: support}}, {mcp_tool: {is: a}}]}"
        self.assertTrue(self.verdict(nor, SUPPORT).allowed)  # some tool is not a


class ExplainAndSpecializeTests(SynchronousTestCase):
    def test_the_trace_shows_the_tool_criterion(self) -> None:
        policy = compiled(ISSUE_EXAMPLE)
        trace = policy.explain(facts_of(SUPPORT, asked("tools/call", "delete_ticket")))
        text = "\n".join(trace.lines())
        self.assertIn("mcp_tool in [search_tickets, get_ticket]", text)
        self.assertFalse(trace.verdict.allowed)

    def test_a_policy_reading_mcp_is_decided_per_request(self) -> None:
        self.assertTrue(compiled(ISSUE_EXAMPLE).per_request)
        self.assertIn("mcp", compiled(ISSUE_EXAMPLE).reads)

    def test_specialised_policies_agree_on_requests_without_a_message(self) -> None:
        policy = compiled(ISSUE_EXAMPLE + "- allow: {or: [{http_method: GET}]}")
        person = facts_of(SUPPORT, Asked(NOW))
        special = specialize(policy, person)
        for method in ("GET", "POST"):
            facts = facts_of(SUPPORT, Asked(NOW, method, "/mcp"))
            self.assertEqual(special.evaluate(facts), policy.evaluate(facts))


EXAMPLE_ROUTE: dict[str, Any] = {
    "from": "https://mcp-tickets.example.com", "to": "http://127.0.0.1:8000", "mcp": {},
    "policy": yaml.safe_load(ISSUE_EXAMPLE)}



class PolicyCheckTests(CliCase):
    def setUp(self) -> None:
        self.path = self.config([EXAMPLE_ROUTE, {"from": "https://plain.example.com",
                                                 "to": "http://127.0.0.1:9",
                                                 "policy": yaml.safe_load(ISSUE_EXAMPLE)}],
                                idp_service_account=GROUPS_FROM_CLAIM,
                                mcp_allowed_client_id_domains=["claude.ai", "vscode.dev"])

    def test_gateway_check_finds_nothing_wrong(self) -> None:
        path = self.config([EXAMPLE_ROUTE], idp_service_account=GROUPS_FROM_CLAIM,
                           mcp_allowed_client_id_domains=["claude.ai", "vscode.dev"])
        code, out, err = self.run_cli("check", "--config", path)
        self.assertEqual(code, 0, out + err)
        self.assertIn("warnings=0", out)
        self.assertEqual(err, "")

    def test_gateway_check_warns_of_mcp_criteria_on_a_plain_route(self) -> None:
        code, out, err = self.run_cli("check", "--config", self.path)
        self.assertEqual(code, 0, out + err)
        self.assertIn("mcp_method and mcp_tool never match on a route without mcp", out + err)

    def test_asking_about_a_tool(self) -> None:
        url = "https://mcp-tickets.example.com/mcp"
        base = ("--email", "ada@example.com", "--user", "u-1", "--groups", "support")
        code, out, _ = self.check(self.path, url, *base, "--mcp-name", "get_ticket")
        self.assertEqual(code, 0, out)
        code, out, _ = self.check(self.path, url, *base, "--mcp-tool", "delete_ticket")
        self.assertEqual(code, 1, out)
        self.assertIn("mcp_tool", out)
        self.assertIn("the person sees: a JSON-RPC error: the gateway's policy does not allow "
                      "tools/call of 'delete_ticket'", out)
        code, out, _ = self.check(self.path, url, *base, "--mcp-method", "tools/list")
        self.assertEqual(code, 0, out)
        code, doc = self.check_json(self.path, url, *base, "--mcp-method", "prompts/get",
                                    "--mcp-name", "x")
        self.assertEqual((code, doc["decision"]["allowed"], doc["decision"]["kind"]),
                         (1, False, "policy"))

    def test_a_session_keeping_message_is_decided_as_the_daemon_does(self) -> None:
        """A support lead's rule names methods, not initialize: the daemon lets them
        connect (some message is theirs), and so does the command, exit status and
        all."""
        url = "https://mcp-tickets.example.com/mcp"
        lead = ("--email", "bo@example.com", "--user", "u-2", "--groups", "support-leads")
        code, out, _ = self.check(self.path, url, *lead, "--mcp-method", "initialize")
        self.assertEqual(code, 0, out)
        self.assertIn("decision: allowed", out)
        nobody = ("--email", "cy@example.com", "--user", "u-3", "--groups", "sales")
        code, out, _ = self.check(self.path, url, *nobody, "--mcp-method", "initialize")
        self.assertEqual(code, 1, out)

    def test_notes_where_no_mcp_message_is_asked_about(self) -> None:
        base = ("--email", "ada@example.com", "--user", "u-1", "--groups", "support")
        code, out, _ = self.check(self.path, "https://mcp-tickets.example.com/", *base)
        self.assertEqual(code, 1)
        self.assertIn("--mcp-method/--mcp-name ask about one", out)
        code, out, _ = self.check(self.path, "https://plain.example.com/", *base,
                                  "--mcp-name", "get_ticket")
        self.assertEqual(code, 1)
        self.assertIn("the route has no mcp", out)
