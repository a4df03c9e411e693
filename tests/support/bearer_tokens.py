"""Keys, key sets and tokens for the bearer JWT tests: an issuer in a few functions.

``sign`` signs exactly the header and payload bytes it is given (duplicate members,
odd headers and all), so the adversarial table can build what no well-behaved library
would; ``mint`` is the common case. Keys are made once per test process (RSA is slow to
generate).
"""

from __future__ import annotations

import base64
import json
import time
from functools import cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm, get_default_algorithms

NOW = 1_790_000_000.0  # 2026-09-21, a fixed instant for pure tests
ISSUER = "https://ci.example.test"
AUDIENCE = "https://gateway.example.test"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def rsa_key(name: str = "rsa-1", bits: int = 2048) -> rsa.RSAPrivateKey:
    """One key per name for the whole test process."""
    return _rsa(name, bits)


def ec_key(name: str = "ec-256", curve: str = "P-256") -> ec.EllipticCurvePrivateKey:
    return _ec(name, curve)


def ed_key(name: str = "ed-1") -> ed25519.Ed25519PrivateKey:
    return _ed(name)


@cache
def _rsa(name: str, bits: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


@cache
def _ec(name: str, curve: str) -> ec.EllipticCurvePrivateKey:
    curves: dict[str, ec.EllipticCurve] = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(),
                                          "P-521": ec.SECP521R1(),
                                          "secp256k1": ec.SECP256K1()}
    return ec.generate_private_key(curves[curve])


@cache
def _ed(name: str) -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(private: Any, kid: str, **extra: Any) -> dict[str, Any]:
    """The public JWK of ``private`` under ``kid`` (and ``extra`` members)."""
    public = private.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, "use": "sig", **extra}


def jwks(*keys: tuple[Any, str]) -> dict[str, Any]:
    return {"keys": [public_jwk(private, kid) for private, kid in keys]}


def discovery_document(issuer: str) -> bytes:
    """A bearer issuer's OpenID discovery document, its keys at ``/.well-known/jwks``
    (what both test issuers serve)."""
    return json.dumps({
        "issuer": issuer, "jwks_uri": f"{issuer}/.well-known/jwks",
        "response_types_supported": ["id_token"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        "subject_types_supported": ["public"]}).encode()


def jwks_bytes(*keys: tuple[Any, str]) -> bytes:
    return json.dumps(jwks(*keys)).encode()


def sign(header: bytes | dict[str, Any], payload: bytes | dict[str, Any], private: Any,
         alg: str) -> str:
    """A compact JWS over exactly these header and payload bytes."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signing_input = f"{b64(head)}.{b64(body)}".encode()
    algorithm = get_default_algorithms()[alg]
    key = algorithm.prepare_key(private) if alg.startswith("HS") else private
    return f"{signing_input.decode()}.{b64(algorithm.sign(signing_input, key))}"


def claims(now: float = NOW, **extra: Any) -> dict[str, Any]:
    """A GitHub Actions-shaped payload, valid for 5 minutes from ``now``."""
    base: dict[str, Any] = {
        "iss": ISSUER, "aud": AUDIENCE, "sub": "repo:example/app:ref:refs/heads/main",
        "iat": int(now), "nbf": int(now) - 5, "exp": int(now) + 300, "jti": "j-1",
        "repository": "example/app", "ref": "refs/heads/main", "workflow": "deploy",
    }
    base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def mint(private: Any = None, kid: str = "rsa-1", alg: str = "RS256",
         now: float | None = None, header: dict[str, Any] | None = None,
         **extra: Any) -> str:
    private = private if private is not None else rsa_key()
    head = {"alg": alg, "typ": "JWT", "kid": kid, **(header or {})}
    return sign(head, claims(now if now is not None else NOW, **extra), private, alg)


def mint_now(private: Any = None, kid: str = "rsa-1", alg: str = "RS256",
             **extra: Any) -> str:
    """``mint`` at the wall clock (integration tests against a running source)."""
    return mint(private, kid, alg, now=time.time(), **extra)
