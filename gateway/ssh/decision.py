"""Whether a signed-in person may log in as a login name on an ssh:// route: the route's
compiled policy (its ``policy`` rules and allow fields) over the person as decisions see
them and the login name (``ssh_username`` criteria). Pure; the words are what the person
reads on their terminal, one line they can act on."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.authorize.policy import Facts
from gateway.config.routes import Route
from gateway.policy.nodes import ClaimName, Strings, criteria_of
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
