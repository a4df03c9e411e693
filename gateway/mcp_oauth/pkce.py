"""PKCE (RFC 7636) as OAuth 2.1 and the MCP authorization text require it: ``S256``
only. ``plain`` would put the verifier itself in the authorization request, where an
intercepted request gives the code's redeemer everything; a missing method means
``plain`` (RFC 7636 4.3), so it is refused as well. Pure."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

METHODS = ("S256",)
# RFC 7636 4.1: 43 to 128 characters of the unreserved set
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
# BASE64URL(SHA256(verifier)) without padding: exactly 43 characters
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")


def s256(verifier: str) -> str:
    """The ``S256`` challenge of ``verifier``."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def challenge_problem(challenge: str, method: str) -> str:
    """Why an authorization request's ``code_challenge``/``code_challenge_method`` is
    refused (``""``: it is not)."""
    if not challenge:
        return "code_challenge is required (PKCE with S256)"
    if not method:
        return "code_challenge_method is required and must be S256 (plain is refused)"
    if method not in METHODS:
        return f"code_challenge_method {method[:20]!r} is not supported; use S256"
    if not _CHALLENGE.fullmatch(challenge):
        return "code_challenge is not an S256 challenge (43 base64url characters)"
    return ""


def verified(verifier: str, challenge: str) -> bool:
    """Whether the token request's ``code_verifier`` answers the code's challenge."""
    if not _VERIFIER.fullmatch(verifier):
        return False
    return hmac.compare_digest(s256(verifier), challenge)
