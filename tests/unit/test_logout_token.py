"""Back-channel logout tokens (OpenID Connect Back-Channel Logout 1.0, section 2.6): the
claim checks as a table over the pure ``check_logout_token``, and the signature through
the OIDC client's key machinery (``Provider.logout_token_claims``) with a real key set
and no network."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from twisted.internet.defer import ensureDeferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.logout_token import (
    EVENT,
    Logout,
    LogoutTokenError,
    check_logout_token,
)
from gateway.authenticate.oidc import OIDCError, Provider
from gateway.sessions.sealed import b64url as b64

NOW = 1_700_000_000.0
ISSUER = "https://idp.example.com"
CLIENT = "gateway"
HEADER = {"alg": "RS256", "kid": "k1", "typ": "logout+jwt"}


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"iss": ISSUER, "aud": CLIENT, "iat": NOW - 5, "exp": NOW + 115,
                            "jti": "j-1", "sid": "s-1", "sub": "alice",
                            "events": {EVENT: {}}}
    for name, value in changes.items():
        if value is DROP:
            base.pop(name, None)
        else:
            base[name] = value
    return base


DROP = object()

# (case, header changes, claim changes, the check that fails)
REFUSED: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("missing events", {}, {"events": DROP}, "events"),
    ("events without the logout member", {}, {"events": {"other": {}}}, "events"),
    ("events member not an object", {}, {"events": {EVENT: "yes"}}, "events"),
    ("events not an object", {}, {"events": [EVENT]}, "events"),
    ("nonce present", {}, {"nonce": "n"}, "nonce"),
    ("wrong aud", {}, {"aud": "someone-else"}, "aud"),
    ("aud list without us", {}, {"aud": ["a", "b"]}, "aud"),
    ("no aud", {}, {"aud": DROP}, "aud"),
    ("wrong iss", {}, {"iss": "https://idp.example.com/"}, "iss"),
    ("no iss", {}, {"iss": DROP}, "iss"),
    ("no sid and no sub", {}, {"sid": DROP, "sub": DROP}, "sid_sub"),
    ("empty sid and sub", {}, {"sid": "", "sub": ""}, "sid_sub"),
    ("sid not a string", {}, {"sid": 7}, "sid"),
    ("expired", {}, {"exp": NOW - 61}, "exp"),
    ("no exp, and older than its lifetime", {}, {"exp": DROP, "iat": NOW - 181}, "exp"),
    ("iat in the future", {}, {"iat": NOW + 61}, "iat"),
    ("no iat", {}, {"iat": DROP}, "iat"),
    ("iat not a number", {}, {"iat": "now"}, "iat"),
    ("iat a boolean", {}, {"iat": True}, "iat"),
    ("no jti", {}, {"jti": DROP}, "jti"),
    ("an access token's typ", {"typ": "at+jwt"}, {}, "typ"),
    ("a security event token's typ", {"typ": "secevent+jwt"}, {}, "typ"),
    ("crit header", {"crit": ["exp"]}, {}, "crit"),
    ("alg none", {"alg": "none"}, {}, "alg"),
]


class ClaimChecks(SynchronousTestCase):
    def check(self, header: dict[str, Any], body: dict[str, Any]) -> Logout:
        return check_logout_token(header, body, issuer=ISSUER, client_id=CLIENT, now=NOW)

    def test_valid(self) -> None:
        self.assertEqual(self.check(HEADER, claims()),
                         Logout(ISSUER, "s-1", "alice", "j-1", NOW - 5, NOW + 115))

    def test_accepted_variants(self) -> None:
        """No typ, the media-type spelling, the generic JWT (providers that predate
        explicit typing; keeping it out broke their logouts: the events member with no
        nonce is what tells a logout token from an ID token), an aud list naming us, sid
        alone, sub alone, clocks apart within the skew, no exp from a provider that
        predates it (then valid 120 s after iat, and the skew)."""
        for header, body in [
                ({"alg": "RS256"}, claims()),
                ({**HEADER, "typ": "application/logout+jwt"}, claims()),
                ({**HEADER, "typ": "JWT"}, claims()),
                (HEADER, claims(aud=["other", CLIENT])),
                (HEADER, claims(sub=DROP)),
                (HEADER, claims(sid=DROP)),
                (HEADER, claims(iat=NOW + 59, exp=NOW - 59)),
                (HEADER, claims(exp=DROP, iat=NOW - 179))]:  # no exp: an age bound
            with self.subTest(header=header, body=body):
                self.check(header, body)

    def test_refused(self) -> None:
        for case, header_changes, changes, check in REFUSED:
            with self.subTest(case):
                with self.assertRaises(LogoutTokenError) as caught:
                    self.check({**HEADER, **header_changes}, claims(**changes))
                self.assertEqual(caught.exception.check, check, case)
                self.assertNotIn("s-1", str(caught.exception))  # never echoes values


def provider_with(keys: dict[str, Any], clock: Clock, issuer: str = ISSUER,
                  client_id: str = CLIENT) -> Provider:
    provider = Provider(clock, issuer, client_id, "secret", ("openid",), {}, "https://cb")
    provider._metadata = {"issuer": issuer, "jwks_uri": f"{issuer}/jwks",
                          "authorization_endpoint": "x", "token_endpoint": "y"}
    provider._keys = keys
    provider._keys_read = clock.seconds()
    return provider


class Signature(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.provider = provider_with({"k1": jwt.PyJWK({**public, "kid": "k1"})}, self.clock)
        self.fetches = 0

        async def no_network(url: str, headers: Any = None) -> Any:
            self.fetches += 1
            return {"keys": []}
        self.provider._get_json = no_network  # type: ignore[method-assign]

    def verify(self, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        result: list[Any] = []
        ensureDeferred(self.provider.logout_token_claims(token)).addBoth(result.append)
        self.assertEqual(len(result), 1)
        if isinstance(result[0], Exception) or hasattr(result[0], "raiseException"):
            result[0].raiseException()
        return tuple(result[0])  # type: ignore[return-value]

    def test_good_signature(self) -> None:
        token = jwt.encode(claims(), self.private, "RS256", headers=HEADER)
        header, body = self.verify(token)
        self.assertEqual(body["sid"], "s-1")
        self.assertEqual(header["typ"], "logout+jwt")
        check_logout_token(header, body, issuer=ISSUER, client_id=CLIENT, now=NOW)

    def test_bad_signature(self) -> None:
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        token = jwt.encode(claims(), other, "RS256", headers=HEADER)
        with self.assertRaisesRegex(OIDCError, "signature"):
            self.verify(token)

    def test_tampered_claims(self) -> None:
        token = jwt.encode(claims(), self.private, "RS256", headers=HEADER)
        head, _, sig = token.split(".")
        forged = b64(json.dumps(claims(sub="mallory")).encode())
        with self.assertRaisesRegex(OIDCError, "signature"):
            self.verify(f"{head}.{forged}.{sig}")

    def test_alg_none_and_hmac_with_the_public_key_refused(self) -> None:
        unsigned = jwt.encode(claims(), None, "none", headers={"kid": "k1"})
        with self.assertRaises(OIDCError):
            self.verify(unsigned)
        public_pem = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        signing = (b64(json.dumps({"alg": "HS256", "kid": "k1"}).encode()) + "." +
                   b64(json.dumps(claims()).encode()))
        mac = hmac.new(public_pem, signing.encode(), hashlib.sha256).digest()
        with self.assertRaises(OIDCError):  # a MAC keyed with the public key
            self.verify(f"{signing}.{b64(mac)}")
        ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        with self.assertRaises(OIDCError):  # another algorithm than the key's
            self.verify(jwt.encode(claims(), ec_pem, "ES256", headers={"kid": "k1"}))

    def test_unknown_kid_reads_the_keys_at_most_once_a_minute(self) -> None:
        token = jwt.encode(claims(), self.private, "RS256",
                           headers={**HEADER, "kid": "k-unknown"})
        self.clock.advance(61)
        for _ in range(5):
            with self.assertRaisesRegex(OIDCError, "unknown key"):
                self.verify(token)
        self.assertEqual(self.fetches, 1)
        self.clock.advance(61)
        with self.assertRaises(OIDCError):
            self.verify(token)
        self.assertEqual(self.fetches, 2)
