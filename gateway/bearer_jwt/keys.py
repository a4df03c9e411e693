"""A provider's verification keys, read from a JWKS document (RFC 7517).

Each usable key carries the algorithms its type allows, which is the only place an
algorithm comes from: a token's ``alg`` merely picks among them. So ``none`` is never
possible, an HMAC algorithm is never possible (there is no symmetric key: ``oct`` keys
are skipped, and a public key is never used as an HMAC secret), and an RSA key cannot
be used with ``ES256``.

- RSA (at least 2048 bits): RS256/384/512, PS256/384/512;
- EC by curve: P-256 ES256, P-384 ES384, P-521 ES512 (other curves skipped);
- OKP Ed25519: EdDSA (Ed448 and X25519/X448 skipped).

A JWK's own ``alg`` narrows that to the one algorithm (a key published for RS256 does
not verify PS256); ``use: enc`` keys and keys whose ``key_ops`` do not include
``verify`` are skipped; a JWK holding private material (``d``, ``p``...) is skipped (an
issuer that publishes its private key signs nothing we should believe); two keys under
one ``kid`` are both skipped (which one a token means is not knowable). Every skipped key
has its reason, for the log. The document is bounded (``MAX_KEYS``). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from jwt.exceptions import InvalidKeyError

from gateway.bearer_jwt.jws import Malformed, json_object

MAX_KEYS = 50  # real providers publish 1-10 (the next, the current and the last key)
MAX_JWKS_BYTES = 256 * 1024
MIN_RSA_BITS = 2048

RSA_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
OKP_ALGS = {"Ed25519": "EdDSA"}
_PRIVATE = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


@dataclass(frozen=True, slots=True)
class Key:
    kid: str
    key: PublicKey
    algorithms: tuple[str, ...]  # what a token signed with this key may say in ``alg``


@dataclass(frozen=True, slots=True)
class KeySet:
    """One provider's usable keys by ``kid`` (``""`` for a key without one), and why
    each other key was skipped. ``issuer`` is set only where the issuer is learned with
    the keys (``kubernetes:///`` from the API server's discovery)."""

    provider: str
    keys: Mapping[str, Key] = field(default_factory=lambda: MappingProxyType({}))
    skipped: tuple[str, ...] = ()
    issuer: str = ""

    def lookup(self, kid: str) -> Key | None:
        """The key a token's ``kid`` names; a token without ``kid`` gets the set's only
        key, if it has just one (some single-key issuers send none)."""
        if kid:
            return self.keys.get(kid)
        if len(self.keys) == 1:
            return next(iter(self.keys.values()))
        return None


class JwksError(ValueError):
    """The document is not a JWKS at all (the last good keys stay)."""


def _public(jwk: Mapping[str, Any]) -> tuple[PublicKey, tuple[str, ...]]:
    """The key and the algorithms its type allows (``ValueError`` saying why not)."""
    kty = jwk.get("kty")
    data = dict(jwk)
    if kty == "RSA":
        key: Any = RSAAlgorithm.from_jwk(data)
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError("not an RSA public key")
        if key.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key of {key.key_size} bits (at least {MIN_RSA_BITS})")
        return key, RSA_ALGS
    if kty == "EC":
        alg = EC_ALGS.get(str(jwk.get("crv")))
        if alg is None:
            raise ValueError(f"EC curve {str(jwk.get('crv'))[:20]!r} is not accepted")
        key = ECAlgorithm.from_jwk(data)
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError("not an EC public key")
        return key, (alg,)
    if kty == "OKP":
        alg = OKP_ALGS.get(str(jwk.get("crv")))
        if alg is None:
            raise ValueError(f"OKP curve {str(jwk.get('crv'))[:20]!r} is not accepted")
        key = OKPAlgorithm.from_jwk(data)
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise ValueError("not an Ed25519 public key")
        return key, (alg,)
    raise ValueError(f"key type {str(kty)[:20]!r} is not accepted")


def _one(jwk: Any) -> Key:
    if not isinstance(jwk, dict):
        raise ValueError("not a JSON object")
    if jwk.get("kty") == "oct":
        raise ValueError("symmetric keys are never accepted")
    if any(name in jwk for name in _PRIVATE):
        raise ValueError("it holds private key material")
    use = jwk.get("use")
    if use is not None and use != "sig":
        raise ValueError(f"use is {str(use)[:20]!r}, not sig")
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise ValueError("key_ops does not include verify")
    kid = jwk.get("kid", "")
    if not isinstance(kid, str):
        raise ValueError("kid is not a string")
    try:
        key, algorithms = _public(jwk)
    except (InvalidKeyError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(str(exc)[:120] or type(exc).__name__) from None
    alg = jwk.get("alg")
    if alg is not None:
        if alg not in algorithms:
            raise ValueError(f"its alg {str(alg)[:20]!r} does not fit a {jwk['kty']} key")
        algorithms = (alg,)
    return Key(kid, key, algorithms)


def key_set(provider: str, document: bytes, issuer: str = "") -> KeySet:
    """The usable keys of a JWKS document (``JwksError`` when it is not one at all)."""
    if len(document) > MAX_JWKS_BYTES:
        raise JwksError(f"the key set is larger than {MAX_JWKS_BYTES // 1024} KiB")
    try:
        data = json_object(document, "key set")
    except Malformed as exc:
        raise JwksError(exc.description) from None
    entries = data.get("keys")
    if not isinstance(entries, list):
        raise JwksError("the key set has no keys list")
    keys: dict[str, Key] = {}
    skipped: list[str] = []
    doubled: set[str] = set()
    for index, jwk in enumerate(entries):
        if index >= MAX_KEYS:
            skipped.append(f"keys past the first {MAX_KEYS} ({len(entries) - index}) ignored")
            break
        try:
            key = _one(jwk)
        except ValueError as exc:
            kid = jwk.get("kid") if isinstance(jwk, dict) else None
            name = f"kid {kid[:64]!r}" if isinstance(kid, str) else f"key #{index}"
            skipped.append(f"{name}: {exc}")
            continue
        if key.kid in keys or key.kid in doubled:
            keys.pop(key.kid, None)
            doubled.add(key.kid)
            skipped.append(f"kid {key.kid[:64]!r}: more than one key has it (none is used)")
            continue
        keys[key.kid] = key
    return KeySet(provider, MappingProxyType(keys), tuple(skipped), issuer)


def key_set_from_json(provider: str, jwks: Mapping[str, Any]) -> KeySet:
    """``key_set`` for an already decoded document (tests, presets)."""
    return key_set(provider, json.dumps(jwks).encode())
