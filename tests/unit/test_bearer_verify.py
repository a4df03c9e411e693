"""Bearer JWTs from outside issuers (issue 42): the adversarial table, each case refused
with the name of the check it fails and a description that never quotes the token, and
the accepted shapes (every allowed algorithm, audiences as a string or a list, the
skew)."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from twisted.trial.unittest import SynchronousTestCase

from gateway.bearer_jwt import jws
from gateway.bearer_jwt import verify as v
from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.keys import KeySet, key_set_from_json
from gateway.bearer_jwt.verify import Refused, Verified, explain, verify
from tests.support.bearer_tokens import (
    AUDIENCE,
    ISSUER,
    NOW,
    b64,
    claims,
    ec_key,
    ed_key,
    jwks,
    mint,
    public_jwk,
    rsa_key,
    sign,
)

EXPECT = BearerExpectations(provider="ci", issuer=ISSUER, audiences=(AUDIENCE, "other"))
OTHER_ISSUER = "https://cluster.example.test"


def keys() -> KeySet:
    return key_set_from_json("ci", {"keys": [
        public_jwk(rsa_key(), "rsa-1"),
        public_jwk(rsa_key("rsa-pinned"), "rsa-pinned", alg="RS256"),
        public_jwk(ec_key("ec-256", "P-256"), "ec-256"),
        public_jwk(ec_key("ec-384", "P-384"), "ec-384"),
        public_jwk(ec_key("ec-521", "P-521"), "ec-521"),
        public_jwk(ed_key(), "ed-1"),
    ]})


def other_keys() -> KeySet:
    """Another provider's set: its own key, its own kid."""
    return key_set_from_json("cluster", jwks((rsa_key("cluster"), "cluster-1")))


def hs256_with_public_key() -> str:
    """The classic confusion: HMAC keyed with the RSA public key's PEM, which a verifier
    that takes ``alg`` from the token would check against the 'key' it holds."""
    pem = rsa_key().public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = b64(json.dumps(claims()).encode())
    mac = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def unsigned(alg: str = "none", signature: str = "") -> str:
    head = b64(json.dumps({"alg": alg, "typ": "JWT", "kid": "rsa-1"}).encode())
    return f"{head}.{b64(json.dumps(claims()).encode())}.{signature}"


def raw(header: bytes, payload: bytes, key: Any = None, alg: str = "RS256") -> str:
    return sign(header, payload, key or rsa_key(), alg)


def replace_segment(token: str, index: int, value: str) -> str:
    parts = token.split(".")
    parts[index] = value
    return ".".join(parts)


GOOD_HEAD = b'{"alg":"RS256","typ":"JWT","kid":"rsa-1"}'
GOOD_BODY = json.dumps(claims()).encode()


@dataclass(frozen=True)
class Case:
    name: str
    token: str
    check: str
    keys: KeySet | None = None


def table() -> list[Case]:
    good = mint()
    head, body, sig = good.split(".")
    return [
        Case("alg none", unsigned(), v.ALG),
        Case("alg None, capitalised", unsigned("None"), v.ALG),
        Case("alg none with a signature", unsigned("none", sig), v.ALG),
        Case("alg missing", raw(b'{"typ":"JWT","kid":"rsa-1"}', GOOD_BODY), v.ALG),
        Case("HS256 signed with the public key as secret", hs256_with_public_key(), v.ALG),
        Case("RS256 key, ES256 alg", mint(kid="rsa-1", alg="ES256", private=ec_key()),
             v.ALG),
        Case("ES256 with a P-384 key's kid", mint(ec_key("ec-384", "P-384"), "ec-384",
                                                  "ES256"), v.ALG),
        Case("ES384 alg signed by the P-256 key", mint(ec_key(), "ec-384", "ES384"),
             v.SIGNATURE),
        Case("PS256 with a key published for RS256 only",
             mint(rsa_key("rsa-pinned"), "rsa-pinned", "PS256"), v.ALG),
        Case("signature of another key under this kid", mint(rsa_key("stranger")),
             v.SIGNATURE),
        Case("payload changed after signing",
             replace_segment(good, 1, b64(json.dumps(claims(sub="admin")).encode())),
             v.SIGNATURE),
        Case("signature cut short", replace_segment(
            good, 2, b64(jws.b64url_decode(sig, "s")[:-3])), v.SIGNATURE),
        Case("empty signature", replace_segment(good, 2, ""), v.SIGNATURE),
        Case("unknown kid", mint(kid="rsa-9"), v.UNKNOWN_KID),
        Case("kid of another provider's key", mint(rsa_key("cluster"), "cluster-1",
                                                   iss=OTHER_ISSUER), v.UNKNOWN_KID),
        Case("another provider's issuer, signed with this provider's key",
             mint(iss=OTHER_ISSUER), v.ISSUER),
        Case("provider A's key, provider B's issuer, checked as B",
             mint(iss=OTHER_ISSUER), v.UNKNOWN_KID, other_keys()),
        Case("no kid, several keys", raw(b'{"alg":"RS256"}', GOOD_BODY), v.UNKNOWN_KID),
        Case("kid not a string", raw(b'{"alg":"RS256","kid":7}', GOOD_BODY), v.UNKNOWN_KID),
        Case("wrong issuer", mint(iss="https://evil.example.test"), v.ISSUER),
        Case("issuer with a trailing slash", mint(iss=ISSUER + "/"), v.ISSUER),
        Case("issuer missing", mint(iss=None), v.ISSUER),
        Case("wrong audience", mint(aud="https://elsewhere.example.test"), v.AUDIENCE),
        Case("audience missing", mint(aud=None), v.AUDIENCE),
        Case("audience list without ours", mint(aud=["a", "b"]), v.AUDIENCE),
        Case("audience an object", mint(aud={"x": AUDIENCE}), v.AUDIENCE),
        Case("expired past the skew", mint(exp=int(NOW) - 61), v.EXPIRED),
        Case("exp missing", mint(exp=None), v.EXPIRY_MISSING),
        Case("exp a string", mint(exp=str(int(NOW) + 300)), v.EXPIRY_MISSING),
        Case("exp true", mint(exp=True), v.EXPIRY_MISSING),
        Case("exp beyond float", raw(GOOD_HEAD, GOOD_BODY.replace(
            f'"exp": {int(NOW) + 300}'.encode(), b'"exp": 1e400')), v.EXPIRY_MISSING),
        Case("not valid yet", mint(nbf=int(NOW) + 120), v.NOT_YET_VALID),
        Case("nbf not a number", mint(nbf="soon"), v.NOT_YET_VALID),
        Case("issued in the future", mint(iat=int(NOW) + 120), v.ISSUED_IN_FUTURE),
        Case("sub missing", mint(sub=None), v.SUBJECT),
        Case("sub empty", mint(sub=""), v.SUBJECT),
        Case("sub a number", mint(sub=42), v.SUBJECT),
        Case("oversize", mint(padding="x" * 9000), jws.OVERSIZE),
        Case("duplicate alg in the header",
             raw(b'{"alg":"RS256","alg":"none","kid":"rsa-1"}', GOOD_BODY), jws.DUPLICATE_KEY),
        Case("duplicate sub in the payload",
             raw(GOOD_HEAD, GOOD_BODY[:-1] + b', "sub": "admin"}'), jws.DUPLICATE_KEY),
        Case("duplicate member nested in the payload",
             raw(GOOD_HEAD, GOOD_BODY[:-1] + b', "x": {"a": 1, "a": 2}}'), jws.DUPLICATE_KEY),
        Case("crit header", mint(header={"crit": ["exp"], "exp": 1}), v.CRIT),
        Case("nested JWT", mint(header={"cty": "JWT"}), v.NESTED_JWT),
        Case("jku pointing elsewhere", mint(header={"jku": "https://evil.example/jwks"}),
             v.KEY_REFERENCE),
        Case("x5u pointing elsewhere", mint(header={"x5u": "https://evil.example/cert"}),
             v.KEY_REFERENCE),
        Case("embedded jwk", mint(header={"jwk": public_jwk(rsa_key("stranger"), "x")}),
             v.KEY_REFERENCE),
        Case("embedded x5c", mint(header={"x5c": ["MIIB"]}), v.KEY_REFERENCE),
        Case("a logout token", mint(header={"typ": "logout+jwt"}), v.TOKEN_TYPE),
        Case("an events claim", mint(events={
            "http://schemas.openid.net/event/backchannel-logout": {}}), v.TOKEN_TYPE),
        Case("bad base64 (+ and /)", replace_segment(good, 1, body[:-2] + "+/"), jws.MALFORMED),
        Case("base64 padding", replace_segment(good, 0, head + "=="), jws.MALFORMED),
        Case("base64 with stray bits", replace_segment(
            good, 0, b64(b"{}")[:-1] + "1"), jws.MALFORMED),
        Case("two segments", f"{head}.{body}", jws.MALFORMED),
        Case("four segments", f"{good}.x", jws.MALFORMED),
        Case("five segments (JWE)", f"{head}.a.b.c.d", jws.MALFORMED),
        Case("header an array", raw(b'["RS256"]', GOOD_BODY), jws.MALFORMED),
        Case("payload NaN", raw(GOOD_HEAD, GOOD_BODY[:-1] + b', "n": NaN}'), jws.MALFORMED),
        Case("payload not UTF-8", raw(GOOD_HEAD, b'{"sub": "\xff"}'), jws.MALFORMED),
        Case("payload nested too deep", raw(GOOD_HEAD, b"[" * 2500 + b"]" * 2500),
             jws.MALFORMED),
        Case("not ASCII", good[:-1] + "\u00e9", jws.MALFORMED),
        Case("a lone surrogate in sub", raw(GOOD_HEAD, GOOD_BODY.replace(
            b'"sub": "repo:', b'"sub": "\\ud800repo:')), jws.MALFORMED),
        Case("empty", "", jws.MALFORMED),
    ]


class AdversarialTable(SynchronousTestCase):
    def test_each_case_refused_with_its_check(self) -> None:
        cases = table()
        self.assertGreaterEqual(len(cases), 30)
        wrong = []
        for case in cases:
            result = verify(case.token, case.keys or keys(), EXPECT, NOW)
            if not isinstance(result, Refused) or result.check != case.check:
                wrong.append(f"{case.name}: {result!r}")
        self.assertEqual(wrong, [])

    def test_descriptions_never_quote_the_token(self) -> None:
        for case in table():
            result = verify(case.token, case.keys or keys(), EXPECT, NOW)
            assert isinstance(result, Refused)
            header = result.www_authenticate()
            self.assertTrue(header.startswith('Bearer error="invalid_token", '
                                              'error_description="'), header)
            self.assertEqual(header.count('"'), 4, header)
            self.assertTrue(header.isascii() and header.isprintable(), header)
            for piece in [p for p in case.token.split(".") if len(p) >= 6]:
                self.assertNotIn(piece[:12], header, case.name)
            for value in ("evil.example", "elsewhere", "admin", "soon", "rsa-9"):
                self.assertNotIn(value, header, case.name)

    def test_none_and_hmac_named_as_such_whatever_the_key(self) -> None:
        """Refused before any key is looked up (the key's allowlist would refuse them too,
        but the description says what the token tried), with a kid nobody has as well."""
        for token, text in (
                (unsigned(), "unsigned tokens (alg none) are never accepted"),
                (replace_segment(unsigned(), 0, b64(b'{"alg":"none","kid":"nobody"}')),
                 "unsigned tokens (alg none) are never accepted"),
                (hs256_with_public_key(), "HMAC algorithms are never accepted"),
                (replace_segment(hs256_with_public_key(), 0,
                                 b64(b'{"alg":"HS512","kid":"nobody"}')),
                 "HMAC algorithms are never accepted")):
            refused = verify(token, keys(), EXPECT, NOW)
            assert isinstance(refused, Refused)
            self.assertEqual((refused.check, refused.description), (v.ALG, text))

    def test_the_header_value_is_printable_ascii_whatever_the_provider_id(self) -> None:
        refused = verify(mint(iss="x"), keys(),
                         BearerExpectations('çi"\\\n', ISSUER, (AUDIENCE,)), NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.www_authenticate(),
                         'Bearer error="invalid_token", error_description="the issuer (iss) '
                         "is not provider ?i???'s\"")

    def test_the_refusal_carries_a_printable_kid_for_the_log(self) -> None:
        refused = verify(mint(kid="rsa-9"), keys(), EXPECT, NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.kid, "rsa-9")
        refused = verify(mint(kid="\x1b[31m" + "k" * 100), keys(), EXPECT, NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.kid, "(unprintable)")


class Accepted(SynchronousTestCase):
    def test_every_algorithm_the_keys_allow(self) -> None:
        signers: list[tuple[Any, str, str]] = [
            (rsa_key(), "rsa-1", alg) for alg in ("RS256", "RS384", "RS512",
                                                   "PS256", "PS384", "PS512")]
        signers += [(ec_key(), "ec-256", "ES256"),
                    (ec_key("ec-384", "P-384"), "ec-384", "ES384"),
                    (ec_key("ec-521", "P-521"), "ec-521", "ES512"),
                    (ed_key(), "ed-1", "EdDSA"), (rsa_key("rsa-pinned"), "rsa-pinned", "RS256")]
        for private, kid, alg in signers:
            result = verify(mint(private, kid, alg), keys(), EXPECT, NOW)
            self.assertIsInstance(result, Verified, f"{alg} {kid}: {result!r}")

    def test_the_identity(self) -> None:
        result = verify(mint(groups=["deploy", "ops"], email="ci@example.test",
                             email_verified=True,
                             **{"kubernetes.io": {"namespace": "prod"}}),
                        keys(), EXPECT, NOW)
        assert isinstance(result, Verified)
        self.assertEqual((result.provider, result.sub, result.email, result.groups),
                         ("ci", "repo:example/app:ref:refs/heads/main", "ci@example.test",
                          ("deploy", "ops")))
        self.assertEqual(result.expires_at, NOW + 300)
        self.assertEqual(result.kid, "rsa-1")
        self.assertEqual(result.claims["repository"], ("example/app",))
        self.assertEqual(result.claims["kubernetes.io.namespace"], ("prod",))
        self.assertEqual(result.claims["email_verified"], ("true",))
        caller = result.caller()
        self.assertEqual((caller.provider, caller.user_id, caller.email, caller.groups,
                          caller.session_id, caller.groups_available, caller.expires_at),
                         ("ci", result.sub, "ci@example.test", ("deploy", "ops"), "", True,
                          NOW + 300))
        self.assertIs(caller.claims, result.claims)
        self.assertTrue(caller.signed_in(NOW))
        session = result.session(NOW)
        self.assertEqual((session.user_id, session.email, session.groups,
                          session.expires_at), (result.sub, "ci@example.test",
                                                ("deploy", "ops"), NOW + 300))

    def test_audience_as_a_list_and_any_configured_one(self) -> None:
        for aud in (["x", AUDIENCE], "other", ["other"]):
            self.assertIsInstance(verify(mint(aud=aud), keys(), EXPECT, NOW), Verified)

    def test_skew_of_sixty_seconds(self) -> None:
        self.assertIsInstance(verify(mint(exp=int(NOW) - 59), keys(), EXPECT, NOW),
                              Verified)
        self.assertIsInstance(verify(mint(nbf=int(NOW) + 59, iat=int(NOW) + 59), keys(),
                                     EXPECT, NOW), Verified)
        self.assertIsInstance(verify(mint(nbf=None, iat=None), keys(), EXPECT, NOW),
                              Verified)

    def test_no_kid_with_a_single_key_set(self) -> None:
        single = key_set_from_json("ci", jwks((rsa_key(), "only")))
        self.assertIsInstance(verify(raw(b'{"alg":"RS256"}', GOOD_BODY), single, EXPECT,
                                     NOW), Verified)

    def test_surrogate_pairs_are_text(self) -> None:
        result = verify(raw(GOOD_HEAD, GOOD_BODY.replace(
            b'"sub": "repo:', b'"sub": "\\ud83d\\ude80repo:')), keys(), EXPECT, NOW)
        assert isinstance(result, Verified), result
        self.assertTrue(result.sub.startswith("\U0001f680repo:"))

    def test_groups_from_a_configured_nested_claim(self) -> None:
        expect = BearerExpectations("kc", ISSUER, (AUDIENCE,),
                                    groups_claim="realm_access.roles")
        result = verify(mint(realm_access={"roles": ["admin"]}), keys(), expect, NOW)
        assert isinstance(result, Verified)
        self.assertEqual(result.groups, ("admin",))


class Email(SynchronousTestCase):
    """``email`` only where the provider vouches for it: ``email_verified`` true."""

    def email(self, expect: BearerExpectations = EXPECT, **extra: Any) -> tuple[str, bool]:
        result = verify(mint(email="ci@example.test", **extra), keys(), expect, NOW)
        assert isinstance(result, Verified)
        return result.email, "email" in result.claims

    def test_verified_false_gives_no_email_and_no_email_claim(self) -> None:
        self.assertEqual(self.email(email_verified=False), ("", False))
        self.assertEqual(self.email(email_verified="false"), ("", False))

    def test_verified_absent_gives_none_either(self) -> None:
        self.assertEqual(self.email(), ("", False))

    def test_verified_true(self) -> None:
        self.assertEqual(self.email(email_verified=True), ("ci@example.test", True))
        self.assertEqual(self.email(email_verified="true"), ("ci@example.test", True))

    def test_trusted_unverified(self) -> None:
        trusting = BearerExpectations("ci", ISSUER, (AUDIENCE,), trust_unverified_email=True)
        self.assertEqual(self.email(trusting, email_verified=False),
                         ("ci@example.test", True))

    def test_not_one_mailbox_is_never_an_email(self) -> None:
        result = verify(mint(email="m@evil.example@example.test", email_verified=True),
                        keys(), EXPECT, NOW)
        assert isinstance(result, Verified)
        self.assertEqual(result.email, "")


class Explain(SynchronousTestCase):
    def test_every_failed_check_not_only_the_first(self) -> None:
        outcomes, verified = explain(
            mint(iss="https://evil.example.test", aud="x", exp=int(NOW) - 600,
                 header={"jku": "https://evil.example/k"}), keys(), EXPECT, NOW)
        self.assertIsNone(verified)
        failed = [o.check for o in outcomes if not o.passed]
        self.assertEqual(failed, [v.KEY_REFERENCE, v.ISSUER, v.AUDIENCE, v.EXPIRED])
        self.assertIn(v.SIGNATURE, [o.check for o in outcomes if o.passed])

    def test_all_passed(self) -> None:
        outcomes, verified = explain(mint(), keys(), EXPECT, NOW)
        self.assertIsInstance(verified, Verified)
        self.assertTrue(all(o.passed for o in outcomes))
        self.assertIn(v.SIGNATURE, [o.check for o in outcomes])

    def test_malformed_stops_at_the_parse(self) -> None:
        outcomes, verified = explain("a.b", keys(), EXPECT, NOW)
        self.assertEqual([(o.check, o.passed) for o in outcomes], [(jws.MALFORMED, False)])
        self.assertIsNone(verified)


class Expectations(SynchronousTestCase):
    def test_no_audience_is_never_any(self) -> None:
        with self.assertRaises(ValueError) as raised:
            BearerExpectations("ci", ISSUER, ())
        self.assertIn("never any", str(raised.exception))
        for bad in ([AUDIENCE], ("",)):
            with self.assertRaises(ValueError):
                BearerExpectations("ci", ISSUER, bad)  # type: ignore[arg-type]

    def test_issuer_and_id_required(self) -> None:
        for provider, issuer in (("", ISSUER), ("ci", "")):
            with self.assertRaises(ValueError):
                BearerExpectations(provider, issuer, (AUDIENCE,))
