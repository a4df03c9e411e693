"""A flow-controlled byte pipe between two connections (websocket/SPDY upgrades, CONNECT).

Each end is registered as the other's producer, so a slow reader pauses the fast writer
and memory stays bounded. An end-of-stream on one side half-closes the other where the
transport supports it (plain TCP, an HTTP/2 stream); where it does not (TLS), the pipe
closes. The pipe ends when both directions have ended, either side is lost, or nothing
moved for the idle timeout (0: none). The owner learns why through ``on_close``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOProtocol

CLOSE_GRACE = 10.0  # seconds an orderly close may take before the connection is aborted



def half_closeable(transport: Any) -> bool:
    """Whether ``loseWriteConnection`` really half-closes ``transport``. Twisted's
    protocol wrappers forward unknown attributes to the transport beneath, so under
    TLS ``hasattr`` finds the raw TCP socket's method, and calling it would end the
    TCP stream under TLS without a close_notify (a truncation to the client)."""
    while isinstance(transport, ProtocolWrapper):
        if isinstance(transport, TLSMemoryBIOProtocol):
            return False
        transport = transport.transport
    return hasattr(transport, "loseWriteConnection")


class PipeBase:
    """What every pipe shares: its two ends, the idle timeout, one close (in order, or
    an abort) reported once through ``on_close``, and the abort of a side whose orderly
    close cannot finish (its peer stopped reading, or never answers TLS close_notify)
    ``CLOSE_GRACE`` after the close. Subclasses say what they release first."""

    def __init__(self, clock: Any, a: Any, b: Any, idle_timeout: float,
                 on_close: Callable[[Any, str], None] | None) -> None:
        self.clock = clock
        self.a = a
        self.b = b
        self.idle_timeout = idle_timeout
        self.on_close = on_close
        self.last = clock.seconds()
        self.closed = False
        self._timer = clock.callLater(idle_timeout, self._check) if idle_timeout else None

    def _release(self) -> None:
        """Undo what this pipe set up on its ends, before they are closed."""

    def lost(self, reason: str = "connection lost", clean: bool = True) -> None:
        """One side's connection ended: in order (the other side is closed after what
        is buffered), or by a reset (passed on as one: a truncated stream must not look
        complete to the other side)."""
        self._end(reason, abort=not clean)
        if self._timer is not None and self._both_gone():
            # nothing left to abort: the grace timer would only keep this pipe, both
            # connections and their TLS state alive for CLOSE_GRACE
            if self._timer.active():
                self._timer.cancel()
            self._timer = None

    def _both_gone(self) -> bool:
        """Whether both ends' connections are closed (TCP and TLS transports say so;
        an end that cannot tell counts as open)."""
        return all(getattr(end, "disconnected", False) for end in (self.a, self.b))

    def close(self, reason: str = "closed") -> None:
        self._end(reason, abort=False)

    def abort(self, reason: str) -> None:
        """End both sides at once, dropping what is buffered (reset, revoked)."""
        self._end(reason, abort=True)

    def _end(self, reason: str, abort: bool) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._release()
        for transport in (self.a, self.b):
            if abort:
                transport.abortConnection()
            else:
                transport.loseConnection()
        if not abort and not self._both_gone():
            self._timer = self.clock.callLater(CLOSE_GRACE, self._abort_unfinished)
        else:
            self._timer = None
        # Told once, then forgotten: the owner (an upgrade's watch, a tunnel) usually
        # holds this pipe, and the pair would be a reference cycle that keeps both
        # connections until a full garbage collection.
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close(self, reason)

    def _abort_unfinished(self) -> None:
        self._timer = None
        for transport in (self.a, self.b):
            if not getattr(transport, "disconnected", False):
                transport.abortConnection()

    def _check(self) -> None:
        if self.closed:
            return
        remaining = self.last + self.idle_timeout - self.clock.seconds()
        if remaining <= 0:
            self.close("idle timeout")  # nothing moved: an orderly close
        else:
            self._timer = self.clock.callLater(remaining, self._check)


class Pipe(PipeBase):
    """Connects ``a`` (the client's side) and ``b`` (the upstream's); their protocols
    forward their events here. ``sent_to_a``/``sent_to_b`` count the bytes relayed."""

    def __init__(self, clock: Any, a: Any, b: Any, idle_timeout: float,
                 on_close: Callable[[Pipe, str], None] | None = None) -> None:
        super().__init__(clock, a, b, idle_timeout, on_close)
        self.sent_to_a = 0
        self.sent_to_b = 0
        self._ended: set[int] = set()  # ids of the ends that finished sending
        a.registerProducer(b, True)
        b.registerProducer(a, True)

    def _release(self) -> None:
        for transport in (self.a, self.b):
            with contextlib.suppress(RuntimeError):
                transport.unregisterProducer()

    def from_a(self, data: bytes) -> None:
        self.last = self.clock.seconds()
        self.sent_to_b += len(data)
        self.b.write(data)

    def from_b(self, data: bytes) -> None:
        self.last = self.clock.seconds()
        self.sent_to_a += len(data)
        self.a.write(data)

    def eof_from(self, side: Any) -> None:
        """One side finished sending: half-close toward the other when possible."""
        if self.closed:
            return
        other = self.b if side is self.a else self.a
        self._ended.add(id(side))
        if len(self._ended) == 2:
            self.close("both sides finished")
        elif getattr(other, "disconnected", False):
            # Its close is on its way here (connectionLost comes after this EOF); a
            # half-close now would register a socket that no longer exists.
            self.close("both sides finished")
        elif half_closeable(other):
            other.loseWriteConnection()
        else:
            self.close(f"{'client' if side is self.a else 'upstream'} finished sending")
