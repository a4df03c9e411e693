"""Fuzz target: bearer JWTs from outside issuers (``gateway.bearer_jwt``): the request's
``Authorization`` header, the strict compact JWS parser, ``verify`` and ``explain``, and
a JWKS document read as a key set.

Input: one selector byte, then bytes: an ``Authorization`` header value, whose bearer
token (or the text itself) is verified against a fixed Ed25519 key (Ed25519 signatures
are deterministic, so the corpus holds the exact tokens that key signed); with the
selector's low bit set, the bytes are also read as a JWKS document.

Contract:

- nothing raises: every token is ``Verified`` or ``Refused``, every document a
  ``KeySet`` or ``JwksError``;
- ``Verified`` only for a token this key signed (``KNOWN``): one spelling per token
  (canonical base64url, no duplicate members), so any change to a signed token is
  refused;
- ``explain`` agrees: it passes every check exactly when ``verify`` verifies, and its
  first failed check is ``verify``'s;
- the ``WWW-Authenticate`` value is printable ASCII with two quoted strings and never
  holds a piece of the token.
"""

from __future__ import annotations

import base64
import contextlib
import json

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from jwt.algorithms import OKPAlgorithm

    from gateway.bearer_jwt.expect import BearerExpectations
    from gateway.bearer_jwt.header import bearer_jwt
    from gateway.bearer_jwt.keys import JwksError, key_set, key_set_from_json
    from gateway.bearer_jwt.verify import Refused, Verified, explain, verify

PRIVATE = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
KEYS = key_set_from_json("fuzz", {"keys": [
    {**OKPAlgorithm.to_jwk(PRIVATE.public_key(), as_dict=True), "kid": "k1", "use": "sig"}]})
EXPECT = BearerExpectations("fuzz", "https://issuer.test", ("gw",))
NOW = 1_700_000_000.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(payload: dict[str, object], header: dict[str, object] | None = None) -> str:
    head = b64(json.dumps(header or {"alg": "EdDSA", "kid": "k1"}).encode())
    body = b64(json.dumps(payload).encode())
    return f"{head}.{body}.{b64(PRIVATE.sign(f'{head}.{body}'.encode()))}"


GOOD = {"iss": "https://issuer.test", "aud": "gw", "sub": "s", "exp": NOW + 60,
        "nbf": NOW - 1, "iat": NOW - 1, "email": "a@b.test", "email_verified": True,
        "kubernetes.io": {"namespace": "n"}, "groups": ["g"]}
KNOWN = frozenset({signed(GOOD), signed({**GOOD, "aud": ["x", "gw"]})})


def check(token: str) -> None:
    result = verify(token, KEYS, EXPECT, NOW)
    outcomes, verified = explain(token, KEYS, EXPECT, NOW)
    if isinstance(result, Verified):
        assert token in KNOWN, describe(token)
        assert verified == result and all(o.passed for o in outcomes), describe(token)
        return
    assert isinstance(result, Refused), describe(token)
    failed = [o for o in outcomes if not o.passed]
    assert verified is None and failed, describe(token)
    assert failed[0].check == result.check, describe((token, failed[0], result))
    header = result.www_authenticate()
    assert header.isascii() and header.isprintable() and header.count('"') == 4, \
        describe((token, header))
    for piece in token.split("."):
        if len(piece) >= 12:
            assert piece[:12] not in header, describe((token, header))


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    raw = data[1:]
    found = bearer_jwt([(b"authorization", raw)])
    if isinstance(found, str) and found:
        check(found)
    check(raw.decode("latin-1"))
    if data[0] & 1:
        with contextlib.suppress(JwksError):  # the only refusal a document may get
            key_set("fuzz", raw)


if __name__ == "__main__":
    fuzz(TestOneInput)
