"""The SSH service's entrance to authorization (``gateway.authorize.ssh_logins``): each
login decided with the decider of the snapshot in force, and written to the audit
stream there, once: a login whatever its outcome, an open connection's check when it
refuses."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from twisted.internet.defer import ensureDeferred
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller
from gateway.authorize.ssh_logins import AuthorizeSsh
from gateway.config.routes import Route
from gateway.observability.audit import AUDIT
from gateway.sessions.model import Session

from .test_identity import NOW, IdentityCase
from .test_ssh_parts import caller, person, route, session


class Decider:
    """What the entrance asks of a decider: the caller a session is, the session
    renewed when its tokens are due."""

    def __init__(self, email: str | None = None, renew: bool | None = None) -> None:
        self.email = email  # the address decisions see (None: the session's)
        self.renew = renew  # None: not due; True: renewed; False: the refresh failed
        self.renewals: list[float] = []

    def caller(self, s: Session) -> Caller:
        return caller(s if self.email is None else replace(s, email=self.email))

    async def renewed(self, s: Session, now: float) -> Session | None:
        if self.renew is None:
            return s
        self.renewals.append(now)
        return replace(s, token_expires_at=now + 60) if self.renew else None


class MemorySessions:
    """Sessions held here (``get``) or only in a shared store (``fetch``)."""

    def __init__(self, *held: Session, shared: tuple[Session, ...] = ()) -> None:
        self.held = {s.id: s for s in held}
        self.shared = {s.id: s for s in shared}
        self.needs_fetch = bool(shared)

    def get(self, session_id: str) -> Session | None:
        return self.held.get(session_id)

    async def fetch(self, session_id: str) -> Session | None:
        return self.shared.get(session_id)


class EntranceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events: list[dict[str, Any]] = []
        before = (AUDIT.fields, AUDIT.log, AUDIT.file, AUDIT.otlp)
        AUDIT.configure((), False, None, lambda pair: self.events.append(pair[1]))
        self.addCleanup(AUDIT.configure, *before)
        self.decider = Decider()
        self.sessions = MemorySessions()
        self.entrance = AuthorizeSsh(lambda: self.decider, self.sessions)
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

    def test_a_route_naming_providers_refuses_another_ones_session(self) -> None:
        """``identity_providers`` on an ssh:// route: a session of another provider is
        refused with a line naming the accepted ones, and audited with its provider."""
        now = time.time()
        named: Route = route({"allowed_users": ["alice@example.com"],  # type: ignore[assignment]
                              "identity_providers": ["corp"]})
        corp = self.entrance.login(named, "db", "root", person(provider="corp"),
                                   "192.0.2.1", now)
        other = self.entrance.login(named, "db", "root", person(provider="partners"),
                                    "192.0.2.1", now)
        self.assertTrue(corp.allowed)
        self.assertEqual((other.allowed, other.reason), (False,
                                                        "provider-not-accepted: partners"))
        self.assertEqual(other.message, "signed in through partners; route db accepts "
                                        "sign-ins through corp")
        self.assertEqual([e["provider"] for e in self.events], ["corp", "partners"])

class SessionInForceTests(SynchronousTestCase):
    """What the entrance tells an open connection's check about its session: go on
    with it (renewed when its tokens were due), or why not, in words for the terminal;
    a session made through another process is read from the shared store."""

    def in_force(self, entrance: AuthorizeSsh, sid: str, now: float
                 ) -> tuple[Session | None, str]:
        return self.successResultOf(ensureDeferred(entrance.in_force(sid, now)))

    def test_in_force_or_why_not(self) -> None:
        now = time.time()
        alive, old = session(), replace(session(), id="s2", expires_at=now - 1)
        decider = Decider()
        entrance = AuthorizeSsh(lambda: decider, MemorySessions(alive, old))
        self.assertEqual(self.in_force(entrance, "s1", now), (alive, ""))
        self.assertEqual(self.in_force(entrance, "gone", now),
                         (None, "your session has ended (signed out or revoked)"))
        self.assertEqual(self.in_force(entrance, "s2", now),
                         (None, "your session has expired; connect again to sign in"))
        decider.renew = True
        renewed, _ = self.in_force(entrance, "s1", now)
        assert renewed is not None
        self.assertEqual((renewed.id, renewed.token_expires_at), ("s1", now + 60))
        decider.renew = False
        self.assertEqual(self.in_force(entrance, "s1", now), (
            None, "your session could not be renewed; connect again to sign in"))
        self.assertEqual(decider.renewals, [now, now])

    def test_a_session_of_another_process(self) -> None:
        now = time.time()
        theirs = session()
        entrance = AuthorizeSsh(Decider, MemorySessions(shared=(theirs,)))
        self.assertEqual(self.in_force(entrance, "s1", now), (theirs, ""))
        self.assertIs(self.successResultOf(ensureDeferred(entrance.session("s1", now))),
                      theirs)
        self.assertIsNone(self.successResultOf(ensureDeferred(
            entrance.session("s1", theirs.expires_at))))


class RenewedTests(IdentityCase):
    """The decider's ``renewed``, which the SSH entrance asks for an open connection:
    the session itself until its tokens are due at the time given, then what sign-in's
    refresh gives (``None``: it failed)."""

    def test_renewed_only_when_due(self) -> None:
        session = self.session()
        due = [math.inf]
        refreshed: list[Session | None] = [replace(session, access_token="new")]

        async def refresh(s: Session) -> Session | None:
            return refreshed[0]

        self.patch(self.identity.flow, "refresh_due", lambda s: due[0])
        self.patch(self.identity.flow, "refresh", refresh)
        decider = self.identity.decider
        renewed = self.successResultOf(ensureDeferred(decider.renewed(session, NOW)))
        self.assertIs(renewed, session)
        due[0] = NOW
        renewed = self.successResultOf(ensureDeferred(decider.renewed(session, NOW)))
        assert renewed is not None
        self.assertEqual(renewed.access_token, "new")
        refreshed[0] = None
        self.assertIsNone(self.successResultOf(ensureDeferred(decider.renewed(session, NOW))))
