"""The allow fields' own decision, as the gateway made it before they were compiled into
the route's policy: kept as the oracle the compiled fields are held to
(``test_policy_legacy``'s property test), not used by the gateway. Pure, no I/O.

Allow rules are OR-ed (reference, Authentication 5): public access and CORS preflight need
no session; everything else needs a valid one. The result is a ``CodedDecision`` value with
stable reason codes, logged by the caller as one structured event.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.authorize.allow_fields import (
    ANY_AUTHENTICATED_USER,
    CLAIM_OK,
    CLAIMS_UNAUTHORIZED,
    CORS_PREFLIGHT,
    DOMAIN_OK,
    DOMAIN_UNAUTHORIZED,
    EMAIL_OK,
    EMAIL_UNAUTHORIZED,
    GROUP_OK,
    GROUPS_NEED_SERVICE_ACCOUNT,
    GROUPS_UNAUTHORIZED,
    NO_ALLOW_RULE_MATCHED,
    PUBLIC,
    SESSION_EXPIRED,
    USER_ID_OK,
    USER_UNAUTHENTICATED,
    CodedDecision,
)
from gateway.authorize.decide import is_cors_preflight
from gateway.authorize.email import is_mailbox
from gateway.config.routes import Route
from gateway.sessions.model import Session


def claims_allowed(
    required: Mapping[str, tuple[str, ...]], have: Mapping[str, tuple[str, ...]]
) -> bool:
    """True when, for any required claim, some required value is among the user's values."""
    for key, values in required.items():
        present = have.get(key)
        if present and not set(values).isdisjoint(present):
            return True
    return False


def email_domain(address: str) -> str:
    """The domain of a mailbox, lower-cased; ``""`` when ``address`` is not one."""
    if not is_mailbox(address):
        return ""
    return address.rpartition("@")[2].lower()


def _allow(*reasons: str) -> CodedDecision:
    return CodedDecision(True, 200, reasons)


def evaluate(
    route: Route,
    method: bytes,
    headers: list[tuple[bytes, bytes]],
    session: Session | None,
    now: float,
    groups_available: bool,
    email_refused: str = "",
) -> CodedDecision:
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
        return CodedDecision(False, 401, (USER_UNAUTHENTICATED,))
    if not session.valid(now):
        return CodedDecision(False, 401, (SESSION_EXPIRED,))
    if route.allow_any_authenticated_user:
        return _allow(ANY_AUTHENTICATED_USER)
    if not route.has_allow_lists:
        return CodedDecision(False, 403, (NO_ALLOW_RULE_MATCHED,))

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
    return CodedDecision(False, 403, tuple(denied))
