"""One bearer token against one provider's expectations and keys: ``Verified`` (the
identity a policy decides on) or ``Refused`` naming the first check it failed. Pure:
the instant is an argument, nothing is fetched or stored.

The checks, in the order ``verify`` runs them (cheap header rules first, the signature
before any claim is believed), each with its stable name:

- the token: ``oversize``, ``malformed`` (not three canonical base64url segments of
  JSON objects), ``duplicate_key`` (a member named twice in the header or the payload);
- the header: ``alg`` (``none``, an HMAC algorithm, anything the key does not allow),
  ``crit`` (no extension is understood, so any is refused, RFC 7515 4.1.11),
  ``nested_jwt`` (``cty: JWT``: a token inside a token), ``key_reference`` (``jku``,
  ``x5u``, ``jwk``, ``x5c``: see below), ``token_type`` (a logout token or another
  security event token is no access token), ``unknown_kid`` (not a key of this
  provider's set), ``signature``;
- the claims: ``issuer`` (exact), ``audience`` (a string or a list naming one of the
  provider's audiences), ``expiry_missing``, ``expired``, ``not_yet_valid``,
  ``issued_in_future`` (``exp``/``nbf``/``iat`` with the provider's skew; ``nbf`` and
  ``iat`` are optional), ``subject`` (a non-empty string ``sub``).

``jku``/``x5u``/``jwk``/``x5c`` are refused, not ignored: nothing here would follow them
(keys come only from the provider's configured set), but a token that tells its
verifier where to find the key is either an attack (CVE-2018-0114 and its kin) or from
an issuer configured unlike every real one; refusing says so in the log and the CLI,
and a token the gateway vouched for never carries one to an upstream
(``pass_bearer_token``) whose library might follow it.

Descriptions are fixed texts and the provider's own settings: never a value from the
token, so they are safe in ``WWW-Authenticate`` and in logs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from jwt.algorithms import get_default_algorithms

from gateway.authorize.caller import Caller
from gateway.authorize.claims import flatten_claims
from gateway.authorize.email import is_mailbox
from gateway.bearer_jwt.expect import KUBERNETES, BearerExpectations
from gateway.bearer_jwt.jws import Malformed, Parsed, parse
from gateway.bearer_jwt.keys import KeySet
from gateway.sessions.model import Session

ALG = "alg"
CRIT = "crit"
NESTED_JWT = "nested_jwt"
KEY_REFERENCE = "key_reference"
TOKEN_TYPE = "token_type"
UNKNOWN_KID = "unknown_kid"
SIGNATURE = "signature"
ISSUER = "issuer"
AUDIENCE = "audience"
EXPIRY_MISSING = "expiry_missing"
EXPIRED = "expired"
NOT_YET_VALID = "not_yet_valid"
ISSUED_IN_FUTURE = "issued_in_future"
SUBJECT = "subject"

_KEY_REFERENCES = ("jku", "x5u", "jwk", "x5c")
# typ values of tokens that are signed by the same issuer for the same audience but are
# not access tokens: logout tokens (OIDC Back-Channel Logout), security event tokens
# (RFC 8417), DPoP proofs (RFC 9449).
_NOT_ACCESS_TYPES = frozenset({"logout+jwt", "application/logout+jwt", "secevent+jwt",
                               "application/secevent+jwt", "dpop+jwt",
                               "application/dpop+jwt"})
_ALGORITHMS = {name: algorithm for name, algorithm in get_default_algorithms().items()
               if name in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                           "ES256", "ES384", "ES512", "EdDSA")}
MAX_KID_SHOWN = 64


@dataclass(frozen=True, slots=True)
class Verified:
    """The caller as policy sees it: ``provider``, ``sub``, the ``email`` only where the
    provider vouches for it (else ``""``, and no ``email`` claim either), ``groups``
    from the provider's groups claim, every claim flattened as a session's are
    (``gateway.authorize.claims.flatten_claims``: nested objects such as Kubernetes'
    ``kubernetes.io`` become dotted names), valid until ``expires_at`` (``exp``)."""

    provider: str
    sub: str
    email: str
    groups: tuple[str, ...]
    claims: Mapping[str, tuple[str, ...]]
    expires_at: float
    kid: str = ""

    def caller(self) -> Caller:
        """Who is asking, as decisions see them: this provider vouches for them, no
        session stands behind them, the groups are the token's (``groups_available``:
        the provider's groups claim names them), the e-mail already passed the
        provider's rule (``email`` is ``""`` otherwise)."""
        return Caller(user_id=self.sub, email=self.email, groups=self.groups,
                      claims=self.claims, expires_at=self.expires_at,
                      groups_available=True, provider=self.provider,
                      name=(self.claims.get("name") or ("",))[0], claimed_email=self.email)

    def session(self, now: float) -> Session:
        """A session-shaped identity for code that decides on sessions: no tokens, never
        stored, its id names the provider and subject (no token value)."""
        return Session(id=f"bearer:{self.provider}:{self.sub}", user_id=self.sub,
                       email=self.email, issued_at=now, expires_at=self.expires_at,
                       claims=self.claims, groups=self.groups,
                       name=(self.claims.get("name") or ("",))[0])


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a token was refused: ``check`` (a stable name), ``description`` (fixed text,
    safe to send), and the header's ``kid`` for the log line (bounded, printable)."""

    check: str
    description: str
    kid: str = ""

    def www_authenticate(self) -> str:
        """The ``WWW-Authenticate`` value of the 401 (RFC 6750 3)."""
        # a quoted-string of printable ASCII (a provider id is the operator's text)
        text = "".join(c if " " <= c <= "~" and c not in '"\\' else "?"
                       for c in self.description)
        return f'Bearer error="invalid_token", error_description="{text}"'


@dataclass(frozen=True, slots=True)
class Outcome:
    """One check as ``explain`` ran it."""

    check: str
    passed: bool
    description: str


class _First(Exception):
    def __init__(self, refused: Refused) -> None:
        self.refused = refused


class _Run:
    """The checks of one token; ``first`` stops at the first failure (``verify``),
    otherwise every check that can run is run and recorded (``explain``)."""

    def __init__(self, first: bool) -> None:
        self.first = first
        self.outcomes: list[Outcome] = []
        self.kid = ""
        self.failed = False

    def fail(self, check: str, description: str) -> None:
        self.failed = True
        if self.first:
            raise _First(Refused(check, description, self.kid))
        self.outcomes.append(Outcome(check, False, description))

    def ok(self, check: str, description: str) -> None:
        if not self.first:
            self.outcomes.append(Outcome(check, True, description))


def _shown_kid(kid: Any) -> str:
    if not isinstance(kid, str):
        return ""
    kid = kid[:MAX_KID_SHOWN]
    return kid if kid.isprintable() and kid.isascii() else "(unprintable)"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _header(run: _Run, parsed: Parsed, keys: KeySet) -> None:
    header = parsed.header
    alg = header.get("alg")
    key = None
    if not isinstance(alg, str) or not alg:
        run.fail(ALG, "the token names no algorithm")
    elif alg.lower() == "none":
        run.fail(ALG, "unsigned tokens (alg none) are never accepted")
    elif alg.upper().startswith("HS"):
        run.fail(ALG, "HMAC algorithms are never accepted")
    else:
        run.ok(ALG, "an asymmetric algorithm")
    if "crit" in header:
        run.fail(CRIT, "the token requires an extension (crit) this gateway does not know")
    else:
        run.ok(CRIT, "no critical extensions")
    cty = header.get("cty")
    if isinstance(cty, str) and cty.lower() in ("jwt", "application/jwt"):
        run.fail(NESTED_JWT, "nested tokens (cty JWT) are not accepted")
    else:
        run.ok(NESTED_JWT, "not a nested token")
    if any(name in header for name in _KEY_REFERENCES):
        run.fail(KEY_REFERENCE, "the token names its own key (jku, x5u, jwk or x5c); keys "
                                "come only from the provider's key set")
    else:
        run.ok(KEY_REFERENCE, "no key reference in the header")
    typ = header.get("typ")
    if isinstance(typ, str) and typ.lower() in _NOT_ACCESS_TYPES:
        run.fail(TOKEN_TYPE, "a logout, security event or proof token is not an access "
                             "token")
    elif "events" in parsed.payload:
        run.fail(TOKEN_TYPE, "a token with an events claim (logout or security event) is "
                             "not an access token")
    else:
        run.ok(TOKEN_TYPE, "an access or identity token")
    kid = header.get("kid", "")
    if not isinstance(kid, str):
        run.fail(UNKNOWN_KID, "the key id (kid) is not a string")
    else:
        key = keys.lookup(kid)
        if key is None:
            run.fail(UNKNOWN_KID, f"the key id (kid) is not one of provider "
                                  f"{keys.provider}'s keys")
        else:
            run.ok(UNKNOWN_KID, f"a key of provider {keys.provider}")
    if key is None or not isinstance(alg, str):
        return
    if alg not in key.algorithms:
        run.fail(ALG, f"the algorithm does not fit the key (it allows "
                      f"{', '.join(key.algorithms)})")
        return
    algorithm = _ALGORITHMS.get(alg)
    if algorithm is None:  # unreachable while keys.py and _ALGORITHMS agree
        run.fail(ALG, "the algorithm is not supported")
        return
    if algorithm.verify(parsed.signing_input, key.key, parsed.signature):
        run.ok(SIGNATURE, f"signed with {alg}")
    else:
        run.fail(SIGNATURE, "the signature does not verify with the key")


def _claims(run: _Run, payload: Mapping[str, Any], expect: BearerExpectations,
            now: float, issuer: str) -> None:
    if issuer and payload.get("iss") == issuer:
        run.ok(ISSUER, "issued by the provider's issuer")
    else:
        run.fail(ISSUER, f"the issuer (iss) is not provider {expect.provider}'s")
    aud = payload.get("aud")
    audiences = (aud,) if isinstance(aud, str) else aud if isinstance(aud, list) else ()
    if any(isinstance(a, str) and a in expect.audiences for a in audiences):
        run.ok(AUDIENCE, "meant for one of the provider's audiences")
    else:
        run.fail(AUDIENCE, f"the audience (aud) is not one of provider "
                           f"{expect.provider}'s")
    exp = _number(payload.get("exp"))
    if exp is None:
        run.fail(EXPIRY_MISSING, "the token has no expiry (exp)")
    elif now >= exp + expect.skew:
        run.fail(EXPIRED, "the token has expired")
    else:
        run.ok(EXPIRED, "not expired")
    for name, check, text in (("nbf", NOT_YET_VALID, "the token is not valid yet (nbf)"),
                              ("iat", ISSUED_IN_FUTURE, "the token is issued in the future "
                                                        "(iat)")):
        if name not in payload:
            continue
        value = _number(payload[name])
        if value is None:
            run.fail(check, f"{name} is not a number")
        elif value > now + expect.skew:
            run.fail(check, text)
        else:
            run.ok(check, f"{name} is in the past")
    sub = payload.get("sub")
    if isinstance(sub, str) and sub:
        run.ok(SUBJECT, "names its subject")
    else:
        run.fail(SUBJECT, "the token names no subject (sub)")


def _identity(parsed: Parsed, expect: BearerExpectations, kid: str) -> Verified:
    payload = parsed.payload
    flat = flatten_claims(payload)
    email = payload.get("email")
    vouched = payload.get("email_verified") in (True, "true")
    if not (isinstance(email, str) and is_mailbox(email) and
            (vouched or expect.trust_unverified_email)):
        email = ""
        flat.pop("email", None)
    return Verified(provider=expect.provider, sub=payload["sub"], email=email,
                    groups=flat.get(expect.groups_claim, ()),
                    claims=MappingProxyType(flat), expires_at=float(payload["exp"]),
                    kid=kid)


def _run(run: _Run, token: str, keys: KeySet, expect: BearerExpectations, now: float
         ) -> Verified | None:
    try:
        parsed = parse(token, expect.max_token_bytes)
    except Malformed as exc:
        run.fail(exc.check, exc.description)
        return None
    run.kid = _shown_kid(parsed.header.get("kid", ""))
    _header(run, parsed, keys)
    # ``kubernetes:///``: the cluster's issuer is learned with its keys.
    issuer = keys.issuer if expect.issuer == KUBERNETES else expect.issuer
    _claims(run, parsed.payload, expect, now, issuer)
    if run.failed:
        return None
    return _identity(parsed, expect, run.kid)


def verify(token: str, keys: KeySet, expect: BearerExpectations, now: float
           ) -> Verified | Refused:
    """``token`` (the text after ``Bearer ``) checked against ``keys`` (this provider's
    only) and ``expect`` at ``now`` (seconds since the epoch)."""
    run = _Run(first=True)
    try:
        verified = _run(run, token, keys, expect, now)
    except _First as stop:
        return stop.refused
    assert verified is not None
    return verified


def explain(token: str, keys: KeySet, expect: BearerExpectations, now: float
            ) -> tuple[list[Outcome], Verified | None]:
    """Every check that could run, passed or failed (a malformed token stops at the
    parse), and the identity when all passed: ``gateway policy check --token``."""
    run = _Run(first=False)
    verified = _run(run, token, keys, expect, now)
    return run.outcomes, verified
