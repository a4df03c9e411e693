"""Wakes the databroker's change streams (``Watch``) when its store has moved on.

The databroker process already follows its own store (``ChangeFollower``: every 0.5 s,
and at once after a write it made); each of its polls that finds a new version sets an
asyncio event per open stream, so N remote proxies cost N reads per change instead of
N polls of Redis every quarter second. Writes that arrive over gRPC kick the follower,
so their streams wake within milliseconds.
"""

from __future__ import annotations

import asyncio
import threading

from gateway.databroker.follower import ChangeFollower


class ChangeSignal:
    def __init__(self, follower: ChangeFollower) -> None:
        self.follower = follower
        self._version = follower.version
        self._lock = threading.Lock()  # streams come and go on the gRPC thread
        self._waiting: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}
        follower.on_ok(self._polled)

    def add(self, event: asyncio.Event) -> None:
        """Call on the event's loop."""
        with self._lock:
            self._waiting[event] = asyncio.get_running_loop()

    def discard(self, event: asyncio.Event) -> None:
        with self._lock:
            self._waiting.pop(event, None)

    def kick(self) -> None:
        """A write went through this process: poll now (on the reactor)."""
        self.follower.kick()

    def _polled(self) -> None:
        """On the reactor, after each successful poll of the follower."""
        if self.follower.version == self._version:
            return
        self._version = self.follower.version
        with self._lock:
            waiting = list(self._waiting.items())
        for event, loop in waiting:
            loop.call_soon_threadsafe(event.set)
