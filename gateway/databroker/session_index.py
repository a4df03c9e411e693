"""Which gateway sessions an identity provider's session, a user or an e-mail address
names: what a back-channel logout (``sid`` or ``sub``) and a directory removal (a user's
id or e-mail) end.

One ``session.index`` record per key (``key_id``: a digest, so neither a ``sid`` nor an
address is a record id), holding ``{session id: [expires_at, issued_at, issuer]}``. A
sign-in adds its session under each of its keys before its cookie is handed out
(``RecordSessionStore.put_confirmed``). An update reads, changes and writes the record,
so two processes adding under one key at once would lose one of the two: each update
holds the store's lease named after the key (the lease every backend has: Redis ``SET
NX PX``, the memory store's, the databroker's over gRPC).

Bounded and cleaned with the sessions: an entry lives until its session would expire
(every update drops the expired ones), the record until its newest entry expires (the
store's sweep drops it then). A key holds at most ``MAX_PER_KEY`` sessions; past that
the newest is refused (``IndexFull``: that sign-in fails and its session is dropped),
never an older session ended, nor the new one left out of the index (a session the
index does not hold could not be logged out by its provider): the bound then costs
only the one who filled the key.

Who shares a key, and so its bound and its lease: every key is scoped by the provider
that signed the session in (a user id or an address names a person only within its
provider), and a session is indexed by its address only when the provider vouched for
it (``authorize.email.email_refusal`` with unverified addresses refused, whatever
``idp_allow_unverified_email`` says). So only the person themselves (or their provider)
can fill a key or hold its lease: someone whose provider lets them set
``email=victim`` unverified, or another provider's user with the victim's id or
address, shares none of the victim's keys. (With ``idp_allow_unverified_email`` on, a
directory that matches a session by an unverified address still ends it by user id
only.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from twisted.internet.defer import Deferred, FirstError, ensureDeferred, gatherResults
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from gateway.authorize.email import email_refusal
from gateway.databroker.records import SESSION_INDEX, RecordStore, StorageUnavailable
from gateway.sessions.model import Session

MAX_PER_KEY = 1000
LEASE_SECONDS = 10.0  # longer than a read and a write may take (3 s reply timeout each)
LEASE_TRIES = 80
LEASE_WAIT = 0.025  # seconds between tries for a key another process is updating


class Entry(NamedTuple):
    session_id: str
    expires_at: float
    issued_at: float
    issuer: str


def key_id(kind: str, *parts: str) -> str:
    return hashlib.sha256("\x00".join((kind, *parts)).encode()).hexdigest()


class IndexFull(StorageUnavailable):
    """A key of the session already holds ``MAX_PER_KEY`` live sessions: this sign-in
    is refused (the sessions there stay)."""


def sid_key(provider: str, issuer: str, sid: str) -> str:
    """The sessions of one provider session (``sid`` at ``issuer``) signed in through
    ``provider`` (two clients at one issuer each get their own logout token)."""
    return key_id("sid", provider, issuer, sid)


def user_key(provider: str, user_id: str) -> str:
    """A user's sessions at one provider: a user id names a person only within the
    provider that issued it (the directory matches its own provider's sessions; a
    logout by ``sub`` ends the sessions of the provider the token is for)."""
    return key_id("user", provider, user_id)


def email_key(provider: str, email: str) -> str:
    """The sessions one provider signed in with this address (the directory's
    provider's, matched by e-mail)."""
    return key_id("email", provider, email.lower())


def keys_of(session: Session) -> list[str]:
    keys = []
    if session.idp_sid:
        keys.append(sid_key(session.provider, session.idp_issuer, session.idp_sid))
    if session.user_id:
        keys.append(user_key(session.provider, session.user_id))
    if session.email and not email_refusal(session.email, session.claims, False):
        keys.append(email_key(session.provider, session.email))
    return keys


def parse(data: bytes) -> list[Entry]:
    try:
        raw = json.loads(data)
        return [Entry(str(sid), float(e[0]), float(e[1]), str(e[2]))
                for sid, e in raw.items()]
    except (ValueError, TypeError, IndexError, AttributeError):
        return []  # unreadable: as empty (the sessions it held still end on their own)


def serialise(entries: Iterable[Entry]) -> bytes:
    return json.dumps({e.session_id: [e.expires_at, e.issued_at, e.issuer] for e in entries},
                      separators=(",", ":"), sort_keys=True).encode()


def with_entry(entries: list[Entry], new: Entry, now: float,
               limit: int = MAX_PER_KEY) -> list[Entry] | None:
    """The entries kept (expired ones dropped, ``new`` added), or None when ``new``
    does not fit under the bound: the live entries are never pushed out (that would
    end someone's sessions because someone else signed in)."""
    kept = [e for e in entries if e.expires_at > now and e.session_id != new.session_id]
    if len(kept) >= limit:
        return None
    kept.append(new)
    return kept


class SessionIndex:
    def __init__(self, store: RecordStore, reactor: Any, clock: Callable[[], float]) -> None:
        """``reactor`` waits between tries of a busy key; ``clock`` tells expired
        entries."""
        self.store = store
        self.reactor = reactor
        self.clock = clock

    def add(self, session: Session) -> Deferred[None]:
        """Index ``session`` under each of its keys. Fails with ``StorageUnavailable``
        (``IndexFull``: a key holds as many sessions as it may)."""
        entry = Entry(session.id, session.expires_at, session.issued_at, session.idp_issuer)
        updates = [ensureDeferred(self._update(key, entry)) for key in keys_of(session)]

        def first_failure(failure: Failure) -> Failure:
            error = failure.value
            return error.subFailure if isinstance(error, FirstError) else failure
        # the keys at once: a sign-in waits for the slowest, not for the sum
        return gatherResults(updates, consumeErrors=True).addCallbacks(
            lambda _: None, first_failure)

    async def _update(self, key: str, entry: Entry) -> None:
        lease = f"index:{key}"
        holder = os.urandom(8).hex()
        for _ in range(LEASE_TRIES):
            if await self.store.lease(lease, holder, LEASE_SECONDS):
                break
            await deferLater(self.reactor, LEASE_WAIT, lambda: None)
        else:
            raise StorageUnavailable("the session index is busy (its lease was not "
                                     f"free within {LEASE_TRIES * LEASE_WAIT:g}s)")
        try:
            record = await self.store.get(SESSION_INDEX, key)
            now = self.clock()
            kept = with_entry(parse(record.data) if record else [], entry, now,
                              MAX_PER_KEY)
            if kept is None:
                raise IndexFull(f"this account already has {MAX_PER_KEY} sessions at "
                                "once; sign out elsewhere or wait for some to expire")
            await self.store.put(SESSION_INDEX, key, serialise(kept),
                                 max(e.expires_at for e in kept))
        finally:
            await self.store.release(lease, holder)

    def entries(self, key: str) -> Deferred[list[Entry]]:
        """The sessions indexed under ``key`` and not yet expired."""
        def read(record: Any) -> list[Entry]:
            now = self.clock()
            return [e for e in (parse(record.data) if record else []) if e.expires_at > now]
        return self.store.get(SESSION_INDEX, key).addCallback(read)
