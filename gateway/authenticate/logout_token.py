"""The checks of an OpenID Connect Back-Channel Logout 1.0 logout token (its section
2.6), pure: over the JWS header and claims once the signature has been verified
against the provider's keys (``oidc.Provider.logout_token_claims``), so the same checks
serve whichever verifier supplies them.

Refused, each naming its check: a ``typ`` that names another kind of token (absent,
``logout+jwt`` and the generic ``JWT`` are taken: the specification recommends explicit
typing but does not require it, providers that predate it send ``JWT``, and the required
``events`` member with no ``nonce`` already keeps an ID token from passing), a
``crit`` header (we understand no extension), ``alg`` ``none``; ``iss`` not
exactly the provider's; ``aud`` not naming the client id; no ``iat``, or one beyond the
skew in the future; expired beyond the skew (its ``exp``, else ``NO_EXP_LIFETIME``
after ``iat``); no ``jti``; neither ``sid``
nor ``sub`` (or one that is not a string); no ``events`` object with the back-channel
logout member, whose value is an object; a ``nonce`` (which would make an ID token pass
for a logout token).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EVENT = "http://schemas.openid.net/event/backchannel-logout"
SKEW = 60.0  # seconds of clock difference allowed, as for ID tokens
TYPES = ("logout+jwt", "application/logout+jwt", "jwt")
# A token without ``exp`` (required since the specification's final text; some providers
# left it out) is valid this long after its ``iat``.
NO_EXP_LIFETIME = 120.0


class LogoutTokenError(ValueError):
    """A check the token failed: ``check`` is its short name (logs, metrics), the
    message says what was wrong without echoing the token."""

    def __init__(self, check: str, description: str) -> None:
        super().__init__(description)
        self.check = check
        self.description = description


@dataclass(frozen=True, slots=True)
class Logout:
    """What a valid logout token asks: end the provider session ``sid`` (when given),
    else every session of ``sub`` signed in by ``issuer``."""

    issuer: str
    sid: str
    sub: str
    jti: str
    issued_at: float
    expires_at: float


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LogoutTokenError(name, f"the logout token has no numeric {name} claim")
    return float(value)


def _text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name, "")
    if not isinstance(value, str):
        raise LogoutTokenError(name, f"the logout token's {name} claim is not a string")
    return value


def check_logout_token(header: Mapping[str, Any], claims: Mapping[str, Any], *,
                       issuer: str, client_id: str, now: float,
                       skew: float = SKEW) -> Logout:
    """The logout a verified token asks for; ``LogoutTokenError`` for the first check
    it fails."""
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in TYPES):
        raise LogoutTokenError("typ", "the token's typ header names another kind of "
                               "token (a logout token is logout+jwt, or JWT)")
    if "crit" in header:
        raise LogoutTokenError("crit", "the token names critical header extensions")
    if str(header.get("alg", "none")).lower() == "none":
        raise LogoutTokenError("alg", "the token is not signed")
    if claims.get("iss") != issuer:
        raise LogoutTokenError("iss", "the token's iss is not the provider's issuer")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or client_id not in audiences:
        raise LogoutTokenError("aud", "the token's aud does not name this client")
    issued_at = _number(claims, "iat")
    if issued_at > now + skew:
        raise LogoutTokenError("iat", "the token's iat is in the future")
    # (providers that predate its requirement: an age bound instead)
    expires_at = _number(claims, "exp") if "exp" in claims else issued_at + NO_EXP_LIFETIME
    if expires_at + skew <= now:
        raise LogoutTokenError("exp", "the token has expired")
    jti = _text(claims, "jti")
    if not jti:
        raise LogoutTokenError("jti", "the logout token has no jti claim")
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(EVENT), dict):
        raise LogoutTokenError("events", "the token's events claim does not declare a "
                               "back-channel logout")
    if "nonce" in claims:
        raise LogoutTokenError("nonce", "a logout token must not carry a nonce")
    sid, sub = _text(claims, "sid"), _text(claims, "sub")
    if not sid and not sub:
        raise LogoutTokenError("sid_sub", "the logout token names neither a sid nor a sub")
    return Logout(issuer, sid, sub, jti, issued_at, expires_at)
