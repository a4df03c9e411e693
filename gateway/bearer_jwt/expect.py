"""What one provider's bearer tokens must say: a plain value, built from the provider's
configuration by whoever reads it (``identity_providers``)."""

from __future__ import annotations

from dataclasses import dataclass

# Compact JWS as sent: GitHub Actions' tokens are about 1.2 KiB, Kubernetes' projected
# tokens about 1 KiB, a company IdP's access token with a few dozen groups 2-4 KiB
# (Entra ID stops listing groups past 200 and sends a link instead, to stay well under
# this). 8 KiB is also what most proxies allow for one header line (nginx's
# large_client_header_buffers), so a longer token would not arrive through them anyway;
# the bound keeps the base64 and JSON work per refused token small.
MAX_TOKEN_BYTES = 8 * 1024
CLOCK_SKEW = 60.0  # seconds, for exp, nbf and iat (the figure)
# The issuer of a ``kubernetes:///`` provider whose issuer is not given: learned from the
# API server's discovery document with its keys (``KeySet.issuer``).
KUBERNETES = "kubernetes:///"


@dataclass(frozen=True, slots=True)
class BearerExpectations:
    """``provider``: the provider's id (in ``Verified``, logs, the ``provider``
    criterion). ``issuer``: the exact ``iss`` (no trailing-slash leniency: issuers are
    compared as strings, as OIDC Core says). ``audiences``: ``aud`` must name one of
    them; there is always at least one (an empty tuple would mean "any audience", which
    lets a token minted for another service in: a ``ValueError``). ``groups_claim``: the
    claim holding the caller's groups. ``trust_unverified_email``: take ``email``
    without ``email_verified: true`` (off: an address nobody verified proves nothing).
    """

    provider: str
    issuer: str
    audiences: tuple[str, ...]
    groups_claim: str = "groups"
    trust_unverified_email: bool = False
    skew: float = CLOCK_SKEW
    max_token_bytes: int = MAX_TOKEN_BYTES

    def __post_init__(self) -> None:
        if not self.provider:
            raise ValueError("a bearer provider needs an id")
        if not self.issuer:
            raise ValueError(f"bearer provider {self.provider!r}: issuer is empty")
        if not isinstance(self.audiences, tuple) or not self.audiences:
            raise ValueError(f"bearer provider {self.provider!r}: audiences is empty; a "
                             "bearer provider names the audiences its tokens must carry "
                             "(never any)")
        if any(not isinstance(a, str) or not a for a in self.audiences):
            raise ValueError(f"bearer provider {self.provider!r}: an audience is empty")
        if not self.groups_claim:
            raise ValueError(f"bearer provider {self.provider!r}: groups_claim is empty")
        if not 0 <= self.skew <= 600:
            raise ValueError(f"bearer provider {self.provider!r}: skew must be 0-600 s")
        if not 512 <= self.max_token_bytes <= 64 * 1024:
            raise ValueError(f"bearer provider {self.provider!r}: max_token_bytes must be "
                             "512 B - 64 KiB")
