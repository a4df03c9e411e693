"""A flow-controlled byte pipe between two connections (websocket/SPDY upgrades, CONNECT).

Each transport is registered as the other's producer, so a slow reader pauses the fast
writer and memory stays bounded. An end-of-stream on one side half-closes the other
where the transport supports it. The route timeout applies as an idle timeout.
"""

from __future__ import annotations

import contextlib
from typing import Any


class Pipe:
    """Connects ``a`` and ``b`` (transports); owners forward their events here."""

    def __init__(self, clock: Any, a: Any, b: Any, idle_timeout: float) -> None:
        self.clock = clock
        self.a = a
        self.b = b
        self.idle_timeout = idle_timeout
        self.last = clock.seconds()
        self.closed = False
        a.registerProducer(b, True)
        b.registerProducer(a, True)
        self._timer = clock.callLater(idle_timeout, self._check) if idle_timeout else None

    def from_a(self, data: bytes) -> None:
        self.last = self.clock.seconds()
        self.b.write(data)

    def from_b(self, data: bytes) -> None:
        self.last = self.clock.seconds()
        self.a.write(data)

    def eof_from(self, side: Any) -> None:
        """One side finished sending: half-close toward the other when possible."""
        other = self.b if side is self.a else self.a
        if hasattr(other, "loseWriteConnection"):
            other.loseWriteConnection()
        else:
            self.close()

    def lost(self) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        for transport in (self.a, self.b):
            with contextlib.suppress(RuntimeError):
                transport.unregisterProducer()
            transport.loseConnection()

    def _check(self) -> None:
        if self.closed:
            return
        remaining = self.last + self.idle_timeout - self.clock.seconds()
        if remaining <= 0:
            for transport in (self.a, self.b):
                transport.abortConnection()
            self.close()
        else:
            self._timer = self.clock.callLater(remaining, self._check)

