"""``Facts`` for a decision, from the session as decisions see it and the request.

A session that is missing, has no user or has expired gives the facts of someone not
signed in: no identity criterion matches them, whatever the session still holds.
"""

from __future__ import annotations

from typing import Protocol

from gateway.policy import CertFacts, Facts
from gateway.sessions.model import Session

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


def facts_for(request: RequestFacts, session: Session | None, now: float, *,
              groups_available: bool, client_cert: CertFacts | None = None,
              internal: bool = False, path: str | None = None) -> Facts:
    """The facts of deciding ``request`` for ``session`` (as ``Decider.decision_session``
    gives it: no refused e-mail, directory groups) at ``now``. ``path`` replaces the
    request's (a CONNECT's is empty; forward auth decides the forwarded one)."""
    cors = is_cors_preflight(request.method, request.headers)
    where = request.path if path is None else path
    if session is None or not session.user_id or not session.valid(now):
        return Facts(method=method_text(request.method), path=where,
                     client_ip=request.client_ip, client_cert=client_cert,
                     cors_preflight=cors, internal=internal, now=now)
    return Facts(authenticated=True, user_id=session.user_id, email=session.email,
                 groups=session.groups, groups_available=groups_available,
                 claims=session.claims, method=method_text(request.method), path=where,
                 client_ip=request.client_ip, client_cert=client_cert, cors_preflight=cors,
                 internal=internal, now=now)


def identity_facts(session: Session | None, now: float, *, groups_available: bool) -> Facts:
    """Who ``session`` is, as ``facts_for`` sees them at ``now``, with no request: what a
    decider keeps beside a remembered decision (``ppl.specialize`` decides with it)."""
    if session is None or not session.user_id or not session.valid(now):
        return Facts(now=now)
    return Facts(authenticated=True, user_id=session.user_id, email=session.email,
                 groups=session.groups, groups_available=groups_available,
                 claims=session.claims, now=now)
