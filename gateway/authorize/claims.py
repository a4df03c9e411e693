"""Identity-provider claims as policy values: flattened maps of string tuples.

Rules for policy values 1: nested maps become dotted keys (``a`` containing ``b`` is
``a.b``), a scalar becomes a one-element tuple, a list stays a list. Every value is a
string so that configured values (YAML) and IdP values (JSON) compare alike: booleans
are ``"true"``/``"false"``, integral numbers have no decimal point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.sessions.model import Session


def flatten_claims(claims: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """``{"a": {"aa": {"aaa": 12345}, "ab": [1, 2]}}`` -> ``{"a.aa.aaa": ("12345",),
    "a.ab": ("1", "2")}``. ``None`` values (and ``None`` list items) are dropped."""
    out: dict[str, tuple[str, ...]] = {}
    _flatten(claims, "", out)
    return out


def _flatten(claims: Mapping[str, Any], prefix: str, out: dict[str, tuple[str, ...]]) -> None:
    for key, value in claims.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, f"{name}.", out)
        elif isinstance(value, list | tuple):
            out[name] = tuple(claim_string(item) for item in value if item is not None)
        elif value is not None:
            out[name] = (claim_string(value),)


def claim_groups(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """The IdP's ``groups`` claim as strings (other value types are ignored)."""
    return tuple(str(g) for g in claims.get("groups") or () if isinstance(g, str | int))


def claim_string(value: Any) -> str:
    """One claim value as a string: ``True`` -> ``"true"``, ``2.0`` -> ``"2"``; maps and
    lists nested inside a list become compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return str(value)


def session_from_claims(claims: Mapping[str, Any], session_id: str, now: float,
                        lifetime: float, *, id_token: str = "", access_token: str = "",
                        refresh_token: str = "", token_expires_at: float = 0.0) -> Session:
    """The session a sign-in makes of the provider's claims (``sub``, ``email``,
    ``name``, every claim flattened, the ``groups`` claim), living ``lifetime`` seconds.
    ``gateway policy check`` builds the person it checks with this too, so its person
    and a signed-in one are alike."""
    return Session(id=session_id, user_id=str(claims.get("sub", "")),
                   email=str(claims.get("email", "")), name=str(claims.get("name", "")),
                   issued_at=now, expires_at=now + lifetime, claims=flatten_claims(claims),
                   groups=claim_groups(claims), id_token=id_token, access_token=access_token,
                   refresh_token=refresh_token, token_expires_at=token_expires_at)
