"""``gateway policy check --token FILE --provider ID``: a real bearer token verified
offline, every check explained (all that failed, not only the first), and, when it
passes, the identity it gives as the person the route's policy decides for.

The key set is ``--jwks FILE`` (a saved JWKS document: ``curl ISSUER_JWKS_URI``,
``kubectl get --raw /openid/v1/jwks``); the provider's issuer and audiences are
``--issuer`` and ``--audience``. Once ``identity_providers`` is in the configuration,
``--provider ID`` names the entry these come from (its ``issuer``, ``bearer.audiences``,
``jwks_file``, groups claim and e-mail rule), and the flags override it. Nothing is
fetched: the command never goes to the network.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.cli.policy_inputs import InputError, parse_instant

if TYPE_CHECKING:  # the verifier (PyJWT, cryptography) is imported when a token is given
    from gateway.bearer_jwt.keys import KeySet
    from gateway.bearer_jwt.verify import Outcome, Verified
    from gateway.sessions.model import Session

MAX_FILE = 64 * 1024

EPILOG = """\
bearer tokens:
  gateway policy check -c config.yaml --url https://deploy.example.com/ \\
      --token job.jwt --provider github-actions --jwks github-jwks.json \\
      --issuer https://token.actions.githubusercontent.com \\
      --audience https://gateway.example.com"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("bearer token (instead of --user/--email)")
    group.add_argument("--token", metavar="FILE",
                       help="a bearer JWT (the file's text; a 'Bearer ' prefix is dropped)")
    group.add_argument("--provider", metavar="ID", help="the provider it is checked against")
    group.add_argument("--jwks", metavar="FILE", help="the provider's key set (JWKS JSON)")
    group.add_argument("--issuer", metavar="URL", help="the provider's exact issuer")
    group.add_argument("--audience", metavar="A", action="append", default=[],
                       help="an audience the provider accepts (repeat)")
    group.add_argument("--groups-claim", metavar="NAME", default="groups",
                       help="the claim holding the caller's groups (default groups)")


@dataclass(frozen=True, slots=True)
class TokenCheck:
    provider: str
    keys: KeySet
    outcomes: tuple[Outcome, ...]
    verified: Verified | None
    said: dict[str, Any]  # what the token says (unverified), for the operator only
    now: float

    def session(self) -> Session | None:
        return self.verified.session(self.now) if self.verified is not None else None


def _read(path: str, flag: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise InputError(f"{flag} {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE:
        raise InputError(f"{flag} {path}: larger than {MAX_FILE // 1024} KiB")
    return data


def _said(token: str) -> dict[str, Any]:
    """The unverified header and claims, to show the operator what the token says."""
    from gateway.bearer_jwt.jws import Malformed, parse

    try:
        parsed = parse(token, 1 << 20)
    except Malformed:
        return {}
    return {**{f"header.{k}": v for k, v in parsed.header.items()}, **parsed.payload}


def check_token(args: argparse.Namespace) -> TokenCheck | None:
    """The token's checks (``None`` without ``--token``; ``InputError`` for arguments
    that cannot be used)."""
    from gateway.bearer_jwt.expect import BearerExpectations
    from gateway.bearer_jwt.keys import JwksError, key_set
    from gateway.bearer_jwt.verify import explain

    if not args.token:
        for flag in ("provider", "jwks", "issuer"):
            if getattr(args, flag):
                raise InputError(f"--{flag} describes a bearer token: give --token FILE")
        return None
    if args.user or args.email or args.groups or args.claim:
        raise InputError("--token is the caller: leave out --user, --email, --groups and "
                         "--claim")
    missing = [f"--{flag}" for flag in ("provider", "jwks", "issuer") if not getattr(args, flag)]
    if not args.audience:
        missing.append("--audience")
    if missing:
        raise InputError(f"--token needs {', '.join(missing)} (identity_providers is not "
                         "in this configuration)")
    try:
        expect = BearerExpectations(args.provider, args.issuer, tuple(args.audience),
                                    groups_claim=args.groups_claim)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    try:
        keys = key_set(args.provider, _read(args.jwks, "--jwks"))
    except JwksError as exc:
        raise InputError(f"--jwks {args.jwks}: {exc}") from None
    text = _read(args.token, "--token").decode("ascii", "replace").strip()
    if text[:7].lower() == "bearer ":
        text = text[7:].strip()
    now = float(int(time.time())) if args.at is None else parse_instant(args.at)
    outcomes, verified = explain(text, keys, expect, now)
    return TokenCheck(args.provider, keys, tuple(outcomes), verified, _said(text), now)


def _when(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, dt.UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, ValueError, OSError):
            pass
    return repr(value)


def _detail(outcome: Outcome, said: dict[str, Any], args: argparse.Namespace,
            check: TokenCheck) -> str:
    """What the token says beside what was expected, for a failed check (the operator's
    own token, on their own terminal: the gateway never sends this)."""
    from gateway.bearer_jwt import verify as checks

    name = outcome.check
    if name == checks.ISSUER:
        return f" (the token says {said.get('iss')!r}, expected {args.issuer!r})"
    if name == checks.AUDIENCE:
        return f" (the token says {said.get('aud')!r}, expected one of {args.audience!r})"
    if name in (checks.EXPIRED, checks.EXPIRY_MISSING):
        return f" (exp {_when(said.get('exp'))}, now {_when(check.now)})"
    if name == checks.NOT_YET_VALID:
        return f" (nbf {_when(said.get('nbf'))}, now {_when(check.now)})"
    if name == checks.ISSUED_IN_FUTURE:
        return f" (iat {_when(said.get('iat'))}, now {_when(check.now)})"
    if name == checks.UNKNOWN_KID:
        return (f" (the token names {said.get('header.kid')!r}; the key set has "
                f"{sorted(check.keys.keys) or 'no usable key'})")
    if name == checks.ALG:
        return f" (the token says {said.get('header.alg')!r})"
    return ""


def token_lines(check: TokenCheck, args: argparse.Namespace) -> list[str]:
    failed = [o for o in check.outcomes if not o.passed]
    lines = [f"token: provider {check.provider}, key set {args.jwks} "
             f"({len(check.keys.keys)} usable keys)"]
    lines.extend(f"  skipped key: {reason}" for reason in check.keys.skipped)
    for outcome in check.outcomes:
        mark = "ok    " if outcome.passed else "FAILED"
        extra = "" if outcome.passed else _detail(outcome, check.said, args, check)
        lines.append(f"  {mark} {outcome.check}: {outcome.description}{extra}")
    if failed:
        lines.append(f"token: refused, {len(failed)} check(s) failed: the gateway answers "
                     f"401 with error_description \"{failed[0].description}\"")
    else:
        lines.append("token: verified")
    return lines


def token_json(check: TokenCheck) -> dict[str, Any]:
    return {"provider": check.provider, "verified": check.verified is not None,
            "checks": [{"check": o.check, "passed": o.passed, "description": o.description}
                       for o in check.outcomes],
            "skipped_keys": list(check.keys.skipped)}
