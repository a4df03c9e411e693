"""The SSH service's entrance to authorization: whether a signed-in person may log in as
a login name on an ssh:// route, each decision written to the audit stream here.

The decision is the route's compiled policy (its ``policy`` rules and allow fields) over
the person as decisions see them (``Decider.decision_session``: no unproven e-mail,
directory groups) and the login name (``ssh_username`` criteria); its facts are built by
``authorize.policy.ssh_facts``. The words are what the person reads on their terminal,
one line they can act on. ``AuthorizeSsh`` is all the SSH service knows of deciding:
the decider of the snapshot in force is the holder's business, not the service's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.authorize.policy import ssh_facts
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
    (``gateway.authorize.decide.Decider``)."""

    @property
    def groups_available(self) -> bool: ...

    def decision_session(self, session: Session) -> tuple[Session, str]: ...


class AuthorizeSsh:
    """Decisions for SSH logins, one audit event each: a login (``login``, allowed or
    not, ``via: ssh``) and the periodic check of an open connection (``recheck``, an
    event when it refuses: the connection is closed)."""

    def __init__(self, decider: Callable[[], Deciding]) -> None:
        self._decider = decider  # the current snapshot's; a reload replaces it

    def view(self, session: Session) -> Session:
        """``session`` as decisions see it (what the SSH service names the person by)."""
        return self._decider().decision_session(session)[0]

    def login(self, route: Route, route_name: str, login: str, view: Session,
              client_ip: str, now: float) -> SshDecision:
        """A login, audited. ``view``: the session as ``view`` gave it."""
        decision = decide_login(route, route_name, login, view, client_ip, now,
                                groups_available=self._decider().groups_available)
        _audit(now, route, route_name, login, view, client_ip, "ssh", decision)
        return decision

    def recheck(self, route: Route, route_name: str, login: str, session: Session,
                client_ip: str, now: float, connection_id: str) -> SshDecision:
        """An open connection's periodic check, for ``session`` (the record); a refusal
        audited (``via: recheck``)."""
        view = self.view(session)
        decision = decide_login(route, route_name, login, view, client_ip, now,
                                groups_available=self._decider().groups_available)
        if not decision.allowed:
            _audit(now, route, route_name, login, view, client_ip, "recheck", decision,
                   connection_id)
        return decision

    def default_login(self, route: Route, route_name: str, view: Session, client_ip: str,
                      now: float) -> tuple[str, str]:
        """``default_login`` with the current decider's group data."""
        return default_login(route, route_name, view, client_ip, now,
                             groups_available=self._decider().groups_available)


def _audit(now: float, route: Route, route_name: str, login: str, view: Session,
           client: str, via: str, decision: SshDecision, connection_id: str = "") -> None:
    """The decision in the audit stream (``audit_log``, ``audit_log_file``, OTLP), like
    the data plane's: ``via`` ssh (a login) or recheck (an open connection closed),
    ``ssh_user`` the login."""
    if AUDIT.enabled:
        AUDIT.decision(now, connection_id, "", route_name, route.from_url, view.user_id,
                       view.email, client, "", "", "", via, "key", decision.allowed, 0,
                       decision.reason, ssh_user=login, provider=view.provider)


def who(session: Session) -> str:
    return session.email or session.user_id


def decide_login(route: Route, route_name: str, login: str, session: Session,
                 client_ip: str, now: float, *, groups_available: bool) -> SshDecision:
    """``session`` as decisions see it (``Decider.decision_session``)."""
    if not session.user_id or not session.valid(now):
        return SshDecision(False, "session-ended",
                           "your session has ended; connect again to sign in")
    if route.identity_providers and session.provider not in route.identity_providers:
        return SshDecision(False, f"provider-not-accepted: {session.provider}",
                           f"signed in through {session.provider}; route {route_name} "
                           f"accepts sign-ins through {', '.join(route.identity_providers)}")
    facts = ssh_facts(session, login, client_ip, now, groups_available=groups_available)
    verdict = route.policy.evaluate(facts)
    reason = f"{verdict.code} {verdict}"
    if verdict.allowed:
        return SshDecision(True, reason)
    if verdict.kind == "ssh-user":
        message = (f"signed in as {who(session)}; route {route_name} does not allow you to "
                   f"log in as {login}")
    else:
        message = f"signed in as {who(session)}; route {route_name}: {verdict.text}"
    return SshDecision(False, reason, message)
def policy_logins(route: Route, session: Session) -> list[str]:
    """The login names the route's policy names for this person, in order: their
    e-mail's local part (``ssh_username_matches_email``), the values of the claim
    ``ssh_username_matches_claim`` names, the values ``ssh_username`` allows by ``is`` or
    ``in``. A policy without SSH criteria names none (any login would be a guess)."""
    if route.policy_document is None:
        return []
    found: list[str] = []
    for criterion in criteria_of(route.policy_document):
        if criterion.name == "ssh_username_matches_email" and session.email:
            found.append(session.email.partition("@")[0])
        elif criterion.name == "ssh_username_matches_claim" and \
                isinstance(criterion.operand, ClaimName):
            found.extend(session.claims.get(criterion.operand.name, ()))
        elif criterion.name == "ssh_username" and isinstance(criterion.operand, Strings):
            for match in criterion.operand.matches:
                if match.op in ("is", "in"):
                    found.extend(match.values)
    return list(dict.fromkeys(name for name in found if name))


def default_login(route: Route, route_name: str, session: Session, client_ip: str,
                  now: float, *, groups_available: bool) -> tuple[str, str]:
    """``ssh ROUTE@gateway``: (the login, "") when the policy allows this person exactly
    one of the logins it names, else ("", the line saying how to name one)."""
    allowed = [name for name in policy_logins(route, session)
               if decide_login(route, route_name, name, session, client_ip, now,
                               groups_available=groups_available).allowed]
    if len(allowed) == 1:
        return allowed[0], ""
    if allowed:
        ways = " or ".join(f"ssh {name}@{route_name}@HOST" for name in allowed[:5])
        return "", f"name the login for route {route_name}: {ways}"
    return "", no_login_message(route_name, session.email)


def no_login_message(route_name: str, email: str) -> str:
    """``ssh ROUTE@gateway`` without a login name, and none the policy names."""
    local = email.partition("@")[0] or "LOGIN"
    return (f"name the login for route {route_name}: ssh {local}@{route_name}@HOST "
            f"(or ssh -l {local}@{route_name} HOST)")
