"""The authorization decision for one request on one route: pure, no I/O.

Allow rules are OR-ed (reference, Authentication 5): public access and CORS preflight need
no session; everything else needs a valid one. The result is a ``Decision`` value with
stable reason codes, logged by the caller as one structured event.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.authorize.claims import claims_allowed
from gateway.authorize.email import email_domain
from gateway.config.routes import Route
from gateway.sessions.model import Session

# Stable reason codes: log fields and tests depend on these strings.
PUBLIC = "public"
CORS_PREFLIGHT = "cors-preflight"
USER_UNAUTHENTICATED = "user-unauthenticated"
SESSION_EXPIRED = "session-expired"
ANY_AUTHENTICATED_USER = "any-authenticated-user"
EMAIL_OK = "email-ok"
USER_ID_OK = "user-id-ok"
DOMAIN_OK = "domain-ok"
GROUP_OK = "group-ok"
CLAIM_OK = "claim-ok"
EMAIL_UNAUTHORIZED = "email-unauthorized"
DOMAIN_UNAUTHORIZED = "domain-unauthorized"
GROUPS_UNAUTHORIZED = "groups-unauthorized"
GROUPS_NEED_SERVICE_ACCOUNT = "groups-need-service-account"
CLAIMS_UNAUTHORIZED = "claims-unauthorized"
NO_ALLOW_RULE_MATCHED = "no-allow-rule-matched"


@dataclass(frozen=True, slots=True)
class Decision:
    """Allowed or not, the HTTP status it implies (200, 401 or 403), and why."""

    allowed: bool
    status: int
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        """The first (main) reason code."""
        return self.reasons[0] if self.reasons else ""


def _allow(*reasons: str) -> Decision:
    return Decision(True, 200, reasons)


def is_cors_preflight(method: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    """``OPTIONS`` with non-empty ``Origin`` and ``Access-Control-Request-Method``.

    Exactly ``OPTIONS``: methods are case-sensitive (RFC 9110 9.1), and the decision
    caches skip exactly ``OPTIONS``; an ``options`` request (HTTP/2 lets one through)
    taken for a preflight would leave an allow for the session's next requests."""
    if method != b"OPTIONS":
        return False
    present = {name.lower() for name, value in headers if value.strip()}
    return b"origin" in present and b"access-control-request-method" in present


def evaluate(
    route: Route,
    method: bytes,
    headers: list[tuple[bytes, bytes]],
    session: Session | None,
    now: float,
    groups_available: bool,
    email_refused: str = "",
) -> Decision:
    """Decide whether ``session`` may make this request on ``route`` at time ``now``.

    ``groups_available`` says whether group data exists (``idp_service_account`` is
    configured); without it ``allowed_groups`` never matches. ``session.email`` is the
    address usable for decisions (``gateway.authorize.email``); ``email_refused`` is the
    reason code of the one the provider sent when it was refused, added to the reasons
    of a rule that needed it.
    """
    if route.allow_public_unauthenticated_access:
        return _allow(PUBLIC)
    if route.cors_allow_preflight and is_cors_preflight(method, headers):
        return _allow(CORS_PREFLIGHT)
    if session is None or not session.user_id:
        return Decision(False, 401, (USER_UNAUTHENTICATED,))
    if not session.valid(now):
        return Decision(False, 401, (SESSION_EXPIRED,))
    if route.allow_any_authenticated_user:
        return _allow(ANY_AUTHENTICATED_USER)
    if not route.has_allow_lists:
        return Decision(False, 403, (NO_ALLOW_RULE_MATCHED,))

    allowed: list[str] = []
    denied: list[str] = []
    if route.allowed_users:
        email = session.email.lower()
        if email and any(user.lower() == email for user in route.allowed_users):
            allowed.append(EMAIL_OK)
        elif session.user_id in route.allowed_users:
            allowed.append(USER_ID_OK)
        else:
            denied.append(EMAIL_UNAUTHORIZED)
            if email_refused:
                denied.append(email_refused)
    if route.allowed_domains:
        domain = email_domain(session.email)
        if domain and any(d.lower() == domain for d in route.allowed_domains):
            allowed.append(DOMAIN_OK)
        else:
            denied.append(DOMAIN_UNAUTHORIZED)
            if email_refused and email_refused not in denied:
                denied.append(email_refused)
    if route.allowed_groups:
        if not groups_available:
            denied.append(GROUPS_NEED_SERVICE_ACCOUNT)
        elif not set(route.allowed_groups).isdisjoint(session.groups):
            allowed.append(GROUP_OK)
        else:
            denied.append(GROUPS_UNAUTHORIZED)
    if route.allowed_idp_claims:
        if claims_allowed(route.allowed_idp_claims, session.claims):
            allowed.append(CLAIM_OK)
        else:
            denied.append(CLAIMS_UNAUTHORIZED)
            if email_refused and "email" in route.allowed_idp_claims \
                    and email_refused not in denied:
                denied.append(email_refused)

    if allowed:
        return _allow(*allowed)
    return Decision(False, 403, tuple(denied))
