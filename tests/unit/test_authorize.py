"""Policy decisions, claim flattening and the signed identity assertion (cases 50-56)."""

from __future__ import annotations

import base64
import json
from dataclasses import FrozenInstanceError, replace
from types import MappingProxyType
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize import assertion
from gateway.authorize.allow_fields import CodedDecision, coded_decision
from gateway.authorize.assertion import AssertionSigner, claim_headers, jwk_thumbprint
from gateway.authorize.caller import Caller
from gateway.authorize.claims import flatten_claims
from gateway.authorize.decide import decide as decide_policy
from gateway.authorize.decide import http_asked
from gateway.authorize.hook import RequestInfo
from gateway.config.routes import Route
from gateway.sessions.model import Session

from .config.helpers import IDENTITY, base_config, load
from .legacy_oracle import claims_allowed

NOW = 1_700_000_000.0
HOST = "app.example.com"
ISSUER = "authenticate.example.com"
# The original's JWKS test key (authenticate/handlers_test.go TestJwksEndpoint).
ORIGINAL_KEY = base64.b64decode(
    "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUpCMFZkbko1VjEvbVlpYUlIWHhnd2Q0Yzd5YW"
    "RTeXMxb3Y0bzA1b0F3ekdvQW9HQ0NxR1NNNDkKQXdFSG9VUURRZ0FFVUc1eENQMEpUVDFINklvbDhqS3VUSVBWTE0w"
    "NENnVzlQbEV5cE5SbVdsb29LRVhSOUhUMwpPYnp6aktZaWN6YjArMUt3VjJmTVRFMTh1dy82MXJVQ0JBPT0KLS0tLS"
    "1FTkQgRUMgUFJJVkFURSBLRVktLS0tLQo="
)
ORIGINAL_JWKS = (
    '{"keys":[{"use":"sig","kty":"EC","kid":"5b419ade1895fec2d2def6cd33b1b9a018df60db231dc5ecb85'
    'cbed6d942813c","crv":"P-256","alg":"ES256","x":"UG5xCP0JTT1H6Iol8jKuTIPVLM04CgW9PlEypNRmWlo"'
    ',"y":"KChF0fR09zm884ymInM29PtSsFdnzExNfLsP-ta1AgQ"}]}'
)
PREFLIGHT = [(b"Origin", b"https://other.example"), (b"Access-Control-Request-Method", b"GET")]


def route(**spec: Any) -> Route:
    """One route on ``HOST`` built through the real configuration loader."""
    policy = [{"from": f"https://{HOST}", "to": "http://upstream.internal", **spec}]
    return load(base_config(policy=policy, **IDENTITY)).routes[0]


def session(**fields: Any) -> Session:
    values: dict[str, Any] = {
        "id": "session-1", "user_id": "alice-id", "email": "alice@example.com",
        "issued_at": NOW - 60, "expires_at": NOW + 3600,
    }
    values.update(fields)
    if "claims" in fields:
        values["claims"] = MappingProxyType(dict(fields["claims"]))
    return Session(**values)


def caller(s: Session, groups: bool = True, refused: str = "") -> Caller:
    """The caller of exactly ``s``'s fields (its e-mail used as it is, whatever it is;
    ``refused``: the code of an address that was refused)."""
    return Caller(s.user_id, s.email, s.groups, s.claims, s.expires_at,
                  groups_available=groups, provider=s.provider, session_id=s.id, name=s.name,
                  claimed_email=s.email, email_refusal=refused)


def decide(r: Route, s: Session | None, method: bytes = b"GET",
           headers: list[tuple[bytes, bytes]] | None = None, groups: bool = True,
           refused: str = "") -> CodedDecision:
    """The route's compiled policy (its allow fields as rules), in the fields' codes."""
    request = RequestInfo(method, "https", HOST, "/", b"", headers or [], "192.0.2.1")
    who = caller(s, groups, refused) if s is not None else None
    verdict = decide_policy(r.policy, who, http_asked(request, NOW))
    return coded_decision(r, verdict, who, NOW)


def pem(key: assertion.SigningKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class ClaimsTests(SynchronousTestCase):
    def test_flatten(self) -> None:
        """Nested maps become dotted keys; every value a tuple of strings (case 50)."""
        cases: list[tuple[dict[str, Any], dict[str, tuple[str, ...]]]] = [
            ({"a": {"aa": {"aaa": 12345}, "ab": [1, 2, 3, 4, 5]}},
             {"a.aa.aaa": ("12345",), "a.ab": ("1", "2", "3", "4", "5")}),
            ({"a": "b"}, {"a": ("b",)}),
            ({"ok": True, "no": False, "f": 2.0, "g": 2.5}, {
                "ok": ("true",), "no": ("false",), "f": ("2",), "g": ("2.5",)}),
            ({"gone": None, "l": ["x", None]}, {"l": ("x",)}),
            ({"l": [{"b": 1, "a": 2}]}, {"l": ('{"a":2,"b":1}',)}),
        ]
        for claims, expected in cases:
            self.assertEqual(flatten_claims(claims), expected, claims)

    def test_claims_allowed(self) -> None:
        """Any required key with any overlapping value matches (case 51)."""
        cases: list[tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], bool]] = [
            ({"a": ("1",)}, {"a": ("1",)}, True),
            ({"a": ("2",)}, {"a": ("1",)}, False),
            ({"a": ("1", "2", "3")}, {"a": ("1",)}, True),
            ({"a.b.c": ("1",), "d.e.f": ("2",)}, {"d.e.f": ("2",)}, True),
            ({"a": ("1",)}, {"b": ("1",)}, False),
            ({}, {"a": ("1",)}, False),
        ]
        for required, have, expected in cases:
            self.assertIs(claims_allowed(required, have), expected, (required, have))


class EvaluateTests(SynchronousTestCase):
    def check(self, cases: list[tuple[Route, Session | None, bool, int, tuple[str, ...]]],
              groups: bool = True) -> None:
        for r, s, allowed, status, reasons in cases:
            self.assertEqual(decide(r, s, groups=groups), CodedDecision(allowed, status, reasons),
                             (r.allowed_users, r.allowed_domains, r.allowed_groups, s))

    def test_users(self) -> None:
        """allowed_users matches the e-mail case-insensitively or the user id exactly (56)."""
        alice = session()
        self.check([
            (route(allowed_users=["alice@example.com"]), alice, True, 200, ("email-ok",)),
            (route(allowed_users=["ALICE@Example.COM"]), alice, True, 200, ("email-ok",)),
            (route(allowed_users=["alice-id"]), alice, True, 200, ("user-id-ok",)),
            (route(allowed_users=["ALICE-ID"]), alice, False, 403, ("email-unauthorized",)),
            (route(allowed_users=["bob@example.com"]), alice, False, 403,
             ("email-unauthorized",)),
        ])

    def test_domains(self) -> None:
        """allowed_domains is the exact domain after the last @, no subdomains (56)."""
        r = route(allowed_domains=["example.com"])
        self.check([
            (r, session(), True, 200, ("domain-ok",)),
            (r, session(email="Bob@EXAMPLE.com"), True, 200, ("domain-ok",)),
            (route(allowed_domains=["EXAMPLE.COM"]), session(), True, 200, ("domain-ok",)),
            (r, session(email="x@sub.example.com"), False, 403, ("domain-unauthorized",)),
            (r, session(email="y@notexample.com"), False, 403, ("domain-unauthorized",)),
            (r, session(email="example.com"), False, 403, ("domain-unauthorized",)),
            (r, session(email=""), False, 403, ("domain-unauthorized",)),
        ])

    def test_groups(self) -> None:
        """allowed_groups matches any group id or name of the session (56)."""
        r = route(allowed_groups=["admins", "group-1"])
        self.check([
            (r, session(groups=("users", "admins")), True, 200, ("group-ok",)),
            (r, session(groups=("group-1",)), True, 200, ("group-ok",)),
            (r, session(groups=("Admins",)), False, 403, ("groups-unauthorized",)),
            (r, session(), False, 403, ("groups-unauthorized",)),
        ])

    def test_groups_need_service_account(self) -> None:
        """Without group data allowed_groups never matches, and the reason says why."""
        r = route(allowed_groups=["admins"])
        self.check([
            (r, session(groups=("admins",)), False, 403, ("groups-need-service-account",)),
        ], groups=False)
        both = route(allowed_groups=["admins"], allowed_users=["alice@example.com"])
        self.check([(both, session(groups=("admins",)), True, 200, ("email-ok",))],
                   groups=False)

    def test_claims(self) -> None:
        """allowed_idp_claims matches any listed value of any claim (56)."""
        r = route(allowed_idp_claims={"some.claim": ["a", "b"], "verified": True})
        self.check([
            (r, session(claims={"some.claim": ("b",)}), True, 200, ("claim-ok",)),
            (r, session(claims={"verified": ("true",)}), True, 200, ("claim-ok",)),
            (r, session(claims={"some.claim": ("c",)}), False, 403, ("claims-unauthorized",)),
            (r, session(), False, 403, ("claims-unauthorized",)),
        ])

    def test_rules_are_ored(self) -> None:
        """One matching rule is enough; a denial lists every failing rule."""
        r = route(allowed_users=["bob@example.com"], allowed_domains=["example.com"],
                  allowed_idp_claims={"dept": ["eng"]})
        self.check([
            (r, session(), True, 200, ("domain-ok",)),
            (r, session(email="alice@other.example", claims={"dept": ("eng",)}), True, 200,
             ("claim-ok",)),
            (r, session(email="alice@other.example"), False, 403,
             ("email-unauthorized", "domain-unauthorized", "claims-unauthorized")),
        ])

    def test_public(self) -> None:
        """A public route lets everyone in, with or without a session."""
        r = route(allow_public_unauthenticated_access=True)
        self.check([(r, None, True, 200, ("public",)), (r, session(), True, 200, ("public",)),
                    (r, session(expires_at=NOW), True, 200, ("public",))])

    def test_cors_preflight(self) -> None:
        """Preflight passes only with the flag, OPTIONS, Origin and the request method."""
        flagged = route(allowed_users=["bob@example.com"], cors_allow_preflight=True)
        plain = route(allowed_users=["bob@example.com"])
        cases: list[tuple[Route, bytes, list[tuple[bytes, bytes]], bool]] = [
            (flagged, b"OPTIONS", PREFLIGHT, True),
            (flagged, b"OPTIONS", [(k.upper(), v) for k, v in PREFLIGHT], True),
            (flagged, b"OPTIONS", PREFLIGHT[:1], False),
            (flagged, b"OPTIONS", PREFLIGHT[1:], False),
            (flagged, b"OPTIONS", [(PREFLIGHT[0][0], b""), PREFLIGHT[1]], False),
            (flagged, b"GET", PREFLIGHT, False),
            (plain, b"OPTIONS", PREFLIGHT, False),
        ]
        for r, method, headers, allowed in cases:
            result = decide(r, None, method, headers)
            expected = (CodedDecision(True, 200, ("cors-preflight",)) if allowed
                        else CodedDecision(False, 401, ("user-unauthenticated",)))
            self.assertEqual(result, expected, (r.cors_allow_preflight, method, headers))

    def test_any_authenticated_user(self) -> None:
        """Any signed-in user passes; no session or an expired one is a 401 (56)."""
        r = route(allow_any_authenticated_user=True)
        self.check([
            (r, session(), True, 200, ("any-authenticated-user",)),
            (r, None, False, 401, ("user-unauthenticated",)),
            (r, session(user_id=""), False, 401, ("user-unauthenticated",)),
            (r, session(expires_at=NOW), False, 401, ("session-expired",)),
            (r, session(expires_at=NOW + 0.5), True, 200, ("any-authenticated-user",)),
        ])

    def test_per_route(self) -> None:
        """The user of one route is 403 on another; no session is 401 (case 55)."""
        mine, theirs = route(allowed_users=["alice-id"]), route(allowed_users=["bob-id"])
        self.check([
            (mine, session(), True, 200, ("user-id-ok",)),
            (theirs, session(), False, 403, ("email-unauthorized",)),
            (mine, None, False, 401, ("user-unauthenticated",)),
        ])

    def test_no_rules(self) -> None:
        """A route with no allow rule denies every signed-in user."""
        result = decide(route(), session())
        self.assertEqual(result, CodedDecision(False, 403, ("no-allow-rule-matched",)))
        self.assertEqual(result.reason, "no-allow-rule-matched")

    def test_decision_is_frozen(self) -> None:
        """Decisions are immutable values."""
        decision = decide(route(), None)
        with self.assertRaises(FrozenInstanceError):
            decision.allowed = True  # type: ignore[misc]


class SignerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.now = NOW

    def clock(self) -> float:
        return self.now

    def signer(self, algorithm: str = "ES256", key: bytes | None = None) -> AssertionSigner:
        return AssertionSigner(key, algorithm, ISSUER, clock=self.clock)

    def verify(self, signer: AssertionSigner, token: str) -> dict[str, Any]:
        key = jwt.PyJWK(signer.public_jwk())
        header = jwt.get_unverified_header(token)
        self.assertEqual((header["kid"], header["alg"]), (signer.kid, signer.algorithm))
        claims: dict[str, Any] = jwt.decode(
            token, key=key, algorithms=[signer.algorithm], audience=HOST, issuer=ISSUER,
            options={"verify_exp": False})
        return claims

    def test_all_algorithms(self) -> None:
        """Every algorithm signs a JWT verifiable with public_jwk(), with every claim."""
        keys: dict[str, assertion.SigningKey] = {
            "ES256": ec.generate_private_key(ec.SECP256R1()),
            "EdDSA": ed25519.Ed25519PrivateKey.generate(),
            "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        }
        s = replace(session(groups=("g1", "admins"), name="Alice"), provider="corp")
        for algorithm, private in keys.items():
            for key in (pem(private), None):
                signer = self.signer(algorithm, key)
                self.assertIs(signer.ephemeral, key is None)
                claims = self.verify(signer, signer.sign(caller(s), HOST))
                jti = claims.pop("jti")
                self.assertTrue(isinstance(jti, str) and len(jti) >= 16)
                self.assertEqual(claims, {
                    "iss": ISSUER, "aud": HOST, "sub": "alice-id", "user": "alice-id",
                    "email": "alice@example.com", "groups": ["g1", "admins"],
                    "iat": int(NOW), "exp": int(NOW + 300), "name": "Alice",
                    "idp": "corp"}, algorithm)

    def test_other_key_does_not_verify(self) -> None:
        """A token does not verify against another signer's key."""
        a, b = self.signer(), self.signer()
        token = a.sign(caller(session()), HOST)
        with self.assertRaises(jwt.InvalidSignatureError):
            jwt.decode(token, key=jwt.PyJWK(b.public_jwk()), algorithms=["ES256"],
                       audience=HOST, options={"verify_exp": False})
        self.assertEqual(self.verify(a, token)["sub"], "alice-id")

    def test_optional_name_and_group_fallback(self) -> None:
        """No name claim without a name; groups fall back to the IdP groups claim."""
        signer = self.signer()
        who = caller(session(claims={"groups": ("idp",)}))
        claims = self.verify(signer, signer.sign(who, HOST))
        self.assertNotIn("name", claims)
        self.assertEqual(claims["groups"], ["idp"])

    def test_exp_never_past_session(self) -> None:
        """exp is min(now + 5 minutes, session expiry)."""
        signer = self.signer()
        for expires_at, exp in [(NOW + 3600, NOW + 300), (NOW + 100, NOW + 100),
                                (NOW + 300, NOW + 300)]:
            s = session(id=f"s-{expires_at}", expires_at=expires_at)
            signed = signer.sign(caller(s), HOST)
            self.assertEqual(self.verify(signer, signed)["exp"], int(exp))

    def test_cache(self) -> None:
        """A token is reused until 30 s before exp, per session and audience."""
        signer, s = self.signer(), session()
        first = signer.sign(caller(s), HOST)
        self.now = NOW + 269
        self.assertEqual(signer.sign(caller(s), HOST), first)
        self.assertNotEqual(signer.sign(caller(s), "other.example.com"), first)
        self.now = NOW + 270
        renewed = signer.sign(caller(s), HOST)
        self.assertNotEqual(renewed, first)
        self.assertEqual(self.verify(signer, renewed)["exp"], int(NOW + 570))
        self.assertEqual(signer.sign(caller(s), HOST), renewed)
        changed = signer.sign(caller(replace(s, groups=("new",))), HOST)
        self.assertNotEqual(changed, renewed)
        self.assertEqual(self.verify(signer, changed)["groups"], ["new"])

    def test_cache_is_bounded(self) -> None:
        """The oldest cached token is evicted beyond the cache size."""
        self.patch(assertion, "CACHE_SIZE", 2)
        signer = self.signer()
        tokens = {i: signer.sign(caller(session(id=f"s{i}")), HOST) for i in range(3)}
        self.assertEqual(signer.sign(caller(session(id="s2")), HOST), tokens[2])
        self.assertNotEqual(signer.sign(caller(session(id="s0")), HOST), tokens[0])

    def test_original_jwks(self) -> None:
        """The original's test key gives its exact JWKS and kid (case 54)."""
        signer = self.signer("ES256", ORIGINAL_KEY)
        self.assertEqual(json.dumps(signer.jwks(), separators=(",", ":")), ORIGINAL_JWKS)
        self.assertEqual(signer.kid, json.loads(ORIGINAL_JWKS)["keys"][0]["kid"])
        header = jwt.get_unverified_header(signer.sign(caller(session()), HOST))
        self.assertEqual(header["kid"], signer.kid)

    def test_jwk_shapes(self) -> None:
        """Members per key type, in order; ephemeral keys are not published."""
        cases = {"ES256": ["use", "kty", "kid", "crv", "alg", "x", "y"],
                 "EdDSA": ["use", "kty", "kid", "crv", "alg", "x"],
                 "RS256": ["use", "kty", "kid", "alg", "n", "e"]}
        for algorithm, members in cases.items():
            signer = self.signer(algorithm)
            jwk = signer.public_jwk()
            self.assertEqual(list(jwk), members)
            self.assertEqual((jwk["use"], jwk["alg"], jwk["kid"]),
                             ("sig", algorithm, jwk_thumbprint(jwk)))
            self.assertEqual(signer.jwks(), {"keys": []})
        self.assertEqual(self.signer("RS256").public_jwk()["e"], "AQAB")

    def test_ec_coordinates_fixed_length(self) -> None:
        """EC coordinates keep leading zero bytes: always 32 bytes (43 characters)."""
        for coordinate in ("x", "y"):
            scalar = 1
            while True:
                private = ec.derive_private_key(scalar, ec.SECP256R1())
                numbers = private.public_key().public_numbers()
                if getattr(numbers, coordinate) < 2**248:
                    break
                scalar += 1
            jwk = self.signer("ES256", pem(private)).public_jwk()
            self.assertEqual((len(jwk["x"]), len(jwk["y"])), (43, 43), coordinate)
            key = jwt.PyJWK(jwk).key
            assert isinstance(key, ec.EllipticCurvePublicKey)
            self.assertEqual(key.public_numbers(), numbers)

    def test_public_key_b64(self) -> None:
        """The logged public key is the base64 DER of the signing key's public half."""
        private = ec.generate_private_key(ec.SECP256R1())
        signer = self.signer("ES256", pem(private))
        public = serialization.load_der_public_key(base64.b64decode(signer.public_key_b64()))
        assert isinstance(public, ec.EllipticCurvePublicKey)
        self.assertEqual(public.public_numbers(), private.public_key().public_numbers())

    def test_key_must_suit_algorithm(self) -> None:
        """A key of the wrong type or curve, or an unknown algorithm, is refused."""
        cases = [("ES256", pem(ed25519.Ed25519PrivateKey.generate())),
                 ("ES256", pem(ec.generate_private_key(ec.SECP384R1()))),
                 ("EdDSA", pem(ec.generate_private_key(ec.SECP256R1()))),
                 ("RS256", pem(ec.generate_private_key(ec.SECP256R1()))),
                 ("HS256", None)]
        for algorithm, key in cases:
            with self.assertRaises(ValueError, msg=algorithm):
                self.signer(algorithm, key)


class ClaimHeaderTests(SynchronousTestCase):
    def headers(self, setting: Any, s: Session) -> tuple[tuple[bytes, bytes], ...]:
        options = load(base_config(jwt_claims_headers=setting, **IDENTITY)).options
        return claim_headers(options.jwt_claims_headers, caller(s))

    def test_list_form(self) -> None:
        """Listed claims become X-Gateway-Claim-<Name>, arrays joined by ',' (case 53)."""
        s = session(groups=("admin_id", "test_id", "admin", "test"))
        self.assertEqual(self.headers(["email", "groups"], s), (
            (b"X-Gateway-Claim-Email", b"alice@example.com"),
            (b"X-Gateway-Claim-Groups", b"admin_id,test_id,admin,test")))

    def test_map_form(self) -> None:
        """A map names the header of each claim; claims come from the session's claims."""
        s = session(claims={"org.dept": ("eng", "ops"), "sub": ("idp-subject",)},
                    name="Alice")
        setting = {"X-Email": "email", "X-Dept": "org.dept", "X-User": "user",
                   "X-Sub": "sub", "X-Name": "name"}
        self.assertEqual(dict(self.headers(setting, s)), {
            b"X-Email": b"alice@example.com", b"X-Dept": b"eng,ops", b"X-User": b"alice-id",
            b"X-Sub": b"alice-id", b"X-Name": b"Alice"})

    def test_missing_claims(self) -> None:
        """Missing or empty claims give no header (case 53)."""
        s = session(email="", claims={"empty": ()})
        self.assertEqual(self.headers(["email", "groups", "name", "empty", "absent"], s), ())

    def test_no_header_injection(self) -> None:
        """Line breaks in claim values cannot start another header."""
        s = session(claims={"dept": ("eng\r\nX-Evil: 1",)})
        self.assertEqual(self.headers({"X-Dept": "dept"}, s),
                         ((b"X-Dept", b"eng  X-Evil: 1"),))
