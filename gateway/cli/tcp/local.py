"""The local end of a tunnel: an accepted connection (``--listen ADDR``) or stdin/stdout
(``--listen -``).

The local side is paused while its tunnel opens (a sign-in can take minutes), so what
the local program sends first, such as SSH's version line, waits in the kernel and is
forwarded once the tunnel is there. Then a ``Pipe`` joins both ends with flow control.

End of stream from the local side: over a plain ``http://`` gateway it is passed on as
a half-close. A TLS connection cannot be half-closed (Twisted's TLS transport offers no
write-only shutdown, and the gateway ends the tunnel on a TLS close), so the tunnel then
lingers while the gateway still sends and closes after ``LINGER`` quiet seconds: a
command piped into ``gateway tcp --listen -`` still gets its answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.cli.tcp.dial import GatewayConnection
from gateway.cli.tcp.messages import TunnelError
from gateway.net.pipe import Pipe

LINGER = 2.0  # seconds of quiet after the local side's end, over TLS


class Outcome:
    """How a local connection's tunnel went, for whoever runs the local side."""

    def opened(self, side: LocalSide) -> None: ...
    def failed(self, side: LocalSide, message: str) -> None: ...
    def closed(self, side: LocalSide, reason: str) -> None: ...
    def gone(self, side: LocalSide) -> None:
        """The local transport is closed and flushed (stdio: time to stop)."""


@implementer(IHalfCloseableProtocol)
class LocalSide(Protocol):
    """One local connection and its tunnel (``pipe``'s ``a`` side)."""

    transport: Any  # an accepted TCP connection or StandardIO: both half-closeable

    def __init__(self, clock: Any, open_tunnel: Callable[[], Deferred[GatewayConnection]],
                 half_close: bool, outcome: Outcome) -> None:
        self.clock = clock
        self.open_tunnel = open_tunnel
        self.half_close = half_close  # the gateway connection can be half-closed
        self.outcome = outcome
        self.pending: list[bytes] = []
        self.pipe: Pipe | None = None
        self.opening: Deferred[GatewayConnection] | None = None
        self.read_ended = False
        self.lost = False
        self.failure: str | None = None

    def connectionMade(self) -> None:
        self.transport.pauseProducing()
        self.opening = self.open_tunnel()
        self.opening.addCallbacks(self._established, self._failed)

    def dataReceived(self, data: bytes) -> None:
        if self.pipe is not None:
            self.pipe.from_a(data)
        else:
            self.pending.append(data)

    def readConnectionLost(self) -> None:
        if self.pipe is None:
            self.read_ended = True
        else:
            self._local_eof(self.pipe)

    def writeConnectionLost(self) -> None:
        pass  # the pipe closes the connection once both directions have ended

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.lost = True
        if self.pipe is not None:
            self.pipe.lost("the local connection closed")
        elif self.opening is not None and not self.opening.called:
            self.opening.cancel()
        self.outcome.gone(self)

    # -- the tunnel

    def _established(self, remote: GatewayConnection) -> None:
        self.opening = None
        if self.lost:
            remote.transport.loseConnection()
            return
        pipe = self.pipe = Pipe(self.clock, self.transport, remote.transport, 0.0,
                                on_close=self._closed)
        remote.join(pipe)
        pending, self.pending = self.pending, []
        for data in pending:
            pipe.from_a(data)
        self.outcome.opened(self)
        if pipe.closed:
            return
        if self.read_ended:
            self._local_eof(pipe)
        else:
            self.transport.resumeProducing()

    def _failed(self, failure: Failure) -> None:
        self.opening = None
        if failure.check(CancelledError):
            return  # the local connection went away first
        if failure.check(TunnelError):
            self.failure = str(failure.value)
        else:
            self.failure = f"unexpected error: {failure.getErrorMessage()}"
        self.outcome.failed(self, self.failure)
        self.transport.loseConnection()

    def _closed(self, pipe: Pipe, reason: str) -> None:
        self.outcome.closed(self, reason)

    def _local_eof(self, pipe: Pipe) -> None:
        if self.half_close:
            pipe.eof_from(self.transport)
        else:
            self._linger(pipe)

    def _linger(self, pipe: Pipe) -> None:
        if pipe.closed:
            return
        quiet = self.clock.seconds() - pipe.last
        if quiet >= LINGER:
            pipe.close("the local side finished sending")
        else:
            self.clock.callLater(LINGER - quiet, self._linger, pipe)
