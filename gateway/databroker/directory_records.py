"""Directory users and groups as records: written by the sync, read by authorization.
A user the directory no longer lists loses every session in the run that sees it.

``DirectorySync`` runs the directory provider every ``idp_refresh_directory_interval``,
each run bounded by ``idp_refresh_directory_timeout``, and writes what changed as
``directory.user`` / ``directory.group`` records. With several gateway processes on one
kvstore, one of them holds the sync lease at a time. A failed run changes nothing: the
last good data stays, and the failure is logged and counted
(``directory_sync_failures_total``).

``DirectoryView`` is this process's copy of those records, kept current by the change
stream; ``groups_for`` gives a user's groups (transitive, as ids and names) for
``allowed_groups`` and the identity assertion.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred, gatherResults, succeed
from twisted.logger import Logger

from gateway.config.providers import IMPLICIT_ID
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import DIRECTORY_GROUP, DIRECTORY_USER, Record, RecordStore
from gateway.databroker.repeat import Repeating
from gateway.directory.model import Directory
from gateway.directory.provider import DirectoryProvider
from gateway.observability.metrics import (
    DIRECTORY_SYNC_FAILURES,
    DIRECTORY_SYNC_LAST_SUCCESS,
    DIRECTORY_SYNC_RECORDS,
)

log = Logger()

WRITE_BATCH = 100
LEASE_NAME = "directory-sync"


def directory_records(directory: Directory) -> dict[tuple[str, str], bytes]:
    """The records a directory is stored as (deterministic JSON, so unchanged entries
    compare equal and are not written again)."""
    out: dict[tuple[str, str], bytes] = {}
    for user in directory.users:
        out[(DIRECTORY_USER, user.id)] = json.dumps(
            {"id": user.id, "email": user.email, "name": user.name,
             "groups": sorted(user.group_ids)}, separators=(",", ":"),
            sort_keys=True).encode()
    for group in directory.groups:
        out[(DIRECTORY_GROUP, group.id)] = json.dumps(
            {"id": group.id, "name": group.name, "email": group.email},
            separators=(",", ":"), sort_keys=True).encode()
    return out


class DirectoryView:
    def __init__(self, follower: ChangeFollower, store: RecordStore) -> None:
        self.store = store
        self.follower = follower
        self.version = 0  # changes whenever anything here changes (decision caches)
        # whose people these are (``config.providers.directory_provider``): set by the
        # databroker from each snapshot
        self.provider = IMPLICIT_ID
        self._users: dict[str, dict[str, Any]] = {}
        self._groups: dict[str, dict[str, Any]] = {}
        self._by_email: dict[str, str] = {}
        # the newest version applied per record, deletions included: a reload result
        # read before a change arrived must not undo it
        self._seen: dict[tuple[str, str], int] = {}
        self._answers: dict[tuple[str, str], tuple[str, ...]] = {}
        self._reload_wanted = False
        follower.subscribe(DIRECTORY_USER, self._changed)
        follower.subscribe(DIRECTORY_GROUP, self._changed)
        follower.on_reset(self.reload)
        follower.on_ok(self._retry_reload)

    def reload(self) -> None:
        """Read every directory record again (first start, or after a reset)."""
        ensureDeferred(self._reload())

    def _retry_reload(self) -> None:
        if self._reload_wanted:
            self.reload()

    async def _reload(self) -> None:
        self._reload_wanted = False
        since = self.follower.version  # changes after this are applied as they come
        try:
            users = await self.store.query(DIRECTORY_USER)
            groups = await self.store.query(DIRECTORY_GROUP)
        except Exception as exc:
            self._reload_wanted = True  # again after the next good sync
            log.error("databroker: directory records not read (retried): {error}",
                      error=str(exc))
            return
        found = {(r.type, r.id): r for r in (*users, *groups)}
        for record in found.values():
            self._apply(record)
        for key in list(self._seen):
            # gone from the store, and not (re)written while the query ran
            if key not in found and self._seen[key] <= since:
                self._drop(key)
        self._changed_now()

    def _changed(self, record: Record) -> None:
        self._apply(record)
        self._changed_now()

    def _apply(self, record: Record) -> None:
        key = (record.type, record.id)
        if self._seen.get(key, -1) >= record.version:
            return  # already have this or something newer
        self._seen[key] = record.version
        if record.deleted:
            self._remove(key)
            return
        data = json.loads(record.data)
        if record.type == DIRECTORY_USER:
            self._remove(key)
            self._users[record.id] = data
            if data.get("email"):
                self._by_email[str(data["email"]).lower()] = record.id
        else:
            self._groups[record.id] = data

    def _remove(self, key: tuple[str, str]) -> None:
        kind, rid = key
        if kind == DIRECTORY_USER:
            old = self._users.pop(rid, None)
            email = str((old or {}).get("email", "")).lower()
            if email and self._by_email.get(email) == rid:
                del self._by_email[email]
        else:
            self._groups.pop(rid, None)

    def _drop(self, key: tuple[str, str]) -> None:
        self._remove(key)
        del self._seen[key]

    def _changed_now(self) -> None:
        self._answers.clear()
        self.version += 1

    def __len__(self) -> int:
        return len(self._users) + len(self._groups)

    def groups_for(self, user_id: str, email: str) -> tuple[str, ...]:
        """The directory groups of the user with this id (else this e-mail address): each
        group's id and name; empty for someone the directory does not know."""
        key = (user_id, email)
        answer = self._answers.get(key)
        if answer is not None:
            return answer
        user = self._users.get(user_id)
        if user is None and email:
            uid = self._by_email.get(email.lower())
            user = self._users.get(uid) if uid is not None else None
        names: list[str] = []
        for gid in (user or {}).get("groups", ()):
            names.append(gid)
            group = self._groups.get(gid)
            if group is not None and group.get("name") and group["name"] not in names:
                names.append(group["name"])
        answer = tuple(dict.fromkeys(names))
        if len(self._answers) > 10_000:
            self._answers.clear()
        self._answers[key] = answer
        return answer


    def group_details(self, user_id: str, email: str) -> tuple[tuple[str, str], ...]:
        """(id, name) of each directory group of the user (for ``/.gateway/``)."""
        user = self._users.get(user_id)
        if user is None and email:
            uid = self._by_email.get(email.lower())
            user = self._users.get(uid) if uid is not None else None
        return tuple((str(gid), str((self._groups.get(gid) or {}).get("name") or ""))
                     for gid in (user or {}).get("groups", ()))


class DirectorySync:
    def __init__(self, reactor: Any, store: RecordStore, provider: DirectoryProvider,
                 interval: float, timeout: float,
                 written: Callable[[], None] = lambda: None, holder: str = "",
                 removed: Callable[[list[tuple[str, str]]], Deferred[Any]] | None = None
                 ) -> None:
        """``holder`` names this process in the sync lease (kept across reloads, so a
        rebuilt sync renews the lease instead of waiting for it to lapse); ``removed``
        ends the sessions of users the directory no longer lists (``(id, email)`` of
        each), before their records go."""
        self.reactor = reactor
        self.removed = removed
        self.written = written
        self.store = store
        self.provider = provider
        self.interval = interval
        self.timeout = timeout
        self.holder = holder or os.urandom(8).hex()
        self.runs = 0
        self._stopped = False
        self._loop = Repeating(reactor, interval, self.run_once)

    def start(self) -> None:
        self._loop.start()

    def stop(self, release: bool = False) -> Deferred[None]:
        """Stop syncing (a run in progress is cut off, not counted as a failure);
        ``release`` gives the lease up so another process takes over at once."""
        self._stopped = True
        running = self._loop.stop()
        if running is not None:
            running.cancel()
        if not release:
            return succeed(None)
        d = self.store.release(LEASE_NAME, self.holder)
        return d.addErrback(lambda f: log.warn("directory sync lease not released: {error}",
                                               error=f.getErrorMessage()))

    async def run_once(self) -> bool:
        """One sync run; True when the directory was read and stored."""
        provider = self.provider.name
        try:
            # held a little longer than a run may take, renewed by every run
            if not await self.store.lease(LEASE_NAME, self.holder,
                                          self.interval + self.timeout):
                return False
            started = time.monotonic()
            fetching = self.provider.fetch()
            fetching.addTimeout(self.timeout, self.reactor)
            directory = await fetching
            written, deleted = await self._store(directory_records(directory))
        except Exception as exc:
            if self._stopped:
                return False  # cut off by stop (reload or shutdown)
            reason = (f"no answer within idp_refresh_directory_timeout ({self.timeout:g}s)"
                      if type(exc).__name__ in ("TimeoutError", "CancelledError")
                      else str(exc) or type(exc).__name__)
            DIRECTORY_SYNC_FAILURES.labels(provider).inc()
            log.error("directory sync from {provider} failed, keeping the last good data: "
                      "{error}", provider=provider, error=reason)
            return False
        self.runs += 1
        if written or deleted:
            self.written()
        DIRECTORY_SYNC_LAST_SUCCESS.labels(provider).set(time.time())
        DIRECTORY_SYNC_RECORDS.labels(provider, "user").set(len(directory.users))
        DIRECTORY_SYNC_RECORDS.labels(provider, "group").set(len(directory.groups))
        log.info("directory sync from {provider}: {users} users, {groups} groups, "
                 "{written} records written, {deleted} deleted in {ms:.0f} ms",
                 provider=provider, users=len(directory.users),
                 groups=len(directory.groups), written=written, deleted=deleted,
                 ms=(time.monotonic() - started) * 1000)
        return True

    async def _store(self, wanted: dict[tuple[str, str], bytes]) -> tuple[int, int]:
        current: dict[tuple[str, str], bytes] = {}
        for kind in (DIRECTORY_USER, DIRECTORY_GROUP):
            for record in await self.store.query(kind):
                current[(kind, record.id)] = record.data
        writes: list[Callable[[], Deferred[Any]]] = [
            partial(self.store.put, kind, rid, data)
            for (kind, rid), data in wanted.items() if current.get((kind, rid)) != data]
        deletes: list[Callable[[], Deferred[Any]]] = [
            partial(self.store.delete, kind, rid)
            for kind, rid in current.keys() - wanted.keys()]
        gone = [(rid, _email(current[(kind, rid)])) for kind, rid in
                current.keys() - wanted.keys() if kind == DIRECTORY_USER]
        if gone and self.removed is not None:
            if not any(kind == DIRECTORY_USER for kind, _ in wanted):
                # every user gone at once is a base or filter mistake far more often
                # than everyone leaving: their records go, their sessions stay
                log.warn("directory sync from {provider}: the directory lists no users "
                         "now; the sessions of the {n} users it listed are not ended",
                         provider=self.provider.name, n=len(gone))
            else:
                await self.removed(gone)  # a failure fails the run: the next one retries
        operations = writes + deletes
        for start in range(0, len(operations), WRITE_BATCH):  # a few in flight at a time
            await gatherResults([op() for op in operations[start:start + WRITE_BATCH]],
                                consumeErrors=True)
        return len(writes), len(deletes)


def _email(data: bytes) -> str:
    try:
        return str(json.loads(data).get("email") or "")
    except (ValueError, AttributeError):
        return ""
