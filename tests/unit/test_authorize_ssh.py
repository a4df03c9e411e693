"""The SSH service's entrance to authorization (``gateway.authorize.ssh_logins``): each
login decided with the decider of the snapshot in force, and written to the audit
stream there, once: a login whatever its outcome, an open connection's check when it
refuses."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller
from gateway.authorize.ssh_logins import AuthorizeSsh
from gateway.config.routes import Route
from gateway.observability.audit import AUDIT
from gateway.sessions.model import Session

from .test_ssh_parts import caller, person, route, session


class Decider:
    """What the entrance asks of a decider: the caller a session is."""

    def __init__(self, email: str | None = None) -> None:
        self.email = email  # the address decisions see (None: the session's)

    def caller(self, s: Session) -> Caller:
        return caller(s if self.email is None else replace(s, email=self.email))


class EntranceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events: list[dict[str, Any]] = []
        before = (AUDIT.fields, AUDIT.log, AUDIT.file, AUDIT.otlp)
        AUDIT.configure((), False, None, lambda pair: self.events.append(pair[1]))
        self.addCleanup(AUDIT.configure, *before)
        self.decider = Decider()
        self.entrance = AuthorizeSsh(lambda: self.decider)
        self.route: Route = route({"allowed_users": ["alice@example.com"]})  # type: ignore[assignment]

    def test_a_login_is_audited_whatever_its_outcome(self) -> None:
        now = time.time()
        allowed = self.entrance.login(self.route, "db", "root", person(), "192.0.2.1", now)
        denied = self.entrance.login(self.route, "db", "root", person("bob@example.com"),
                                     "192.0.2.1", now)
        self.assertEqual((allowed.allowed, denied.allowed), (True, False))
        self.assertEqual([(e["via"], e["decision"], e["ssh_user"], e["route"], e["email"])
                          for e in self.events],
                         [("ssh", "allow", "root", "db", "alice@example.com"),
                          ("ssh", "deny", "root", "db", "bob@example.com")])

    def test_a_recheck_is_audited_when_it_refuses(self) -> None:
        now = time.time()
        kept = self.entrance.recheck(self.route, "db", "root", session(), "192.0.2.1", now,
                                     "c-1")
        self.assertTrue(kept.allowed)
        self.assertEqual(self.events, [])
        self.decider = Decider(email="bob@example.com")  # a reload: another decider
        closed = self.entrance.recheck(self.route, "db", "root", session(), "192.0.2.1",
                                       now, "c-1")
        self.assertFalse(closed.allowed)
        [event] = self.events
        self.assertEqual((event["via"], event["decision"], event["request_id"],
                          event["email"]), ("recheck", "deny", "c-1", "bob@example.com"))

    def test_the_person_as_the_current_decider_sees_them(self) -> None:
        self.assertEqual(self.entrance.caller(session()).email, "alice@example.com")
        self.decider = Decider(email="")
        self.assertEqual(self.entrance.caller(session()).email, "")
