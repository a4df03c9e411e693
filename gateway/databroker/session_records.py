"""Sessions as records: the ``SessionStore`` the identity code uses, over any backend.

Reads are synchronous from this process's copies. With the memory backend the copies are
the whole truth (``complete``). With kvstore they are a cache of what this process has
read or written, kept current by the change stream: a session ended or refreshed in
another process is replaced or dropped here within one poll of the ``ChangeFollower``;
when the stream has not answered for ``stale_after``, copies are not trusted and the
caller reads the store (``fetch``), which answers or fails with ``StorageUnavailable``.

Writes go to the store in the background. A write the store refused (Redis down) is kept
and retried after the next successful sync, so nothing is lost once Redis is back; the
newest intent per session wins. ``drain`` waits for writes in flight at shutdown.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from types import MappingProxyType
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import SESSION, USER, Record, RecordStore
from gateway.databroker.session_index import IndexFull, SessionIndex
from gateway.sessions.model import Session

log = Logger()

CACHE_LIMIT = 100_000
UNSAVED_LIMIT = 100_000
TOMBSTONE_LIMIT = 100_000
PENDING = 1 << 62  # version of a copy whose write has not been answered yet


def to_json(session: Session) -> bytes:
    data = {f: getattr(session, f) for f in Session.__slots__}
    data["claims"] = {k: list(v) for k, v in session.claims.items()}
    data["groups"] = list(session.groups)
    return json.dumps(data, separators=(",", ":")).encode()


def from_json(raw: bytes) -> Session:
    """A stored session; fields this version does not know (written by another
    version) are ignored, missing ones take their defaults."""
    data = {k: v for k, v in json.loads(raw).items() if k in Session.__slots__}
    data["claims"] = MappingProxyType({k: tuple(v) for k, v in data["claims"].items()})
    data["groups"] = tuple(data["groups"])
    return Session(**data)


def user_json(session: Session) -> bytes:
    """The user record a sign-in leaves: who, as the IdP described them."""
    return json.dumps({"id": session.user_id, "email": session.email, "name": session.name,
                       "claims": {k: list(v) for k, v in session.claims.items()}},
                      separators=(",", ":"), sort_keys=True).encode()


class RecordSessionStore:
    def __init__(self, store: RecordStore, follower: ChangeFollower, *,
                 complete: bool) -> None:
        self.store = store
        self.follower = follower
        self.complete = complete
        self.needs_fetch = not complete
        self._cache: OrderedDict[str, tuple[Session, int]] = OrderedDict()
        # versions of recent deletions: a read or write that raced one is not trusted
        self._tombstones: OrderedDict[str, int] = OrderedDict()
        self._users: OrderedDict[str, bytes] = OrderedDict()
        self._unsaved: OrderedDict[str, Session | None] = OrderedDict()
        self._pending: set[Deferred[Any]] = set()
        # the sessions an IdP session, a user or an address names (back-channel
        # logout, directory removals), written with each new session
        reactor = follower.reactor
        self.index = SessionIndex(store, reactor, reactor.seconds if reactor is not None
                                  else time.time)
        follower.subscribe(SESSION, self._changed)
        follower.on_reset(self._reset)
        follower.on_ok(self._retry_unsaved)

    # -- SessionStore

    def get(self, session_id: str) -> Session | None:
        hit = self._cache.get(session_id)
        if hit is None:
            return None
        if not self.complete and not self.follower.fresh():
            return None  # the stream is behind: the caller fetches (or gets a 503)
        return hit[0]

    def put(self, session: Session) -> None:
        self._write(session.id, self._remember(session, PENDING))

    def put_confirmed(self, session: Session) -> Deferred[None]:
        """Store a new session and say when it is stored. A sign-in waits for this
        before handing out its cookie: a cookie for a session the store does not have
        yet would be answered with a sign-in redirect by every process that reads the
        store meanwhile. When the store cannot take it now the Deferred fails and the
        session is dropped (not queued for a retry): the person is told to try again."""
        self._remember(session, PENDING)
        d = self.store.put(SESSION, session.id, to_json(session), session.expires_at,
                          revive=False)
        self._write_user(session)
        self._pending.add(d)

        def saved(result: Any) -> None:
            self._pending.discard(d)
            cached = self._cache.get(session.id)
            if cached is not None and cached[1] == PENDING and cached[0] is session \
                    and result is not None:
                self._cache[session.id] = (session, result.version)

        def failed(failure: Failure) -> Failure:
            self._pending.discard(d)
            self._cache.pop(session.id, None)
            return failure

        return d.addCallbacks(saved, failed).addCallback(lambda _: self._indexed(session))

    def _indexed(self, session: Session) -> Deferred[None]:
        """Index a stored session; a session the index could not take is ended (a
        provider's logout could not find it), and the sign-in told so. Never another
        session: a full key refuses the newest (``session_index.IndexFull``)."""
        def failed(failure: Failure) -> Failure:
            if failure.check(IndexFull):
                log.warn("databroker: sign-in refused: its user, address or provider "
                         "session holds as many sessions as the index keeps",
                         id=session.id, provider=session.provider)
            self.delete(session.id)
            return failure
        return self.index.add(session).addErrback(failed)

    def delete(self, session_id: str) -> None:
        self._cache.pop(session_id, None)
        self._write(session_id, None)

    def delete_confirmed(self, session_id: str) -> Deferred[None]:
        """As ``delete``, and say when the store has taken it (or could not: the delete
        is then retried as ``delete``'s is). A sign-out waits for this before it
        answers: a browser that signs in again at once must not be handed the session
        the store still holds."""
        self._cache.pop(session_id, None)
        if session_id in self._unsaved:  # an older write waits: the retry deletes it
            self._unsaved[session_id] = None
            return defer.succeed(None)
        d: Deferred[Any] = self.store.delete(SESSION, session_id)
        self._track(d, session_id, None)  # its callbacks leave None, failure or not
        return d

    def fetch(self, session_id: str) -> Deferred[Session | None]:
        """Read a session this process has no trusted copy of."""
        def found(record: Record | None) -> Session | None:
            if record is None or self._deleted_since(session_id, record.version):
                self._cache.pop(session_id, None)
                return None
            return self._remember(from_json(record.data), record.version)
        return self.store.get(SESSION, session_id).addCallback(found)

    def claim_once(self, key: str, seconds: float) -> Deferred[bool]:
        """A lease no one renews: a fresh holder each time, so only the first claim of
        ``key`` (until ``seconds`` pass) gets it."""
        return self.store.lease(f"once:{key}", os.urandom(16).hex(), seconds)

    def forget(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._cache)

    # -- copies

    def _remember(self, session: Session, version: int) -> Session:
        cached = self._cache.get(session.id)
        if cached is not None and cached[0] == session:
            session = cached[0]  # same record: keep the object (decision caches key on it)
        self._cache[session.id] = (session, version)
        self._cache.move_to_end(session.id)
        if not self.complete and len(self._cache) > CACHE_LIMIT:
            self._cache.popitem(last=False)
        return session

    def _deleted_since(self, session_id: str, version: int) -> bool:
        deleted = self._tombstones.get(session_id)
        return deleted is not None and deleted > version

    def _changed(self, record: Record) -> None:
        cached = self._cache.get(record.id)
        if record.deleted:
            self._tombstones[record.id] = record.version
            self._tombstones.move_to_end(record.id)
            if len(self._tombstones) > TOMBSTONE_LIMIT:
                self._tombstones.popitem(last=False)
            if cached is not None and cached[1] <= record.version:
                del self._cache[record.id]
            return
        if cached is None:
            if self.complete:
                self._remember(from_json(record.data), record.version)
            return  # not read here: nothing to update
        if cached[1] < record.version:
            self._remember(from_json(record.data), record.version)

    def _reset(self) -> None:
        if not self.complete:
            self._cache.clear()

    # -- writes

    def _write(self, session_id: str, session: Session | None) -> None:
        if session_id in self._unsaved:  # an older write is waiting: this one replaces it
            self._unsaved[session_id] = session
            return
        if session is None:
            d: Deferred[Any] = self.store.delete(SESSION, session_id)
        else:
            # a session is never brought back once deleted (a refresh that finishes
            # after a sign-out, a retried write after a revocation elsewhere)
            d = self.store.put(SESSION, session.id, to_json(session), session.expires_at,
                               revive=False)
            self._write_user(session)
        self._track(d, session_id, session)

    def _write_user(self, session: Session) -> None:
        user = user_json(session)
        if self._users.get(session.user_id) != user:
            self._users[session.user_id] = user
            self._users.move_to_end(session.user_id)
            if len(self._users) > CACHE_LIMIT:
                self._users.popitem(last=False)
            written: Deferred[Any] = self.store.put(USER, session.user_id, user)
            written.addErrback(self._user_unsaved, session.user_id)
            self._track(written, None, None)

    def _user_unsaved(self, failure: Failure, user_id: str) -> None:
        self._users.pop(user_id, None)  # written again with the session's retry

    def _track(self, d: Deferred[Any], session_id: str | None,
               session: Session | None) -> None:
        self._pending.add(d)

        def saved(result: Any) -> None:
            self._pending.discard(d)
            if session is None or session_id is None:
                return
            cached = self._cache.get(session.id)
            if cached is None or cached[1] != PENDING or cached[0] is not session:
                return  # replaced or dropped meanwhile
            if result is None or self._deleted_since(session.id, result.version):
                del self._cache[session.id]  # deleted elsewhere first, or just after
            else:
                self._cache[session.id] = (session, result.version)

        def failed(failure: Failure) -> None:
            self._pending.discard(d)
            if session_id is None:
                return
            if len(self._unsaved) >= UNSAVED_LIMIT:
                lost, _ = self._unsaved.popitem(last=False)
                log.error("databroker: too many unsaved sessions, dropped {id}", id=lost)
            self._unsaved[session_id] = session
            log.error("databroker: session {id} not {what} yet, will retry: {error}",
                      id=session_id, what="deleted" if session is None else "saved",
                      error=failure.getErrorMessage())
        d.addCallbacks(saved, failed)

    def _retry_unsaved(self) -> None:
        waiting, self._unsaved = self._unsaved, OrderedDict()
        for session_id, session in waiting.items():
            self._write(session_id, session)  # a failure queues it again, for next time

    def drain(self, timeout: float, reactor: Any) -> Deferred[None]:
        """Wait (at most ``timeout``) until no write is in flight, including writes that
        start meanwhile (requests finishing, retries after the last poll)."""
        async def run() -> None:
            deadline = reactor.seconds() + timeout
            while self._pending and reactor.seconds() < deadline:
                waiting: Deferred[Any] = defer.DeferredList(list(self._pending),
                                                            consumeErrors=True)
                waiting.addTimeout(deadline - reactor.seconds(), reactor)
                try:
                    await waiting
                except defer.TimeoutError:
                    break
            left = len(self._pending) + len(self._unsaved)
            if left:
                log.error("databroker: {n} session writes not saved at shutdown", n=left)
        return defer.ensureDeferred(run())
