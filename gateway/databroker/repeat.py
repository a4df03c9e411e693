"""An async job run now and then ``interval`` seconds after each run ends: never two runs
at once, however long one takes (LoopingCall counts from the start of a run and has no
"run now")."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred


class Repeating:
    def __init__(self, reactor: Any, interval: float,
                 job: Callable[[], Coroutine[Any, Any, object]]) -> None:
        self.reactor = reactor
        self.interval = interval
        self.job = job
        self.running: Deferred[object] | None = None  # the run in progress
        self._call: Any = None

    def start(self) -> None:
        if self._call is None:
            self._call = self.reactor.callLater(0, self._tick)

    def stop(self) -> Deferred[object] | None:
        """No more runs; the run in progress, if any (the caller may wait or cancel)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        return self.running

    def kick(self) -> None:
        """Run now rather than at the end of the interval (no-op while one runs)."""
        if self._call is not None and self._call.active():
            self._call.reset(0)

    def _tick(self) -> None:
        self.running = ensureDeferred(self.job())
        self.running.addBoth(self._schedule)

    def _schedule(self, result: object) -> object:
        self.running = None
        if self._call is not None:
            self._call = self.reactor.callLater(self.interval, self._tick)
        return result
