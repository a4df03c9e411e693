"""Records in this process (``databroker_storage_type: memory``, the default).

Restarting the gateway loses them, and a second process cannot see them (the reference:
one memory instance only). Operations are not timed in ``storage_operation_duration_ms``:
they are dictionary lookups, and timing them would cost more than they do. Every change
is the process's own, so ``watch`` says at once that there is one: the change stream's
followers (a connection waiting for its SSH sign-in) learn of it in the next turn of the
reactor rather than at their next poll.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable

from twisted.internet.defer import Deferred, succeed

from gateway.databroker.records import (
    SYNC_BATCH,
    TOMBSTONE_SECONDS,
    Changes,
    Record,
)


class MemoryRecordStore:
    backend = "memory"

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.epoch = os.urandom(8).hex()
        self._records: dict[tuple[str, str], Record] = {}
        self._by_type: dict[str, dict[str, Record]] = {}
        # change log: versions ascending, with the key changed at each version; a key's
        # older entries are skipped when read (its record carries the latest version)
        self._versions: list[int] = []
        self._keys: list[tuple[str, str]] = []
        self._version = 0
        self._purged = 0
        self._leases: dict[str, tuple[str, float]] = {}
        self._watchers: list[Callable[[], None]] = []

    def watch(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` after every change (``Databroker`` kicks its follower)."""
        self._watchers.append(changed)

    def get_now(self, type: str, id: str) -> Record | None:
        record = self._records.get((type, id))
        return None if record is None or record.deleted else record

    def get(self, type: str, id: str) -> Deferred[Record | None]:
        return succeed(self.get_now(type, id))

    def _store(self, record: Record) -> Record:
        key = (record.type, record.id)
        self._records[key] = record
        live = self._by_type.setdefault(record.type, {})
        if record.deleted:
            live.pop(record.id, None)
        else:
            live[record.id] = record
        self._versions.append(record.version)
        self._keys.append(key)
        for changed in self._watchers:
            changed()
        return record

    def put(self, type: str, id: str, data: bytes, expires_at: float = 0.0,
            revive: bool = True) -> Deferred[Record | None]:
        current = self._records.get((type, id))
        if not revive and current is not None and current.deleted:
            return succeed(None)
        self._version += 1
        return succeed(self._store(Record(type, id, data, self._version, self.clock(),
                                          expires_at=expires_at)))

    def delete(self, type: str, id: str) -> Deferred[None]:
        if self.get_now(type, id) is not None:
            self._version += 1
            now = self.clock()
            self._store(Record(type, id, b"", self._version, now, deleted_at=now))
        return succeed(None)

    def query(self, type: str) -> Deferred[list[Record]]:
        return succeed(list(self._by_type.get(type, {}).values()))

    def sync(self, since: int) -> Deferred[Changes]:
        if since < self._purged or since > self._version:
            return succeed(Changes((), self._version, reset=True, epoch=self.epoch))
        start = bisect.bisect_right(self._versions, since)
        out: list[Record] = []
        index = start
        while index < len(self._versions) and len(out) < SYNC_BATCH:
            record = self._records.get(self._keys[index])
            if record is not None and record.version == self._versions[index]:
                out.append(record)
            index += 1
        more = index < len(self._versions)
        version = self._versions[index - 1] if more else self._version
        return succeed(Changes(tuple(out), version, more=more, epoch=self.epoch))

    def sweep(self, now: float) -> Deferred[int]:
        dropped = 0
        for key, record in list(self._records.items()):
            if record.deleted:
                if record.deleted_at < now - TOMBSTONE_SECONDS:
                    del self._records[key]
                    self._purged = max(self._purged, record.version)
                    dropped += 1
            elif record.expires_at and record.expires_at <= now:
                self._version += 1
                self._store(Record(key[0], key[1], b"", self._version, now, deleted_at=now))
                dropped += 1
        # leases past their time (one per back-channel logout's jti, per hand-off)
        self._leases = {n: held for n, held in self._leases.items() if held[1] > now}
        # compact the change log to the latest entry of each remaining record
        live = sorted((r.version, k) for k, r in self._records.items())
        self._versions = [v for v, _ in live]
        self._keys = [k for _, k in live]
        return succeed(dropped)

    def lease(self, name: str, holder: str, seconds: float) -> Deferred[bool]:
        now = self.clock()
        current = self._leases.get(name)
        if current is None or current[0] == holder or current[1] <= now:
            self._leases[name] = (holder, now + seconds)
            return succeed(True)
        return succeed(False)

    def release(self, name: str, holder: str) -> Deferred[None]:
        if self._leases.get(name, ("", 0.0))[0] == holder:
            del self._leases[name]
        return succeed(None)

    def close(self) -> Deferred[None]:
        return succeed(None)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_type.values())
