"""The signed identity passed upstream (``X-Gateway-Jwt-Assertion``) and its key set.

Reference, Authentication 6 and the ``signing_key`` setting: the assertion is signed with
``signing_key``/``signing_key_algorithm`` and verifiable with the JWKS endpoint, which is
empty when no key is configured (a per-process ephemeral key signs instead). The ``kid``
is the hex SHA-256 of the RFC 7638 thumbprint input of the public JWK, as the original
(its test key gives kid ``5b419ade...813c``). Claim headers are unsigned copies. Both
are made of a ``Caller`` (who is asking), with or without a session behind it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from gateway.authorize.caller import Caller
from gateway.sessions.sealed import b64url

LIFETIME = 300.0
RENEW_BEFORE = 30.0
CACHE_SIZE = 10_000
ALGORITHMS = ("ES256", "EdDSA", "RS256")

SigningKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey


def _b64url_int(value: int, length: int | None = None) -> str:
    size = length if length is not None else max(1, (value.bit_length() + 7) // 8)
    return b64url(value.to_bytes(size, "big"))


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the RFC 7638 thumbprint input (required members, sorted, compact)."""
    required = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"),
                "RSA": ("e", "kty", "n")}[str(jwk["kty"])]
    canonical = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"),
                           sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _generate(algorithm: str) -> SigningKey:
    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _load(key_pem: bytes, algorithm: str) -> SigningKey:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if algorithm == "ES256":
        if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
            return key
    elif algorithm == "EdDSA":
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key
    elif isinstance(key, rsa.RSAPrivateKey):
        return key
    raise ValueError(f"the signing key does not suit {algorithm} (ES256 needs a P-256 EC key, "
                     "EdDSA an Ed25519 key, RS256 an RSA key)")


def _public_members(key: SigningKey) -> dict[str, str]:
    """JWK members after ``kid``, in the original's order."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        numbers = key.public_key().public_numbers()
        return {"crv": "P-256", "alg": "ES256", "x": _b64url_int(numbers.x, 32),
                "y": _b64url_int(numbers.y, 32)}
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
        return {"crv": "Ed25519", "alg": "EdDSA", "x": b64url(raw)}
    rsa_numbers = key.public_key().public_numbers()
    return {"alg": "RS256", "n": _b64url_int(rsa_numbers.n), "e": _b64url_int(rsa_numbers.e)}


@dataclass(frozen=True, slots=True)
class _Signed:
    token: str
    exp: float
    identity: tuple[object, ...]


class AssertionSigner:
    """Signs per-caller, per-audience assertions; caches each until shortly before expiry."""

    def __init__(self, key_pem: bytes | None, algorithm: str, issuer: str, *,
                 clock: Callable[[], float] = time.time) -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unsupported signing algorithm {algorithm!r}")
        self.algorithm = algorithm
        self.issuer = issuer
        self.ephemeral = key_pem is None
        self._key = _generate(algorithm) if key_pem is None else _load(key_pem, algorithm)
        self._clock = clock
        kty = {"ES256": "EC", "EdDSA": "OKP", "RS256": "RSA"}[algorithm]
        members = _public_members(self._key)
        self.kid = jwk_thumbprint({"kty": kty, **members})
        self._jwk = {"use": "sig", "kty": kty, "kid": self.kid, **members}
        self._cache: OrderedDict[tuple[str, str, str, str], _Signed] = OrderedDict()

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK (EC members: use, kty, kid, crv, alg, x, y)."""
        return dict(self._jwk)

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The key set served on the JWKS endpoint; empty for an ephemeral key."""
        return {"keys": [] if self.ephemeral else [self.public_jwk()]}

    def public_key_b64(self) -> str:
        """Base64 DER (SubjectPublicKeyInfo) of the public key, for the start-up log."""
        der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return base64.b64encode(der).decode("ascii")

    def sign(self, caller: Caller, audience: str) -> str:
        """The assertion for ``caller`` toward the route host ``audience``."""
        now = self._clock()
        groups = caller.assertion_groups
        identity = (caller.user_id, caller.email, groups, caller.name, caller.expires_at)
        # one per session; a caller with none (a bearer token) is one per user
        key = (caller.provider, caller.session_id, caller.user_id, audience)
        cached = self._cache.get(key)
        if cached is not None and cached.identity == identity and now < cached.exp - RENEW_BEFORE:
            self._cache.move_to_end(key)
            return cached.token
        exp = min(now + LIFETIME, caller.expires_at)
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": audience, "sub": caller.user_id,
            "user": caller.user_id, "email": caller.email, "groups": list(groups),
            "iat": int(now), "exp": int(exp), "jti": secrets.token_urlsafe(16),
        }
        if caller.provider:  # the id of the identity provider that vouches for them
            claims["idp"] = caller.provider
        if caller.name:
            claims["name"] = caller.name
        token = jwt.encode(claims, self._key, algorithm=self.algorithm,
                           headers={"kid": self.kid})
        self._cache[key] = _Signed(token, float(int(exp)), identity)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return token


_CALLER_FIELDS: dict[str, Callable[[Caller], tuple[str, ...]]] = {
    "email": lambda s: (s.email,) if s.email else (),
    "user": lambda s: (s.user_id,) if s.user_id else (),
    "sub": lambda s: (s.user_id,) if s.user_id else (),
    "groups": lambda s: s.groups,
    "name": lambda s: (s.name,) if s.name else (),
    "idp": lambda s: (s.provider,) if s.provider else (),
}


def _header_value(values: tuple[str, ...]) -> bytes:
    text = ",".join(values)
    for char in "\r\n\0":
        text = text.replace(char, " ")
    return text.encode("utf-8")


def claim_headers(mapping: Mapping[str, str], caller: Caller
                  ) -> tuple[tuple[bytes, bytes], ...]:
    """``jwt_claims_headers`` (header name -> claim) applied to ``caller``.

    ``email``, ``user``, ``sub``, ``groups``, ``name`` and ``idp`` (the id of the
    identity provider) come from the caller's fields
    (as in the signed assertion) when set, otherwise from ``caller.claims``; lists are
    joined with ``,``; a missing or empty claim gives no header.
    """
    out: list[tuple[bytes, bytes]] = []
    for header, claim in mapping.items():
        field = _CALLER_FIELDS.get(claim)
        values = (field(caller) if field is not None else ()) or tuple(
            caller.claims.get(claim, ()))
        if values:
            out.append((header.encode("latin-1"), _header_value(values)))
    return tuple(out)
