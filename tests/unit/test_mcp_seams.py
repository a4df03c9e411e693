"""Where the MCP parts meet, decided with the issue's policy (support may call two tools):
a list's entries are decided as the calls that use them (``authorize/mcp_entries.py``),
the authorization server admits a person as the route's body-less request is decided
(``mcp_oauth/server.admitted``), and a 2026-07-28 client's first request,
``server/discover``, is housekeeping. Each was found by the official SDKs end to end
(tests/integration/test_mcp_clients.py): every list came back empty, no one could
authorize a client on a route whose policy names an MCP criterion, and the Python SDK
fell back to the 2025 handshake."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.decide import decide, decide_message
from gateway.authorize.hook import RequestInfo
from gateway.authorize.mcp_entries import entry_predicate
from gateway.mcp_oauth.server import admitted

from .test_policy_mcp import ISSUE_EXAMPLE, LEAD, NOW, SUPPORT, asked, compiled

POLICY = compiled(ISSUE_EXAMPLE)
REQUEST = RequestInfo(b"POST", "https", "mcp-tickets.example.com", "/mcp", b"", [],
                      "127.0.0.1")


def route(policy: Any = POLICY) -> Any:
    """What the two functions read of a route (its policy; its path for the probe)."""
    return SimpleNamespace(policy=policy, path="", prefix="", regex="", name="tickets")


class ListEntriesTests(SynchronousTestCase):
    def test_entries_are_decided_as_the_calls_that_use_them(self) -> None:
        allowed = entry_predicate(route(), SUPPORT, REQUEST, NOW)
        self.assertTrue(allowed("tools/call", "get_ticket"))
        self.assertTrue(allowed("tools/call", "search_tickets"))
        self.assertFalse(allowed("tools/call", "delete_ticket"))
        self.assertFalse(allowed("prompts/get", "triage"))
        lead = entry_predicate(route(), LEAD, REQUEST, NOW)
        self.assertTrue(lead("tools/call", "delete_ticket"))
        self.assertTrue(lead("resources/read", "tickets://open"))
        self.assertFalse(lead("prompts/get", "triage"))


class AdmittedTests(SynchronousTestCase):
    def test_a_policy_of_mcp_criteria_admits_whom_it_lets_connect(self) -> None:
        self.assertTrue(admitted(REQUEST, route(), SUPPORT, NOW))
        # the issue's lead rule is mcp_method alone: the leads may send some message
        # (tools/call, tools/list, resources/read), so they may connect and authorize
        # a client (an early reading admitted only whom the method "" let in)
        self.assertTrue(admitted(REQUEST, route(), LEAD, NOW))
        other = SUPPORT.__class__("u-3", "cy@example.com", ("sales",), {}, 2e9,
                                  groups_available=True)
        self.assertFalse(admitted(REQUEST, route(), other, NOW))


class DiscoverTests(SynchronousTestCase):
    def test_server_discover_is_housekeeping(self) -> None:
        self.assertTrue(decide(POLICY, SUPPORT, asked("server/discover")).allowed)
        self.assertTrue(decide(POLICY, SUPPORT, asked("initialize")).allowed)
        self.assertFalse(decide(POLICY, SUPPORT, asked("server/other")).allowed)


class SessionKeepingTests(SynchronousTestCase):
    def test_whoever_may_send_some_message_may_keep_a_session(self) -> None:
        """The issue's lead rule names three methods (``mcp_method`` alone): as written
        it refuses ``initialize``, so leads could not connect (the example config had to
        add an ``mcp_tool`` line). The messages that only keep a session are decided as
        the person's: allowed to whoever may send some message on the route."""
        for method in ("initialize", "server/discover", "ping",
                       "notifications/initialized", ""):
            self.assertFalse(decide(POLICY, LEAD, asked(method)).allowed, method)
            self.assertTrue(decide_message(POLICY, LEAD, asked(method)).allowed, method)
            self.assertTrue(decide_message(POLICY, SUPPORT, asked(method)).allowed, method)
        other = SUPPORT.__class__("u-3", "cy@example.com", ("sales",), {}, 2e9,
                                  groups_available=True)
        self.assertFalse(decide_message(POLICY, other, asked("initialize")).allowed)
        self.assertFalse(decide_message(POLICY, None, asked("initialize")).allowed)
        # every other message is decided as the rules say
        self.assertFalse(decide_message(POLICY, LEAD, asked("prompts/get", "p")).allowed)
        self.assertTrue(decide_message(POLICY, LEAD, asked("tools/list")).allowed)
