"""Follows the record store's change stream for this process.

Every ``interval`` it asks the store what changed since the last version it saw and hands
each changed record to the subscribers of its type; a ``reset`` (this process fell too
far behind, or the store was emptied) tells them to drop what they hold. The time of the
last successful sync says how fresh this process's copies are: a session copy older than
``stale_after`` is not trusted (the store is asked again, and a store that does not
answer means a 503, never a decision on old data).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.databroker.records import Record, RecordStore
from gateway.databroker.repeat import Repeating

log = Logger()

Subscriber = Callable[[Record], None]


class ChangeFollower:
    def __init__(self, reactor: Any, store: RecordStore, interval: float = 0.5,
                 stale_after: float = 2.0) -> None:
        self.reactor = reactor
        self.store = store
        self.interval = interval
        self.stale_after = stale_after
        self.version = -1  # unknown: the first sync is a reset
        self.epoch = ""
        self.last_ok = float("-inf")
        self.failures = 0
        self._subscribers: dict[str, list[Subscriber]] = {}
        self._on_reset: list[Callable[[], None]] = []
        self._on_ok: list[Callable[[], None]] = []
        self._loop = Repeating(reactor, interval, self.poll)

    def subscribe(self, type: str, subscriber: Subscriber) -> None:
        self._subscribers.setdefault(type, []).append(subscriber)

    def on_reset(self, callback: Callable[[], None]) -> None:
        self._on_reset.append(callback)

    def on_ok(self, callback: Callable[[], None]) -> None:
        """Called after every successful sync (queued writes are retried then)."""
        self._on_ok.append(callback)

    def fresh(self) -> bool:
        return bool(self.reactor.seconds() - self.last_ok <= self.stale_after)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> Deferred[object] | None:
        """Stop polling; the poll in progress, if any."""
        return self._loop.stop()

    def kick(self) -> None:
        """Poll now rather than at the next interval (after this process wrote)."""
        self._loop.kick()

    async def poll(self) -> None:
        """Sync until caught up; errors are logged (once per outage) and retried."""
        try:
            while True:
                changes = await self.store.sync(self.version)
                if changes.reset or (self.epoch and changes.epoch != self.epoch):
                    if self.version >= 0:
                        log.warn("databroker: change stream restarted at version "
                                 "{version}: cached records dropped", version=changes.version)
                    self.version, self.epoch = changes.version, changes.epoch
                    for callback in self._on_reset:
                        callback()
                    continue
                self.epoch = changes.epoch
                for record in changes.records:
                    for subscriber in self._subscribers.get(record.type, ()):
                        subscriber(record)
                self.version = changes.version
                if not changes.more:
                    break
        except Exception as exc:
            if self.failures == 0:
                log.error("databroker: change stream unavailable: {error}", error=str(exc))
            self.failures += 1
            return
        if self.failures:
            log.info("databroker: change stream back after {n} failed attempts",
                     n=self.failures)
        self.failures = 0
        self.last_ok = self.reactor.seconds()
        for callback in self._on_ok:
            callback()
