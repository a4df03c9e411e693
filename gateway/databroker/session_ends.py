"""Ending the sessions something outside names: an identity provider's back-channel
logout (its ``sid``, or every session of its ``sub``) and a directory that no longer
lists a user (deleted, or out of the directory's user filter: disabled).

The sessions are found through the session index (``session_index``), deleted in the
store, and the change stream is asked to look at once: every process sharing the store
then drops its copies and closes the connections they admitted (``broker.Databroker``,
``gateway.sessions.live``) within one poll.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred, gatherResults
from twisted.logger import Logger

from gateway.databroker.follower import ChangeFollower
from gateway.databroker.session_index import Entry, email_key, sid_key, user_key
from gateway.databroker.session_records import RecordSessionStore
from gateway.observability.metrics import SESSIONS_ENDED

log = Logger()


def named_by_logout(issuer: str, sid: str, sub: str, issued_by: float,
                    by_sid: list[Entry], by_user: list[Entry]) -> list[str]:
    """The sessions a logout token names (pure): with a ``sid``, the sessions of that
    provider session; with only a ``sub``, every session of that user the same provider
    signed in. Only sessions that existed when the token was issued (``issued_by``: its
    ``iat`` with the allowed skew): a token replayed later, if it ever got past the
    ``jti`` check, could not end sessions signed in after it."""
    entries = by_sid if sid else [e for e in by_user if e.issuer == issuer]
    return sorted({e.session_id for e in entries if e.issued_at <= issued_by})


class SessionEnds:
    def __init__(self, sessions: RecordSessionStore, follower: ChangeFollower) -> None:
        self.sessions = sessions
        self.follower = follower

    def named_by_logout(self, provider: str, issuer: str, sid: str, sub: str,
                        issued_by: float) -> Deferred[list[str]]:
        """The live sessions a verified logout token for ``provider`` (the one whose
        client id the token is for) names, read and not yet ended: the
        caller spends the token's ``jti`` between the two, so that a store that cannot
        answer leaves the token unspent for the provider's retry. Fails with
        ``StorageUnavailable``."""
        index = self.sessions.index

        async def run() -> list[str]:
            by_sid = await index.entries(sid_key(provider, issuer, sid)) if sid else []
            by_user = await index.entries(user_key(provider, sub)) if sub and not sid else []
            return await self._live(named_by_logout(issuer, sid, sub, issued_by, by_sid,
                                                    by_user))
        return ensureDeferred(run())

    def end(self, session_ids: list[str], cause: str) -> Deferred[list[str]]:
        """Delete these sessions (each deletion is retried until the store takes it:
        this does not fail) and ask the change stream to look at once."""
        return ensureDeferred(self._delete(session_ids, cause))

    def by_directory(self, provider: str, users: Iterable[tuple[str, str]]
                     ) -> Deferred[list[str]]:
        """End the sessions of users the directory no longer lists: ``(id, email)``
        of each (the directory matches a session by user id, else by e-mail), among
        the sessions of ``provider``, the directory's (another provider's user with
        the same id or address is someone else)."""
        index = self.sessions.index

        async def run() -> list[str]:
            named: set[str] = set()
            for user_id, email in users:
                for key in ([user_key(provider, user_id)] if user_id else []) + \
                        ([email_key(provider, email)] if email else []):
                    named.update(e.session_id for e in await index.entries(key))
            return await self._end(sorted(named), "directory")
        return ensureDeferred(run())

    async def _end(self, session_ids: list[str], cause: str) -> list[str]:
        return await self._delete(await self._live(session_ids), cause)

    async def _live(self, session_ids: list[str]) -> list[str]:
        """Those of ``session_ids`` still in the store (the index keeps signed-out ones
        until they would have expired)."""
        store = self.sessions
        live: list[str] = []
        for session_id in session_ids:
            session = store.get(session_id)
            if session is None and store.needs_fetch:
                session = await store.fetch(session_id)
            if session is not None:
                live.append(session_id)
        return live

    async def _delete(self, session_ids: list[str], cause: str) -> list[str]:
        store = self.sessions
        deletes: list[Deferred[Any]] = [store.delete_confirmed(s) for s in session_ids]
        if deletes:
            await gatherResults(deletes, consumeErrors=True)
            self.follower.kick()  # this process's stream first; the others within a poll
        SESSIONS_ENDED.labels(cause).inc(len(session_ids))
        return session_ids
