"""A service that follows configuration snapshots from the ``ConfigSource``."""

from __future__ import annotations

from collections.abc import Callable

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.config.running import ConfigSource
from gateway.config.snapshot import Snapshot


class SnapshotService(MultiService):
    """Holds the current snapshot and is told about each new one while running.

    Subclasses override ``apply`` to rebuild derived state; it runs on the reactor
    thread, once at start and then after every successful reload.
    """

    log = Logger()
    label = "service"

    def __init__(self, source: ConfigSource) -> None:
        MultiService.__init__(self)
        self.source = source
        self.snapshot = source.current
        self._unsubscribe: Callable[[], None] | None = None

    def startService(self) -> None:
        self._unsubscribe = self.source.subscribe(self.apply)
        self.apply(self.source.current)
        MultiService.startService(self)
        self.log.info("{service} service started", service=self.label)

    def stopService(self) -> Deferred[None] | None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.log.info("{service} service stopping", service=self.label)
        result: Deferred[None] | None = MultiService.stopService(self)
        return result

    def apply(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
