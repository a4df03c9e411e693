"""``Facts`` for a decision, from the session as decisions see it and the request.

A session that is missing, has no user or has expired gives the facts of someone not
signed in: no identity criterion matches them, whatever the session still holds.
"""

from __future__ import annotations

from typing import Protocol

from gateway.policy import CertFacts, Facts
from gateway.sessions.model import Session

# what policies see as the method of an SSH login
SSH_METHOD = "SSH"
# The methods requests use, as text without decoding each time.
_METHODS = {m.encode(): m for m in (
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE")}


class RequestFacts(Protocol):
    """What of a request a decision reads (``gateway.authorize.hook.RequestInfo``)."""

    @property
    def method(self) -> bytes: ...
    @property
    def path(self) -> str: ...
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...
    @property
    def client_ip(self) -> str: ...


def is_cors_preflight(method: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    """``OPTIONS`` with non-empty ``Origin`` and ``Access-Control-Request-Method``.

    Exactly ``OPTIONS``: methods are case-sensitive (RFC 9110 9.1), and the decision
    caches skip exactly ``OPTIONS``; an ``options`` request (HTTP/2 lets one through)
    taken for a preflight would leave an allow for the session's next requests."""
    if method != b"OPTIONS":
        return False
    present = {name.lower() for name, value in headers if value.strip()}
    return b"origin" in present and b"access-control-request-method" in present


def method_text(method: bytes) -> str:
    """The method as ``http_method`` compares it: text, upper case (a lower-case
    ``delete`` is refused by a rule about ``DELETE``, not let past it)."""
    text = _METHODS.get(method)
    return text if text is not None else method.decode("latin-1").upper()


def person_facts(session: Session | None, now: float, *, groups_available: bool,
                 method: str = "GET", path: str = "/", client_ip: str = "",
                 client_cert: CertFacts | None = None, cors_preflight: bool = False,
                 internal: bool = False, ssh_username: str | None = None) -> Facts:
    """The one place a session becomes the person a policy sees (every entrance's facts
    are made here): ``session`` as ``Decider.decision_session`` gives it (no refused
    e-mail, directory groups) at ``now``, with the request's facts; a session that is
    missing, has no user or has expired gives someone not signed in."""
    if session is None or not session.user_id or not session.valid(now):
        return Facts(method=method, path=path, client_ip=client_ip, client_cert=client_cert,
                     cors_preflight=cors_preflight, internal=internal,
                     ssh_username=ssh_username, now=now)
    return Facts(authenticated=True, user_id=session.user_id, provider=session.provider,
                 email=session.email,
                 groups=session.groups, groups_available=groups_available,
                 claims=session.claims, method=method, path=path, client_ip=client_ip,
                 client_cert=client_cert, cors_preflight=cors_preflight, internal=internal,
                 ssh_username=ssh_username, now=now)


def facts_for(request: RequestFacts, session: Session | None, now: float, *,
              groups_available: bool, client_cert: CertFacts | None = None,
              internal: bool = False, path: str | None = None) -> Facts:
    """The facts of deciding an HTTP ``request`` (or CONNECT, or forward auth's) for
    ``session`` at ``now``. ``path`` replaces the request's (a CONNECT's is empty;
    forward auth decides the forwarded one)."""
    return person_facts(session, now, groups_available=groups_available,
                        method=method_text(request.method),
                        path=request.path if path is None else path,
                        client_ip=request.client_ip, client_cert=client_cert,
                        cors_preflight=is_cors_preflight(request.method, request.headers),
                        internal=internal)


def ssh_facts(session: Session, login: str, client_ip: str, now: float, *,
              groups_available: bool) -> Facts:
    """The facts of an SSH login as ``login``: no path, the method ``SSH`` (no
    ``http_method`` rule matches it)."""
    return person_facts(session, now, groups_available=groups_available,
                        method=SSH_METHOD, path="", client_ip=client_ip,
                        ssh_username=login)


def identity_facts(session: Session | None, now: float, *, groups_available: bool) -> Facts:
    """Who ``session`` is, as ``facts_for`` sees them at ``now``, with no request: what a
    decider keeps beside a remembered decision (``policy.specialize`` decides with it)."""
    return person_facts(session, now, groups_available=groups_available)
