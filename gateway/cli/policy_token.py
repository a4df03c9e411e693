"""``gateway policy check --token FILE --provider ID``: a real bearer token verified
offline, every check explained (all that failed, not only the first), and, when it
passes, the identity it gives as the person the route's policy decides for.

The provider is ``--provider ID``: its ``identity_providers`` entry gives the key set
(``jwks_file``), the issuer, the audiences (``bearer.audiences``), the groups claim and
the e-mail rule; ``--jwks FILE`` (a saved JWKS document: ``curl ISSUER_JWKS_URI``,
``kubectl get --raw /openid/v1/jwks``), ``--issuer`` and ``--audience`` override them,
and stand for them all for a provider the configuration does not have. Nothing is
fetched: the command never goes to the network (so ``kubernetes:///`` needs the
cluster's issuer given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.cli.policy_inputs import InputError, parse_instant
from gateway.config.material import Reader

if TYPE_CHECKING:  # the verifier (PyJWT, cryptography) is imported when a token is given
    from gateway.authorize.caller import Caller
    from gateway.bearer_jwt.expect import BearerExpectations
    from gateway.bearer_jwt.keys import KeySet
    from gateway.bearer_jwt.verify import Outcome, Verified

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
    # (the person's --provider of ``policy_inputs``, when there: one flag, read by both)
    with contextlib.suppress(argparse.ArgumentError):
        group.add_argument("--provider", metavar="ID",
                           help="the provider it is checked against")
    group.add_argument("--jwks", metavar="FILE",
                       help="the provider's key set (JWKS JSON; default its jwks_file)")
    group.add_argument("--issuer", metavar="URL",
                       help="the provider's exact issuer (default its issuer)")
    group.add_argument("--audience", metavar="A", action="append", default=[],
                       help="an audience the provider accepts (repeat; default its "
                            "bearer.audiences)")
    group.add_argument("--groups-claim", metavar="NAME",
                       help="the claim holding the caller's groups (default its "
                            "bearer.groups_claim, or groups)")


@dataclass(frozen=True, slots=True)
class TokenCheck:
    expect: BearerExpectations
    jwks: str  # the key set's file
    keys: KeySet
    outcomes: tuple[Outcome, ...]
    verified: Verified | None
    said: dict[str, Any]  # what the token says (unverified), for the operator only
    now: float

    def caller(self) -> Caller | None:
        """Who the token makes the caller (``None``: refused, the daemon answers 401)."""
        return self.verified.caller() if self.verified is not None else None


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


def configured(snapshot: Any, provider: str) -> Any:
    """The ``identity_providers`` entry ``provider`` names (``None``: none, or a
    configuration without that setting)."""
    providers = getattr(getattr(snapshot, "options", None), "identity_providers", ())
    return next((p for p in providers if getattr(p, "id", None) == provider), None)


def check_token(args: argparse.Namespace, snapshot: Any = None) -> TokenCheck | None:
    """The token's checks (``None`` without ``--token``; ``InputError`` for arguments
    that cannot be used). The provider's settings come from its ``identity_providers``
    entry in ``snapshot`` when there is one (``issuer``, ``jwks_file``,
    ``bearer.audiences``, ``bearer.groups_claim``, ``bearer.allow_unverified_email``),
    each overridden by its flag."""
    from gateway.bearer_jwt.expect import KUBERNETES, BearerExpectations
    from gateway.bearer_jwt.keys import JwksError, key_set
    from gateway.bearer_jwt.verify import explain

    if not args.token:
        for flag in ("jwks", "issuer", "groups_claim"):
            if getattr(args, flag):
                raise InputError(f"--{flag.replace('_', '-')} describes a bearer token: "
                                 "give --token FILE")
        return None
    if args.user or args.email or args.groups or args.claim:
        raise InputError("--token is the caller: leave out --user, --email, --groups and "
                         "--claim")
    if not args.provider:
        raise InputError("--token needs --provider ID (the provider it is checked against)")
    entry = configured(snapshot, args.provider)
    rules = getattr(entry, "bearer", None)
    issuer = args.issuer or getattr(entry, "issuer", "")
    jwks = args.jwks or getattr(entry, "jwks_file", "")
    if jwks and not args.jwks:  # the entry's file, found as the daemon finds it
        jwks = Reader(os.path.dirname(os.path.abspath(args.config))).resolve(jwks)
    audiences = tuple(args.audience) or tuple(getattr(rules, "audiences", ()))
    missing = [flag for flag, value in (("--jwks", jwks), ("--issuer", issuer),
                                        ("--audience", audiences)) if not value]
    if missing:
        where = (f"provider {args.provider} has no bearer settings for them" if entry
                 else f"no identity_providers entry has the id {args.provider}")
        raise InputError(f"--token needs {', '.join(missing)} ({where})")
    if issuer == KUBERNETES:
        raise InputError(f"provider {args.provider}'s issuer is {KUBERNETES}, which the "
                         "daemon reads from the API server: give the cluster's issuer "
                         "with --issuer (nothing is fetched here)")
    try:
        expect = BearerExpectations(
            args.provider, issuer, audiences,
            groups_claim=args.groups_claim or getattr(rules, "groups_claim", "groups"),
            trust_unverified_email=bool(getattr(rules, "allow_unverified_email", False)))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    flag = "--jwks" if args.jwks else f"provider {args.provider}'s jwks_file"
    try:
        keys = key_set(args.provider, _read(jwks, flag))
    except JwksError as exc:
        raise InputError(f"{flag} {jwks}: {exc}") from None
    text = _read(args.token, "--token").decode("ascii", "replace").strip()
    if text[:7].lower() == "bearer ":
        text = text[7:].strip()
    now = float(int(time.time())) if args.at is None else parse_instant(args.at)
    outcomes, verified = explain(text, keys, expect, now)
    return TokenCheck(expect, jwks, keys, tuple(outcomes), verified, _said(text), now)


def _when(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, dt.UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, ValueError, OSError):
            pass
    return repr(value)


def _detail(outcome: Outcome, said: dict[str, Any], check: TokenCheck) -> str:
    """What the token says beside what was expected, for a failed check (the operator's
    own token, on their own terminal: the gateway never sends this)."""
    from gateway.bearer_jwt import verify as checks

    name = outcome.check
    if name == checks.ISSUER:
        return f" (the token says {said.get('iss')!r}, expected {check.expect.issuer!r})"
    if name == checks.AUDIENCE:
        return (f" (the token says {said.get('aud')!r}, expected one of "
                f"{list(check.expect.audiences)!r})")
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


def token_lines(check: TokenCheck) -> list[str]:
    failed = [o for o in check.outcomes if not o.passed]
    lines = [f"token: provider {check.expect.provider}, key set {check.jwks} "
             f"({len(check.keys.keys)} usable keys)"]
    lines.extend(f"  skipped key: {reason}" for reason in check.keys.skipped)
    for outcome in check.outcomes:
        mark = "ok    " if outcome.passed else "FAILED"
        extra = "" if outcome.passed else _detail(outcome, check.said, check)
        lines.append(f"  {mark} {outcome.check}: {outcome.description}{extra}")
    if failed:
        lines.append(f"token: refused, {len(failed)} check(s) failed: the gateway answers "
                     f"401 with error_description \"{failed[0].description}\"")
    else:
        lines.append("token: verified")
    return lines


def token_json(check: TokenCheck) -> dict[str, Any]:
    return {"provider": check.expect.provider, "verified": check.verified is not None,
            "checks": [{"check": o.check, "passed": o.passed, "description": o.description}
                       for o in check.outcomes],
            "skipped_keys": list(check.keys.skipped)}
