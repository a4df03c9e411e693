"""Kernel-side relaying for tunnels between two plain TCP sockets (Linux ``splice``).

A ``Pipe`` copies every byte through Python: read into a bytes object, write it out.
When both ends of a tunnel are plain sockets (no TLS, no PROXY-protocol wrapper, no
HTTP/2 stream), ``SplicePipe`` takes their file descriptors over from Twisted and moves
the bytes socket -> kernel pipe -> socket with ``os.splice``: nothing is copied into
the process, and one call moves up to a megabyte.

It behaves like ``Pipe`` (same attributes, ``close``/``abort``/``lost``, ``on_close``):
flow control comes from the kernel pipe (a direction stops reading its source while
its pipe cannot be emptied into the destination), an EOF is passed on as a half-close
once the pipe is drained, and the idle timeout is the route's. The Twisted transports
stay the owners of the sockets: they are only stopped while the splice runs, and
closing goes through them, so their protocols see ``connectionLost`` as usual.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from typing import Any

from twisted.internet import tcp
from twisted.internet.error import ConnectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.net.pipe import PipeBase
from gateway.twisted_ext.fastio import nothing_queued

log = Logger()

# The kernel's default pipe (64 KiB): larger pipes count against a non-root user's
# pipe-user-pages-soft budget, and past it every new pipe of that user shrinks to one
# page (other programs' too). One splice moves at most this much.
PIPE_SIZE = 64 * 1024
ROUNDS = 16
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ETIMEDOUT, errno.EHOSTUNREACH)


def available() -> bool:
    return hasattr(os, "splice")


def can_splice(transport: Any) -> bool:
    """A plain, connected TCP transport with nothing left in its write buffer."""
    return (available() and type(transport) in (tcp.Server, tcp.Client)
            and transport.connected and not transport.disconnecting
            and nothing_queued(transport)
            and transport.producer is None)


def kernel_pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """Two non-blocking pipes, or OSError with none left open."""
    first = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return first, os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        for fd in first:
            os.close(fd)
        raise


class _Direction:
    """Bytes from ``source`` to ``dest`` through one kernel pipe."""

    def __init__(self, owner: SplicePipe, source: _Socket, dest: _Socket,
                 fds: tuple[int, int]) -> None:
        self.owner = owner
        self.source = source
        self.dest = dest
        self.read_fd, self.write_fd = fds
        self.buffered = 0  # bytes in the kernel pipe
        self.moved = 0
        self.eof = False
        self.done = False

    def readable(self) -> None:
        """The source has bytes (or EOF): fill the pipe and empty it into dest, again
        while both sides keep up (a few rounds per event, then the others' turn)."""
        for _ in range(ROUNDS):
            if self.done or self.buffered:
                return
            try:
                n = os.splice(self.source.fd, self.write_fd, PIPE_SIZE, flags=_FLAGS)
            except BlockingIOError:
                return
            except OSError as exc:
                self.owner.failed(exc)
                return
            if n == 0:
                self.eof = True
                self.source.want_read(False)
            else:
                self.buffered += n
            self.flush()
            if self.eof or n < PIPE_SIZE:
                return  # the source is drained for now

    def writable(self) -> None:
        self.flush()

    def flush(self) -> None:
        while self.buffered:
            try:
                n = os.splice(self.read_fd, self.dest.fd, self.buffered, flags=_FLAGS)
            except BlockingIOError:
                # dest is full: stop reading the source until it drains
                self.source.want_read(False)
                self.dest.want_write(True)
                return
            except OSError as exc:
                self.owner.failed(exc)
                return
            self.buffered -= n
            self.moved += n
            self.owner.activity()
        self.dest.want_write(False)
        if self.eof:
            self.finish()
        else:
            self.source.want_read(True)

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError):
            self.dest.sock.shutdown(socket.SHUT_WR)  # the half-close, passed on
        self.owner.direction_done()

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Socket:
    """One socket in the reactor on the splice's behalf (epoll keeps one object per
    descriptor, so reads and writes of both directions meet here)."""

    def __init__(self, owner: SplicePipe, transport: Any) -> None:
        self.owner = owner
        self.transport = transport
        self.sock: socket.socket = transport.socket
        self.fd: int = self.sock.fileno()
        self.outgoing: _Direction | None = None  # where this socket is the source
        self.incoming: _Direction | None = None  # where it is the destination
        self.reading = False
        self.writing = False

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return "SplicePipe"

    def doRead(self) -> None:
        if self.outgoing is not None:
            self.outgoing.readable()

    def doWrite(self) -> None:
        if self.incoming is not None:
            self.incoming.writable()

    def connectionLost(self, reason: Failure) -> None:
        clean = reason.check(ConnectionDone) is not None
        self.owner.lost("connection closed" if clean else "connection lost", clean)

    def want_read(self, on: bool) -> None:
        if on != self.reading and not self.owner.closed:
            self.reading = on
            (self.owner.reactor.addReader if on else self.owner.reactor.removeReader)(self)

    def want_write(self, on: bool) -> None:
        if on != self.writing and not self.owner.closed:
            self.writing = on
            (self.owner.reactor.addWriter if on else self.owner.reactor.removeWriter)(self)

    def release(self) -> None:
        if self.reading:
            self.owner.reactor.removeReader(self)
        if self.writing:
            self.owner.reactor.removeWriter(self)
        self.reading = self.writing = False


class SplicePipe(PipeBase):
    """Joins two plain TCP transports (``a``: the client's, ``b``: the upstream's)."""

    def __init__(self, reactor: Any, a: Any, b: Any, idle_timeout: float,
                 on_close: Callable[[SplicePipe, str], None] | None = None) -> None:
        fds = kernel_pipes()  # OSError (EMFILE...) here leaves both transports as they were
        super().__init__(reactor, a, b, idle_timeout, on_close)
        self.reactor = reactor
        for transport in (a, b):
            transport.stopReading()
            transport.stopWriting()
        self._a, self._b = _Socket(self, a), _Socket(self, b)
        self.to_b = _Direction(self, self._a, self._b, fds[0])
        self.to_a = _Direction(self, self._b, self._a, fds[1])
        self._a.outgoing = self._b.incoming = self.to_b
        self._b.outgoing = self._a.incoming = self.to_a
        self._a.want_read(True)
        self._b.want_read(True)

    @property
    def sent_to_a(self) -> int:
        return self.to_a.moved

    @property
    def sent_to_b(self) -> int:
        return self.to_b.moved

    def activity(self) -> None:
        self.last = self.reactor.seconds()

    # The interface Pipe's owners call. Bytes never pass through them while the splice
    # runs; after the close a read event already fetched in the same reactor pass may
    # still reach a transport, and is dropped.
    def from_a(self, data: bytes) -> None:
        if not self.closed:
            raise RuntimeError("a splice pipe reads its sockets itself")

    from_b = from_a

    def eof_from(self, side: Any) -> None:
        pass  # seen as a zero-length splice

    def direction_done(self) -> None:
        if self.to_a.done and self.to_b.done:
            self.close("both sides finished")

    def failed(self, exc: OSError) -> None:
        if exc.errno not in _GONE:
            log.warn("tunnel splice failed: {error}", error=str(exc))
        self.abort("connection reset" if exc.errno in _GONE else str(exc))

    def _release(self) -> None:
        """Hand the sockets back to their transports (which then close them)."""
        for end in (self._a, self._b):
            end.release()
        self.to_a.close()
        self.to_b.close()
