"""The server-side session: who signed in, their claims and tokens, until when."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Session:
    """One sign-in. ``claims`` are the IdP's claims (ID token merged with userinfo),
    flattened: dotted keys, every value a tuple of strings (reference, Rules for policy
    values 1)."""

    id: str
    user_id: str
    email: str
    issued_at: float
    expires_at: float
    claims: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    groups: tuple[str, ...] = ()
    name: str = ""
    id_token: str = ""
    access_token: str = ""
    refresh_token: str = ""
    token_expires_at: float = 0.0
    # the provider's ``iss`` and the ID token's ``sid`` (its session at the provider),
    # which a back-channel logout names; "" in sessions stored before they were recorded
    idp_issuer: str = ""
    idp_sid: str = ""

    def valid(self, now: float) -> bool:
        return now < self.expires_at
