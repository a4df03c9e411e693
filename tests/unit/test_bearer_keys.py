"""A provider's key set from its JWKS document (issue 42): usable keys with the
algorithms their type allows, every other key skipped with its reason, a bound on the
document, and the verification cache in front of ``verify``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.bearer_jwt import verifier as verifier_module
from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.header import bearer_jwt
from gateway.bearer_jwt.keys import MAX_KEYS, JwksError, KeySet, key_set, key_set_from_json
from gateway.bearer_jwt.verifier import Verifier, check_any
from gateway.bearer_jwt.verify import EXPIRED, UNKNOWN_KID, Refused, Verified
from tests.support.bearer_tokens import (
    AUDIENCE,
    ISSUER,
    NOW,
    ec_key,
    ed_key,
    jwks,
    mint,
    public_jwk,
    rsa_key,
)

EXPECT = BearerExpectations(provider="ci", issuer=ISSUER, audiences=(AUDIENCE,))


class KeySets(SynchronousTestCase):
    def test_algorithms_from_the_key_type(self) -> None:
        keys = key_set_from_json("ci", {"keys": [
            public_jwk(rsa_key(), "r"), public_jwk(ec_key("e384", "P-384"), "e"),
            public_jwk(ed_key(), "d"), public_jwk(rsa_key(), "pinned", alg="PS384")]})
        self.assertEqual({kid: k.algorithms for kid, k in keys.keys.items()}, {
            "r": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"), "e": ("ES384",),
            "d": ("EdDSA",), "pinned": ("PS384",)})
        self.assertEqual(keys.skipped, ())

    def test_unusable_keys_skipped_with_a_reason(self) -> None:
        rsa_jwk = public_jwk(rsa_key(), "x")
        entries: list[Any] = [
            {**rsa_jwk, "kid": "enc", "use": "enc"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {**rsa_jwk, "kid": "private", "d": "AAAA"},
            public_jwk(rsa_key("small", 1024), "small"),
            public_jwk(ec_key("k1", "secp256k1"), "k1"),
            {**rsa_jwk, "kid": "mismatch", "alg": "ES256"},
            {**rsa_jwk, "kid": "hs-alg", "alg": "HS256"},
            {**rsa_jwk, "kid": "ops", "key_ops": ["encrypt"]},
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            {"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": "AAAA"},
            {"kty": "EC", "kid": "off-curve", "crv": "P-256",
             "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
             "y": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE"},
            "not a key",
            {**rsa_jwk, "kid": "twice"}, {**rsa_jwk, "kid": "twice"},
            {**rsa_jwk, "kid": "good"},
        ]
        keys = key_set_from_json("ci", {"keys": entries})
        self.assertEqual(list(keys.keys), ["good"])
        reasons = "\n".join(keys.skipped)
        for expected in ("'enc': use is 'enc'", "'hmac': symmetric keys are never accepted",
                         "'private': it holds private key material",
                         "'small': RSA key of 1024 bits", "'k1': EC curve 'secp256k1'",
                         "'mismatch': its alg 'ES256' does not fit a RSA key",
                         "'hs-alg': its alg 'HS256'", "'ops': key_ops",
                         "'broken':", "'x25519': OKP curve", "'off-curve':",
                         "key #11: not a JSON object",
                         "'twice': more than one key has it"):
            self.assertIn(expected, reasons)
        self.assertEqual(len(keys.skipped), 13)  # the two "twice" keys: one line

    def test_key_count_bounded(self) -> None:
        jwk = public_jwk(ec_key(), "x")
        keys = key_set_from_json("ci", {"keys": [{**jwk, "kid": f"k{i}"}
                                                 for i in range(MAX_KEYS + 7)]})
        self.assertEqual(len(keys.keys), MAX_KEYS)
        self.assertIn("keys past the first 50 (7) ignored", keys.skipped)

    def test_not_a_key_set(self) -> None:
        for document in (b"", b"<html>", b"[]", b'{"keys": {}}', b'{"keys": [], "keys": []}',
                         b"{" + b" " * 300_000 + b"}"):
            with self.assertRaises(JwksError):
                key_set("ci", document)

    def test_kid_lookup(self) -> None:
        keys = key_set_from_json("ci", jwks((rsa_key(), "a"), (ec_key(), "b")))
        self.assertIsNotNone(keys.lookup("a"))
        self.assertIsNone(keys.lookup("c"))
        self.assertIsNone(keys.lookup(""))  # two keys: a token without kid names none


class FakeKeys:
    def __init__(self, keys: KeySet) -> None:
        self.keys = keys
        self.asked = 0

    def unknown_kid(self) -> None:
        self.asked += 1


class Cache(SynchronousTestCase):
    def setUp(self) -> None:
        self.now = NOW
        self.source = FakeKeys(key_set_from_json("ci", jwks((rsa_key(), "rsa-1"))))
        self.verifier = Verifier(EXPECT, self.source, lambda: self.now, limit=3)
        self.runs = 0
        real = verifier_module.verify

        def counting(*args: Any) -> Verified | Refused:
            self.runs += 1
            return real(*args)

        self.patch(verifier_module, "verify", counting)

    def test_a_repeated_token_is_not_verified_again(self) -> None:
        token = mint()
        first = self.verifier.check(token)
        self.assertIsInstance(first, Verified)
        self.assertIs(self.verifier.check(token), first)
        self.assertEqual(self.runs, 1)

    def test_bounded_least_recently_used_first_out(self) -> None:
        tokens = [mint(jti=f"j{i}") for i in range(5)]
        for token in tokens[:3]:
            self.verifier.check(token)
        self.verifier.check(tokens[0])  # used again: now the most recent
        self.verifier.check(tokens[3])  # evicts tokens[1], the least recently used
        self.verifier.check(tokens[4])  # evicts tokens[2]
        self.assertEqual(len(self.verifier), 3)
        self.assertEqual(self.runs, 5)
        self.verifier.check(tokens[0])
        self.assertEqual(self.runs, 5)
        self.verifier.check(tokens[1])
        self.assertEqual(self.runs, 6)

    def test_cached_only_until_exp(self) -> None:
        token = mint()
        self.assertIsInstance(self.verifier.check(token), Verified)
        self.now = NOW + 300 + 61
        refused = self.verifier.check(token)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, EXPIRED)

    def test_a_new_key_set_empties_the_cache(self) -> None:
        token = mint()
        self.assertIsInstance(self.verifier.check(token), Verified)
        self.source.keys = key_set_from_json("ci", jwks((rsa_key("next"), "next")))
        refused = self.verifier.check(token)
        assert isinstance(refused, Refused)
        self.assertEqual((refused.check, len(self.verifier)), (UNKNOWN_KID, 0))

    def test_an_unknown_kid_asks_the_source(self) -> None:
        self.verifier.check(mint(kid="rsa-2"))
        self.assertEqual(self.source.asked, 1)
        self.verifier.check(mint())
        self.assertEqual(self.source.asked, 1)

    def test_refusals_are_not_cached(self) -> None:
        token = mint(aud="elsewhere")
        self.verifier.check(token)
        self.verifier.check(token)
        self.assertEqual((self.runs, len(self.verifier)), (2, 0))

    def test_oversize_refused_before_hashing(self) -> None:
        refused = self.verifier.check("x" * 20_000)
        assert isinstance(refused, Refused)
        self.assertEqual((refused.check, self.runs), ("oversize", 0))


class NotJson(SynchronousTestCase):
    def test_key_set_from_json_round_trip(self) -> None:
        document = json.dumps(jwks((ec_key(), "e"))).encode()
        self.assertEqual(list(key_set("ci", document).keys), ["e"])


class SeveralProviders(SynchronousTestCase):
    """``check_any``: a route accepting several bearer providers."""

    def setUp(self) -> None:
        self.ci = Verifier(EXPECT, FakeKeys(key_set_from_json("ci", jwks((rsa_key(), "rsa-1")))),
                           lambda: NOW)
        cluster_keys = key_set_from_json("cluster", jwks((ec_key(), "ec-1")))
        self.cluster = Verifier(
            BearerExpectations("cluster", "kubernetes:///", ("gateway",)),
            FakeKeys(replace(cluster_keys, issuer="https://k8s.example")), lambda: NOW)
        self.runs: list[str] = []
        for verifier in (self.ci, self.cluster):
            real = verifier.check

            def counting(token: str, real: Any = real, name: str = verifier.expect.provider
                         ) -> Verified | Refused:
                self.runs.append(name)
                return real(token)

            self.patch(verifier, "check", counting)

    def test_the_provider_whose_issuer_the_token_names(self) -> None:
        both = [self.ci, self.cluster]
        result = check_any(mint(ec_key(), "ec-1", "ES256", iss="https://k8s.example",
                                aud="gateway"), both)
        assert isinstance(result, Verified)
        self.assertEqual((result.provider, self.runs), ("cluster", ["cluster"]))
        result = check_any(mint(), both)
        assert isinstance(result, Verified)
        self.assertEqual(result.provider, "ci")

    def test_a_token_seen_before_is_not_even_parsed(self) -> None:
        token = mint(ec_key(), "ec-1", "ES256", iss="https://k8s.example", aud="gateway")
        first = check_any(token, [self.ci, self.cluster])
        parsed: list[str] = []
        self.patch(verifier_module, "named_issuer", parsed.append)
        self.assertIs(check_any(token, [self.ci, self.cluster]), first)
        self.assertEqual((self.runs, parsed), (["cluster"], []))

    def test_an_issuer_no_provider_has(self) -> None:
        refused = check_any(mint(iss="https://evil.example"), [self.ci, self.cluster])
        assert isinstance(refused, Refused)
        self.assertEqual((refused.check, self.runs), ("issuer", []))

    def test_a_key_of_one_provider_with_the_issuer_of_another(self) -> None:
        refused = check_any(mint(iss="https://k8s.example", aud="gateway"),
                            [self.ci, self.cluster])
        assert isinstance(refused, Refused)
        self.assertEqual((refused.check, self.runs), ("unknown_kid", ["cluster"]))

    def test_unreadable_says_why(self) -> None:
        refused = check_any("a.b", [self.ci, self.cluster])
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, "malformed")


class Header(SynchronousTestCase):
    def test_the_token(self) -> None:
        self.assertEqual(bearer_jwt([(b"Host", b"x"), (b"Authorization", b"bearer  a.b-_.c ")]),
                         "a.b-_.c")

    def test_none_or_the_gateways_own(self) -> None:
        for headers in ([], [(b"authorization", b"Gateway tok")],
                        [(b"authorization", b"Bearer Gateway-tok")],
                        [(b"authorization", b"Basic dXNlcjpwdw==")]):
            self.assertEqual(bearer_jwt(headers), "")

    def test_two_headers_or_not_one_token(self) -> None:
        for headers in ([(b"authorization", b"Bearer a.b.c"), (b"Authorization", b"Bearer d")],
                        [(b"authorization", b"Bearer a.b.c"), (b"authorization", b"Basic x")],
                        [(b"authorization", b"Bearer a b")],
                        [(b"authorization", b"Bearer a.b\xff")]):
            refused = bearer_jwt(headers)
            assert isinstance(refused, Refused), headers
            self.assertEqual(refused.check, "malformed")
