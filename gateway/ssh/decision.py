"""Whether a signed-in person may log in as a login name on an ssh:// route: the route's
compiled policy (its ``policy`` rules and allow fields) over the person as decisions see
them and the login name (``ssh_username`` criteria). Pure; the words are what the person
reads on their terminal, one line they can act on."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.authorize.policy import Facts
from gateway.config.routes import Route
from gateway.sessions.model import Session

# what policies see as the method of an SSH login (no http_method rule matches it)
SSH_METHOD = "SSH"


@dataclass(frozen=True, slots=True)
class SshDecision:
    allowed: bool
    reason: str  # for the log: the policy's code and the rule that decided
    message: str = ""  # for the person (empty when allowed)


def who(session: Session) -> str:
    return session.email or session.user_id


def decide_login(route: Route, route_name: str, login: str, session: Session,
                 client_ip: str, now: float, *, groups_available: bool) -> SshDecision:
    """``session`` as decisions see it (``Decider.decision_session``)."""
    if not session.user_id or not session.valid(now):
        return SshDecision(False, "session-ended",
                           "your session has ended; connect again to sign in")
    facts = Facts(authenticated=True, user_id=session.user_id, email=session.email,
                  groups=session.groups, groups_available=groups_available,
                  claims=session.claims, method=SSH_METHOD, path="", client_ip=client_ip,
                  ssh_username=login, now=now)
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


def no_login_message(route_name: str, email: str) -> str:
    """``ssh ROUTE@gateway`` without a login name."""
    local = email.partition("@")[0] or "LOGIN"
    return (f"name the login for route {route_name}: ssh {local}@{route_name}@HOST "
            f"(or ssh -l {local}@{route_name} HOST)")
