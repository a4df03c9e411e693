"""The authorization server's tokens and what the databroker keeps of them. Pure.

Every code and token is 256 bits from ``secrets`` behind a prefix that says what it is
(``gwmcp_ac_`` code, ``gwmcp_at_`` access token, ``gwmcp_rt_`` refresh token: a leaked
one is recognisable in a log or a secret scanner). The databroker keeps only its
SHA-256 (``token_hash``), so a read of the store (or a Redis dump) yields nothing a
client could present; records are values of this module as JSON.

A grant is one client's authorization, by one person, for one route's resource,
resting on the person's gateway session (``session_id``): the session's end ends every
token of the grant at its next use. A grant lives until its session would expire;
its refresh token rotates on every use (``refresh_hash`` is the current one), and a
refresh token presented again after it was rotated ends the grant."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

CODE_PREFIX = "gwmcp_ac_"
ACCESS_PREFIX = "gwmcp_at_"
REFRESH_PREFIX = "gwmcp_rt_"
CODE_SECONDS = 60.0  # OAuth 2.1 4.1.2: short; a person's browser hands it on at once
ACCESS_SECONDS = 300.0  # every five minutes the client shows its refresh token again
_BODY = 43  # characters of token_urlsafe(32): 256 bits


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The record id of a code or token: SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def shaped(token: str, prefix: str) -> bool:
    """Whether ``token`` could be one of ours of this kind (anything else is not looked
    up: no store read for a guess of another shape)."""
    return len(token) == len(prefix) + _BODY and token.startswith(prefix)


@dataclass(frozen=True, slots=True)
class Code:
    """An authorization code: bound to the client, the redirect URI, the PKCE
    challenge, the resource and the session it was issued in; ``grant_id`` is the grant
    it makes when redeemed (named before, so a replay can end it)."""

    client_id: str
    redirect_uri: str
    challenge: str
    resource: str
    scope: str
    session_id: str
    expires_at: float
    grant_id: str
    # the generation of the person's consent the code was issued under
    consent: str = ""


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    client_id: str
    resource: str
    scope: str
    session_id: str
    provider: str
    user_id: str
    created_at: float
    expires_at: float
    refresh_hash: str
    # the generation of the consent the grant rests on: a grant lives only while
    # that very consent does (not one given again after a revocation)
    consent: str = ""


@dataclass(frozen=True, slots=True)
class Token:
    """An access or refresh token's record (``kind``: ``access`` or ``refresh``)."""

    kind: str
    grant_id: str
    client_id: str
    resource: str
    session_id: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class Consent:
    """What a person allowed one client: the resources (routes) and when; ``grants``
    the newest grants made since, which revoking the consent ends at once;
    ``generation`` is new each time the consent is given afresh, and every code and
    grant names the one it was made under (so none outlives the consent, listed or
    not, and none comes back with a later consent)."""

    client_id: str
    name: str
    resources: tuple[str, ...]
    granted_at: float
    grants: tuple[str, ...] = ()
    generation: str = ""


T = TypeVar("T", Code, Grant, Token, Consent)


def to_json(value: Code | Grant | Token | Consent) -> bytes:
    return json.dumps(asdict(value), separators=(",", ":"), sort_keys=True).encode()


def from_json(kind: type[T], raw: bytes) -> T | None:
    """The value a record holds (``None``: unreadable, or of another shape)."""
    try:
        data: Any = json.loads(raw)
        if not isinstance(data, dict):
            return None
        values = {f.name: data[f.name] for f in fields(kind) if f.name in data}
        for name in ("resources", "grants"):
            if name in values:
                values[name] = tuple(str(v) for v in values[name])
        return kind(**values)
    except (ValueError, TypeError, KeyError):
        return None


def consents_to_json(consents: dict[str, Consent]) -> bytes:
    return json.dumps({k: asdict(v) for k, v in consents.items()},
                      separators=(",", ":"), sort_keys=True).encode()


def consents_from_json(raw: bytes) -> dict[str, Consent]:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    out: dict[str, Consent] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            consent = from_json(Consent, json.dumps(value).encode())
            if consent is not None:
                out[str(key)] = consent
    return out
