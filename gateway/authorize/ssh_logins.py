"""The SSH service's entrance to authorization: whether a signed-in person may log in as
a login name on an ssh:// route, each decision written to the audit stream here.

The decision is ``decide.decide``: the route's compiled policy (its ``policy`` rules and
allow fields) over the caller (``Caller``, as the HTTP entrance makes it of the session:
no unproven e-mail, directory groups) and the login name (``ssh_username`` criteria),
described in one place (``decide.ssh_asked``). The words are what the person reads on
their terminal, one line they can act on. ``AuthorizeSsh`` is all the SSH service knows of deciding:
the decider of the snapshot in force is the holder's business, not the service's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.authorize.caller import Caller
from gateway.authorize.decide import decide, ssh_asked
from gateway.config.routes import Route
from gateway.observability.audit import AUDIT
from gateway.policy.nodes import ClaimName, Strings, criteria_of
from gateway.sessions.model import Session


@dataclass(frozen=True, slots=True)
class SshDecision:
    allowed: bool
    reason: str  # for the log: the policy's code and the rule that decided
    message: str = ""  # for the person (empty when allowed)


class Deciding(Protocol):
    """What the entrance asks of the decider of the snapshot in force
    (``gateway.authorize.http_requests.Decider``): the caller a session is, made as for
    HTTP (the same e-mail rule and directory groups)."""

    def caller(self, session: Session) -> Caller: ...

    def renewed(self, session: Session, now: float) -> Awaitable[Session | None]: ...


class Sessions(Protocol):
    """Where sessions are (``gateway.sessions.store.SessionStore``)."""

    @property
    def needs_fetch(self) -> bool: ...

    def get(self, session_id: str) -> Session | None: ...

    def fetch(self, session_id: str) -> Awaitable[Session | None]: ...


class AuthorizeSsh:
    """Decisions for SSH logins, one audit event each: a login (``login``, allowed or
    not, ``via: ssh``) and the periodic check of an open connection (``recheck``, an
    event when it refuses: the connection is closed)."""

    def __init__(self, decider: Callable[[], Deciding], sessions: Sessions) -> None:
        self._decider = decider  # the current snapshot's; a reload replaces it
        self._sessions = sessions

    async def session(self, session_id: str, now: float) -> Session | None:
        """The session ``session_id`` names, valid at ``now`` (``None``: none, or ended):
        the one this process holds, or the one the shared store has (made an instant
        ago through another process)."""
        session = await self._lookup(session_id)
        return session if session is not None and session.valid(now) else None

    async def in_force(self, session_id: str, now: float) -> tuple[Session | None, str]:
        """The session behind an open connection at ``now``, its tokens renewed when
        due; or ``None`` and why the connection cannot go on, in words for the terminal
        (signed out or revoked, expired, the renewal failed)."""
        session = await self._lookup(session_id)
        if session is None:
            return None, "your session has ended (signed out or revoked)"
        if not session.valid(now):
            return None, "your session has expired; connect again to sign in"
        renewed = await self._decider().renewed(session, now)
        if renewed is None:
            return None, "your session could not be renewed; connect again to sign in"
        return renewed, ""

    async def _lookup(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None and self._sessions.needs_fetch:
            session = await self._sessions.fetch(session_id)
        return session

    def caller(self, session: Session) -> Caller:
        """Who ``session`` is as decisions see them (what the SSH service names the
        person by)."""
        return self._decider().caller(session)

    def login(self, route: Route, route_name: str, login: str, caller: Caller,
              client_ip: str, now: float) -> SshDecision:
        """A login, audited. ``caller``: as ``caller`` gave it."""
        decision = decide_login(route, route_name, login, caller, client_ip, now)
        _audit(now, route, route_name, login, caller, client_ip, "ssh", decision)
        return decision

    def recheck(self, route: Route, route_name: str, login: str, session: Session,
                client_ip: str, now: float, connection_id: str) -> SshDecision:
        """An open connection's periodic check, for ``session`` (the record); a refusal
        audited (``via: recheck``)."""
        caller = self.caller(session)
        decision = decide_login(route, route_name, login, caller, client_ip, now)
        if not decision.allowed:
            _audit(now, route, route_name, login, caller, client_ip, "recheck", decision,
                   connection_id)
        return decision

    def default_login(self, route: Route, route_name: str, caller: Caller, client_ip: str,
                      now: float) -> tuple[str, str]:
        """``default_login``: the one login the route's policy gives ``caller``."""
        return default_login(route, route_name, caller, client_ip, now)


def _audit(now: float, route: Route, route_name: str, login: str, caller: Caller,
           client: str, via: str, decision: SshDecision, connection_id: str = "") -> None:
    """The decision in the audit stream (``audit_log``, ``audit_log_file``, OTLP), like
    the data plane's: ``via`` ssh (a login) or recheck (an open connection closed),
    ``ssh_user`` the login."""
    if AUDIT.enabled:
        AUDIT.decision(now, connection_id, "", route_name, route.from_url, caller.user_id,
                       caller.email, client, "", "", "", via, "key", decision.allowed, 0,
                       decision.reason, ssh_user=login, provider=caller.provider)


def who(person: Caller | Session) -> str:
    return person.email or person.user_id


def decide_login(route: Route, route_name: str, login: str, caller: Caller,
                 client_ip: str, now: float) -> SshDecision:
    """Whether ``caller`` may log in as ``login``, in words for their terminal."""
    if not caller.signed_in(now):
        return SshDecision(False, "session-ended",
                           "your session has ended; connect again to sign in")
    if route.identity_providers and caller.provider not in route.identity_providers:
        return SshDecision(False, f"provider-not-accepted: {caller.provider}",
                           f"signed in through {caller.provider}; route {route_name} "
                           f"accepts sign-ins through {', '.join(route.identity_providers)}")
    verdict = decide(route.policy, caller, ssh_asked(login, client_ip, now))
    if verdict.allowed:
        return SshDecision(True, verdict.reason)
    if verdict.kind == "ssh-user":
        message = (f"signed in as {caller.who}; route {route_name} does not allow you to "
                   f"log in as {login}")
    else:
        message = f"signed in as {caller.who}; route {route_name}: {verdict.text}"
    return SshDecision(False, verdict.reason, message)


def policy_logins(route: Route, caller: Caller) -> list[str]:
    """The login names the route's policy names for this person, in order: their
    e-mail's local part (``ssh_username_matches_email``), the values of the claim
    ``ssh_username_matches_claim`` names, the values ``ssh_username`` allows by ``is`` or
    ``in``. A policy without SSH criteria names none (any login would be a guess)."""
    if route.policy_document is None:
        return []
    found: list[str] = []
    for criterion in criteria_of(route.policy_document):
        if criterion.name == "ssh_username_matches_email" and caller.email:
            found.append(caller.email.partition("@")[0])
        elif criterion.name == "ssh_username_matches_claim" and \
                isinstance(criterion.operand, ClaimName):
            found.extend(caller.claims.get(criterion.operand.name, ()))
        elif criterion.name == "ssh_username" and isinstance(criterion.operand, Strings):
            for match in criterion.operand.matches:
                if match.op in ("is", "in"):
                    found.extend(match.values)
    return list(dict.fromkeys(name for name in found if name))


def default_login(route: Route, route_name: str, caller: Caller, client_ip: str,
                  now: float) -> tuple[str, str]:
    """``ssh ROUTE@gateway``: (the login, "") when the policy allows this person exactly
    one of the logins it names, else ("", the line saying how to name one)."""
    allowed = [name for name in policy_logins(route, caller)
               if decide_login(route, route_name, name, caller, client_ip, now).allowed]
    if len(allowed) == 1:
        return allowed[0], ""
    if allowed:
        ways = " or ".join(f"ssh {name}@{route_name}@HOST" for name in allowed[:5])
        return "", f"name the login for route {route_name}: {ways}"
    return "", no_login_message(route_name, caller.email)


def no_login_message(route_name: str, email: str) -> str:
    """``ssh ROUTE@gateway`` without a login name, and none the policy names."""
    local = email.partition("@")[0] or "LOGIN"
    return (f"name the login for route {route_name}: ssh {local}@{route_name}@HOST "
            f"(or ssh -l {local}@{route_name} HOST)")
