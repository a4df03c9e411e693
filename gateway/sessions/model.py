"""The server-side session: who signed in, their claims and tokens, until when."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.config.providers import IMPLICIT_ID


@dataclass(frozen=True, slots=True)
class Session:
    """One sign-in, through ``provider``. ``claims`` are the IdP's claims (ID token
    merged with userinfo), flattened: dotted keys, every value a tuple of strings
    (reference, Rules for policy values 1)."""

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
    # the identity provider that signed it in (its id); a session stored before sessions
    # named theirs was made by the one provider there was, the idp_* settings' implicit one
    provider: str = IMPLICIT_ID
    # the provider's ``iss`` and the ID token's ``sid`` (its session at the provider),
    # which a back-channel logout names; "" in sessions stored before they were recorded
    idp_issuer: str = ""
    idp_sid: str = ""

    def valid(self, now: float) -> bool:
        return now < self.expires_at
