"""Who is asking, as every decision and what it hands on see them: a ``Caller``.

Not a ``Session``: a session is one way to be someone (a person signed in through the
provider, a record with tokens and a cookie); a bearer token verified on the request is
another, with no record at all. A decision, the policy's facts, the assertion, the claim
headers, the audit event and the access log need only who it is: the provider that
vouches for them, the user id, the e-mail address usable for decisions, the groups,
the claims, until when, and the session when there is one.

``caller_of`` is the one place a session becomes a caller: the e-mail the provider did
not vouch for left out (``gateway.authorize.email``), the directory's groups when
there is a directory and the session is of the directory's provider. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.authorize.email import email_refusal
from gateway.sessions.model import Session
from gateway.sessions.store import DirectoryGroups


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking.

    ``provider``: the id of the identity provider that vouches for them (a session's:
    ``Session.provider``, ``default`` for the idp_* settings' implicit one). ``email``:
    the address decisions may use (``""`` when
    there is none or it was refused: ``claimed_email`` is then what the provider sent,
    ``email_refusal`` why it is not used). ``groups`` and whether group data exists at
    all (``groups_available``: a directory, or a claim that names the groups); ``claims``
    flattened (``gateway.authorize.claims.flatten_claims``). ``expires_at``: the end of
    the session or of the token. ``session_id``: ``""`` when no session stands behind
    the caller (a bearer token). ``client_id``: the OAuth client acting for the person
    (an MCP client's id: its metadata document's URL or its registered id), ``""`` for
    the person themself."""

    user_id: str
    email: str
    groups: tuple[str, ...]
    claims: Mapping[str, tuple[str, ...]]
    expires_at: float
    groups_available: bool = False
    provider: str = ""
    session_id: str = ""
    name: str = ""
    claimed_email: str = ""
    email_refusal: str = ""
    client_id: str = ""

    def signed_in(self, now: float) -> bool:
        """Whether decisions see someone at ``now``: a user id, not expired. Anyone else
        is decided as someone not signed in, whatever else they hold."""
        return bool(self.user_id) and now < self.expires_at

    @property
    def who(self) -> str:
        """How pages and logs name them: the e-mail decisions use, else the user id."""
        return self.email or self.user_id

    @property
    def assertion_groups(self) -> tuple[str, ...]:
        """The groups the assertion and the ``groups`` claim header carry: the
        directory's, else the provider's ``groups`` claim."""
        return self.groups or tuple(self.claims.get("groups", ()))


def caller_of(session: Session, *, allow_unverified_email: bool, groups_available: bool,
              directory: DirectoryGroups | None = None) -> Caller:
    """``session``'s person as decisions see them: without an e-mail the provider did not
    vouch for (and without its ``email`` claim, which claim headers and
    ``allowed_idp_claims`` could read), with the groups ``directory`` holds for them
    (matched by the user id, or by the e-mail decisions may use) when there is one,
    else the session's (the provider's ``groups`` claim).

    With a directory, a session another provider signed in has no groups: the
    directory belongs to one provider (``directory.provider``), and a user id or an
    e-mail address names one of its people only when that provider vouches for it (a
    partner provider saying ``email=alice@corp.example``, verified, is not the corp
    directory's alice). Nor does such a session get its own provider's ``groups``
    claim: group rules were written for the directory's groups."""
    refusal = email_refusal(session.email, session.claims, allow_unverified_email)
    email = "" if refusal else session.email
    claims = session.claims
    if refusal:
        claims = MappingProxyType({k: v for k, v in claims.items() if k != "email"})
    if directory is None:
        groups = session.groups
    elif session.provider == directory.provider:
        groups = directory.groups_for(session.user_id, email)
    else:
        groups = ()
    return Caller(user_id=session.user_id, email=email, groups=groups,
                  claims=claims, expires_at=session.expires_at,
                  groups_available=groups_available, provider=session.provider,
                  session_id=session.id,
                  name=session.name, claimed_email=session.email, email_refusal=refusal)
