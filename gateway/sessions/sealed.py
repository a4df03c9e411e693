"""Sealed tokens: small JSON payloads encrypted and authenticated (ChaCha20-Poly1305),
bound to a purpose and an expiry. Used for the session cookie (``cookie_secret``) and
for everything that travels between the route host and the authenticate host
(``shared_secret``): the sign-in target, the OAuth ``state``, the session hand-off."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

_NONCE = 12


def b64url(data: bytes) -> str:
    """base64url without padding (JWS, PKCE, sealed tokens)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sealer:
    """Built once per snapshot and key (the AEAD object is reused for every request)."""

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)

    def seal(self, purpose: str, payload: dict[str, Any], expires_at: float) -> str:
        body = json.dumps({**payload, "exp": int(expires_at)}, separators=(",", ":")).encode()
        nonce = os.urandom(_NONCE)
        return b64url(nonce + self._aead.encrypt(nonce, body, purpose.encode()))

    @staticmethod
    def token_id(token: str) -> str:
        """What tells one sealed value from every other: its random nonce (the same
        for every base64 spelling of the token). Only meaningful after ``open``."""
        try:
            return _unb64(token)[:_NONCE].hex()
        except ValueError:
            return ""

    def open(self, purpose: str, token: str, now: float) -> dict[str, Any] | None:
        """The payload, or None if the token is malformed, tampered with, sealed for
        another purpose or expired."""
        if not token or len(token) > 8192:
            return None
        try:
            raw = _unb64(token)
            if len(raw) <= _NONCE:
                return None
            body = self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], purpose.encode())
            payload = json.loads(body)
        except (InvalidTag, ValueError, TypeError):
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int):
            return None
        if payload["exp"] <= now:
            return None
        return payload
