"""Codes, grants, tokens and consents in the databroker (memory or Redis alike, so
every worker and split-mode process agrees): issuing, redeeming, rotating, revoking.

What must happen once among all processes happens through the store's lease (Redis
``SET NX PX``, the memory store's, the databroker's over gRPC), held by no one who
renews it: a code is redeemed once (``once:mcp.code:HASH``, for the code's life) and a
refresh token used once (``once:mcp.refresh:HASH``, for a minute: two uses at once;
later, the grant naming the token's successor refuses it). The second attempt of
either is a replay: it ends the grant the first one made or continued (OAuth 2.1 4.1.3
and 4.3.1; the MCP text requires rotation for public clients). A code's and a token's
record stays until it expires, so a replay finds the grant it has to end.

A person's consents are one record per person (provider and user id), changed under a
lease; each names the client's newest grants, which revoking the consent ends at once.
Each consent has a generation, new whenever it is given afresh; a code and its grant
carry the generation they were made under, and redeeming, refreshing and using an
access token each require that very consent to be in force: a grant the record no
longer lists, a code redeemed after the revocation, a grant from before a revocation
followed by a new consent all end there."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from twisted.internet.task import deferLater
from twisted.logger import Logger

from gateway.databroker.records import (
    MCP_CODE,
    MCP_CONSENT,
    MCP_GRANT,
    MCP_TOKEN,
    RecordStore,
    StorageUnavailable,
)
from gateway.mcp_oauth.authorize_request import AuthorizeAsk
from gateway.mcp_oauth.pkce import verified
from gateway.mcp_oauth.resources import within
from gateway.mcp_oauth.tokens import (
    ACCESS_PREFIX,
    ACCESS_SECONDS,
    CODE_PREFIX,
    CODE_SECONDS,
    REFRESH_PREFIX,
    Code,
    Consent,
    Grant,
    Token,
    consents_from_json,
    consents_to_json,
    from_json,
    new_token,
    shaped,
    to_json,
    token_hash,
)
from gateway.sessions.model import Session

log = Logger()

LEASE_SECONDS = 10.0
LEASE_TRIES = 40
LEASE_WAIT = 0.025
# the newest grants a consent lists (ended at once on revocation); older ones end at
# their next use, which checks the consent's generation
GRANTS_PER_CONSENT = 100
# how long a refresh token's once-lease is held: longer than a token request takes
REFRESH_CLAIM_SECONDS = 60.0
# the consent generation of a code issued with no consent in force: matches none
NO_CONSENT = "-"

# the session a grant rests on, as the store holds it now (None: ended)
SessionOf = Callable[[str], Awaitable[Session | None]]


class TokenError(Exception):
    """An OAuth error of the token or revocation endpoint (RFC 6749 5.2)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status


@dataclass(frozen=True, slots=True)
class Issued:
    access_token: str
    refresh_token: str
    expires_in: int
    scope: str
    grant: Grant


def person_key(provider: str, user_id: str) -> str:
    return hashlib.sha256(f"{provider}\x00{user_id}".encode()).hexdigest()


class Grants:
    def __init__(self, records: RecordStore, reactor: Any,
                 clock: Callable[[], float]) -> None:
        self.records = records
        self.reactor = reactor
        self.clock = clock
        # called when this process ends a grant or revokes a token (the resource
        # server's cache; other processes learn it from the change stream)
        self.on_end: list[Callable[[], None]] = []

    def _ended(self) -> None:
        for callback in self.on_end:
            callback()

    # -- codes

    async def issue_code(self, ask: AuthorizeAsk, session: Session) -> str:
        code = new_token(CODE_PREFIX)
        consent = (await self.consents(session.provider, session.user_id)).get(
            ask.client_id)
        # a code issued with no consent in force can never be redeemed
        generation = consent.generation if consent is not None else NO_CONSENT
        expires = self.clock() + CODE_SECONDS
        value = Code(ask.client_id, ask.redirect_uri, ask.challenge, ask.resource,
                     ask.scope, session.id, expires, os.urandom(16).hex(), generation)
        await self.records.put(MCP_CODE, token_hash(code), to_json(value), expires)
        return code

    async def redeem(self, code: str, client_id: str, redirect_uri: str, verifier: str,
                     resource: str, session_of: SessionOf) -> Issued:
        """The authorization code grant (OAuth 2.1 4.1.3 with RFC 8707)."""
        if not shaped(code, CODE_PREFIX):
            raise TokenError("invalid_grant", "the code is not one this server issued")
        key = token_hash(code)
        record = await self.records.get(MCP_CODE, key)
        value = from_json(Code, record.data) if record is not None and \
            not record.deleted else None
        now = self.clock()
        if value is None or now >= value.expires_at:
            raise TokenError("invalid_grant", "the code is unknown or has expired")
        if not await self._once(f"mcp.code:{key}", value.expires_at - now):
            await self.end(value.grant_id, "authorization code used twice")
            raise TokenError("invalid_grant", "the code was already used; the tokens "
                             "issued for it are revoked")
        # spent now, whatever follows: a code is tried once
        if value.client_id != client_id:
            raise TokenError("invalid_grant", "the code was issued to another client")
        if value.redirect_uri != redirect_uri:
            raise TokenError("invalid_grant", "redirect_uri differs from the "
                             "authorization request's")
        if not verified(verifier, value.challenge):
            raise TokenError("invalid_grant", "code_verifier does not match the "
                             "code_challenge (PKCE S256)")
        if not resource:
            raise TokenError("invalid_target", "resource is required (RFC 8707)")
        if not within(resource, value.resource):
            raise TokenError("invalid_target", "resource differs from the authorization "
                             "request's")
        session = await session_of(value.session_id)
        if session is None or not session.valid(now):
            raise TokenError("invalid_grant", "the sign-in this code was issued in has "
                             "ended")
        grant = Grant(value.grant_id, client_id, value.resource, value.scope, session.id,
                      session.provider, session.user_id, now, session.expires_at, "",
                      value.consent)
        if not await self._in_force(grant):
            raise TokenError("invalid_grant", "the person revoked this client's consent "
                             "after the code was issued")
        issued = await self._tokens(grant)
        if not await self._add_to_consent(grant):
            # revoked between the check and now: the grant is listed nowhere, so end it
            await self.end(grant.id, "the person revoked the client's consent")
            raise TokenError("invalid_grant", "the person revoked this client's consent "
                             "after the code was issued")
        return issued

    # -- tokens

    async def _tokens(self, grant: Grant) -> Issued:
        """A new access and refresh token for ``grant`` (stored with the grant naming
        the new refresh token)."""
        now = self.clock()
        access, refresh = new_token(ACCESS_PREFIX), new_token(REFRESH_PREFIX)
        access_until = min(now + ACCESS_SECONDS, grant.expires_at)
        grant = replace(grant, refresh_hash=token_hash(refresh))
        await self.records.put(MCP_GRANT, grant.id, to_json(grant), grant.expires_at)
        await self.records.put(MCP_TOKEN, token_hash(refresh), to_json(Token(
            "refresh", grant.id, grant.client_id, grant.resource, grant.session_id,
            grant.expires_at)), grant.expires_at)
        await self.records.put(MCP_TOKEN, token_hash(access), to_json(Token(
            "access", grant.id, grant.client_id, grant.resource, grant.session_id,
            access_until)), access_until)
        return Issued(access, refresh, max(int(access_until - now), 0), grant.scope, grant)

    async def refresh(self, token: str, client_id: str, resource: str,
                      session_of: SessionOf) -> Issued:
        """The refresh token grant, rotating: the token is spent, a new pair issued; a
        spent one presented again ends the grant."""
        found = await self._token(token, REFRESH_PREFIX, "refresh")
        if found is None:
            raise TokenError("invalid_grant", "the refresh token is unknown, expired or "
                             "revoked")
        key, value = found
        now = self.clock()
        if value.client_id != client_id:
            raise TokenError("invalid_grant", "the refresh token was issued to another "
                             "client")
        grant = await self.grant(value.grant_id)
        if grant is None:
            raise TokenError("invalid_grant", "the grant of this refresh token has ended")
        # the grant names the one good refresh token; the lease settles two uses at
        # once (after it, the grant already names the successor)
        if grant.refresh_hash != key or not await self._once(
                f"mcp.refresh:{key}", REFRESH_CLAIM_SECONDS):
            await self.end(grant.id, "refresh token used twice")
            raise TokenError("invalid_grant", "the refresh token was already used; the "
                             "grant is revoked")
        if resource and not within(resource, grant.resource):
            raise TokenError("invalid_target", "resource differs from the grant's")
        if not await self._in_force(grant):
            await self.end(grant.id, "the person revoked the client's consent")
            raise TokenError("invalid_grant", "the person revoked this client's consent")
        session = await session_of(grant.session_id)
        if session is None or not session.valid(now):
            await self.end(grant.id, "the session ended")
            raise TokenError("invalid_grant", "the sign-in behind this grant has ended")
        return await self._tokens(replace(grant, expires_at=session.expires_at))

    async def _token(self, token: str, prefix: str, kind: str) -> tuple[str, Token] | None:
        if not shaped(token, prefix):
            return None
        key = token_hash(token)
        record = await self.records.get(MCP_TOKEN, key)
        if record is None or record.deleted:
            return None
        value = from_json(Token, record.data)
        if value is None or value.kind != kind or self.clock() >= value.expires_at:
            return None
        return key, value

    async def access(self, token: str) -> tuple[Token, Grant] | None:
        """The access token's record and its grant, both in force, and the consent the
        grant rests on too (``None``: not)."""
        found = await self._token(token, ACCESS_PREFIX, "access")
        if found is None:
            return None
        grant = await self.grant(found[1].grant_id)
        if grant is None or not await self._in_force(grant):
            return None
        return found[1], grant

    async def grant(self, grant_id: str) -> Grant | None:
        record = await self.records.get(MCP_GRANT, grant_id)
        if record is None or record.deleted:
            return None
        value = from_json(Grant, record.data)
        return value if value is not None and self.clock() < value.expires_at else None

    async def revoke(self, token: str, client_id: str) -> None:
        """RFC 7009: a refresh token ends its grant, an access token itself. A token of
        another client, or none of ours, changes nothing (and is answered alike)."""
        for prefix, kind in ((REFRESH_PREFIX, "refresh"), (ACCESS_PREFIX, "access")):
            found = await self._token(token, prefix, kind)
            if found is None or found[1].client_id != client_id:
                continue
            if kind == "refresh":
                await self.end(found[1].grant_id, "refresh token revoked by the client")
            else:
                await self.records.delete(MCP_TOKEN, found[0])
                self._ended()

    async def end(self, grant_id: str, why: str) -> None:
        """End a grant: its tokens stop working at once (each use reads the grant;
        the change stream tells every process to drop what it cached)."""
        record = await self.records.get(MCP_GRANT, grant_id)
        if record is None or record.deleted:
            return
        await self.records.delete(MCP_GRANT, grant_id)
        self._ended()
        log.info("mcp: grant {grant} ended: {why}", grant=grant_id, why=why)

    # -- consents

    async def consents(self, provider: str, user_id: str) -> dict[str, Consent]:
        record = await self.records.get(MCP_CONSENT, person_key(provider, user_id))
        if record is None or record.deleted:
            return {}
        return consents_from_json(record.data)

    async def _in_force(self, grant: Grant) -> bool:
        """Whether the consent ``grant`` was made under still stands for its resource
        (the same generation: not revoked, not revoked and given again)."""
        consent = (await self.consents(grant.provider, grant.user_id)).get(
            grant.client_id)
        return consent is not None and consent.generation == grant.consent and \
            grant.resource in consent.resources

    async def consented(self, session: Session, client_id: str, resource: str) -> bool:
        consent = (await self.consents(session.provider, session.user_id)).get(client_id)
        return consent is not None and resource in consent.resources

    async def remember(self, session: Session, client_id: str, name: str,
                       resource: str) -> None:
        def change(consents: dict[str, Consent]) -> None:
            old = consents.get(client_id)
            resources = tuple(dict.fromkeys((*(old.resources if old else ()), resource)))
            consents[client_id] = Consent(
                client_id, name, resources, self.clock(), old.grants if old else (),
                old.generation if old else os.urandom(16).hex())
        await self._change_consents(session.provider, session.user_id, change)

    async def forget(self, provider: str, user_id: str, client_id: str) -> int:
        """Revoke a person's consent to a client: its grants end. How many did."""
        ended: list[str] = []

        def change(consents: dict[str, Consent]) -> None:
            old = consents.pop(client_id, None)
            if old is not None:
                ended.extend(old.grants)
        await self._change_consents(provider, user_id, change)
        for grant_id in ended:
            await self.end(grant_id, "the person revoked the client's consent")
        # grants the record did not list end at their next use, which checks the
        # consent; cached lookups of their access tokens are dropped now (in other
        # processes, the listed grants' ends in the change stream drop them)
        self._ended()
        return len(ended)

    async def _add_to_consent(self, grant: Grant) -> bool:
        """List ``grant`` in the consent it was made under; ``False``: that consent is
        no longer in force."""
        listed = False

        def change(consents: dict[str, Consent]) -> None:
            nonlocal listed
            old = consents.get(grant.client_id)
            if old is not None and old.generation == grant.consent:
                grants = (*old.grants, grant.id)[-GRANTS_PER_CONSENT:]
                consents[grant.client_id] = replace(old, grants=grants)
                listed = True
        await self._change_consents(grant.provider, grant.user_id, change)
        return listed

    async def _change_consents(self, provider: str, user_id: str,
                               change: Callable[[dict[str, Consent]], None]) -> None:
        key = person_key(provider, user_id)
        lease, holder = f"mcp.consent:{key}", os.urandom(8).hex()
        for _ in range(LEASE_TRIES):
            if await self.records.lease(lease, holder, LEASE_SECONDS):
                break
            await deferLater(self.reactor, LEASE_WAIT, lambda: None)
        else:
            raise StorageUnavailable("a person's MCP consents are busy (the lease was not "
                                     f"free within {LEASE_TRIES * LEASE_WAIT:g}s)")
        try:
            record = await self.records.get(MCP_CONSENT, key)
            consents = consents_from_json(record.data) if record is not None and \
                not record.deleted else {}
            change(consents)
            if consents:
                await self.records.put(MCP_CONSENT, key, consents_to_json(consents))
            elif record is not None and not record.deleted:
                await self.records.delete(MCP_CONSENT, key)
        finally:
            await self.records.release(lease, holder)

    async def _once(self, name: str, seconds: float) -> bool:
        """A lease no one renews: only the first claim of ``name`` gets it."""
        return bool(await self.records.lease(f"once:{name}", os.urandom(16).hex(),
                                             max(seconds, 1.0)))
