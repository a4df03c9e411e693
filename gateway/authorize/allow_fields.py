"""A route with only the allow fields, decided by its compiled policy and logged with
the reason codes those fields have always had.

The allow fields are compiled into the route's policy like any rule
(``gateway.policy.legacy``: one labelled allow rule per field), so one engine decides
every route. What stays of them here is their vocabulary: the codes of the access log
and the audit stream (``email-ok``, ``domain-unauthorized``, ...), where a route with a
``policy`` logs the rule path instead (``policy-allow-matched allow[0] ...``). A refusal
lists every field that refused, in the fields' order: when the policy refuses a signed-in
person every field refused, so the list follows from which fields the route has.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.authorize.caller import Caller
from gateway.config.routes import Route
from gateway.policy import Verdict

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

# The label of the rule that let the request in (``legacy.legacy_rules``) -> its code;
# ``allowed_users`` is two criteria, the e-mail (``or[0]``) and the user id.
_ALLOWED_BY = {
    "allow_public_unauthenticated_access": PUBLIC,
    "cors_allow_preflight": CORS_PREFLIGHT,
    "allow_any_authenticated_user": ANY_AUTHENTICATED_USER,
    "allowed_users": EMAIL_OK,
    "allowed_domains": DOMAIN_OK,
    "allowed_groups": GROUP_OK,
    "allowed_idp_claims": CLAIM_OK,
}


@dataclass(frozen=True, slots=True)
class CodedDecision:
    """Allowed or not, the HTTP status it implies (200, 401 or 403), and why, in the
    allow fields' codes (not the data plane's ``hook.Decision``, an answer to send)."""

    allowed: bool
    status: int
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        """The first (main) reason code."""
        return self.reasons[0] if self.reasons else ""


def coded_decision(route: Route, verdict: Verdict, caller: Caller | None, now: float
                   ) -> CodedDecision:
    """``verdict`` (the route's compiled policy for ``caller`` at ``now``) in the allow
    fields' codes; the code of an e-mail the provider sent that was refused
    (``Caller.email_refusal``) after the codes of the fields that needed it."""
    if verdict.allowed:
        return CodedDecision(True, 200, (allowed_code(verdict),))
    if caller is None or not caller.user_id:
        return CodedDecision(False, 401, (USER_UNAUTHENTICATED,))
    if not caller.signed_in(now):
        return CodedDecision(False, 401, (SESSION_EXPIRED,))
    return CodedDecision(False, 403, refused_codes(route, caller.groups_available,
                                              caller.email_refusal))


def allowed_code(verdict: Verdict) -> str:
    """The code of the field whose rule let the request in."""
    field, _, which = verdict.rule.partition(".")
    if field == "allowed_users" and which != "or[0]":
        return USER_ID_OK
    return _ALLOWED_BY[field]


def refused_codes(route: Route, groups_available: bool,
                  email_refused: str = "") -> tuple[str, ...]:
    """Every field that refused a signed-in person, in the fields' order."""
    if not route.has_allow_lists:
        return (NO_ALLOW_RULE_MATCHED,)
    denied: list[str] = []
    if route.allowed_users:
        denied.append(EMAIL_UNAUTHORIZED)
        if email_refused:
            denied.append(email_refused)
    if route.allowed_domains:
        denied.append(DOMAIN_UNAUTHORIZED)
        if email_refused and email_refused not in denied:
            denied.append(email_refused)
    if route.allowed_groups:
        denied.append(GROUPS_UNAUTHORIZED if groups_available
                      else GROUPS_NEED_SERVICE_ACCOUNT)
    if route.allowed_idp_claims:
        denied.append(CLAIMS_UNAUTHORIZED)
        if email_refused and "email" in route.allowed_idp_claims \
                and email_refused not in denied:
            denied.append(email_refused)
    return tuple(denied)
