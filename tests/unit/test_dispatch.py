"""``lean_dispatch``: the epoll reactor's loop without Twisted's per-event log context,
which behaves as Twisted's otherwise (reads dispatched, errors logged, loop goes on)."""

from __future__ import annotations

import os

from twisted.internet.epollreactor import EPollReactor
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.twisted_ext.dispatch import lean_dispatch


class _Reader:
    """A pipe's read end as a reactor selectable, counting what the loop asks of it."""

    def __init__(self, fd: int, fail: bool = False) -> None:
        self.fd = fd
        self.fail = fail
        self.reads: list[bytes] = []
        self.prefixes = 0

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        self.prefixes += 1
        return "reader"

    def doRead(self) -> None:
        self.reads.append(os.read(self.fd, 100))
        if self.fail:
            raise RuntimeError("boom")

    def connectionLost(self, reason: object) -> None:
        pass


class LeanDispatchTests(SynchronousTestCase):
    def reactor_with(self, *readers: _Reader) -> EPollReactor:
        reactor = EPollReactor()
        self.addCleanup(reactor._poller.close)
        self.addCleanup(reactor.removeAll)
        for reader in readers:
            reactor.addReader(reader)  # type: ignore[arg-type]
        return reactor

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        return r, w

    def test_reads_dispatched_without_log_context(self) -> None:
        """A ready descriptor's doRead runs; ``logPrefix`` (which Twisted's loop asks of
        every event, to label legacy log lines) is never called."""
        r, w = self.pipe()
        reader = _Reader(r)
        reactor = self.reactor_with(reader)
        self.assertTrue(lean_dispatch(reactor))
        os.write(w, b"hello")
        reactor.doIteration(0)
        self.assertEqual(reader.reads, [b"hello"])
        self.assertEqual(reader.prefixes, 0)

    def test_error_logged_and_other_events_served(self) -> None:
        """An exception from one event is logged and disconnects that selectable only;
        the other ready descriptor of the same poll is served."""
        r1, w1 = self.pipe()
        r2, w2 = self.pipe()
        failing, fine = _Reader(r1, fail=True), _Reader(r2)
        reactor = self.reactor_with(failing, fine)
        lean_dispatch(reactor)
        os.write(w1, b"a")
        os.write(w2, b"b")
        reactor.doIteration(0)
        self.assertEqual((failing.reads, fine.reads), ([b"a"], [b"b"]))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertNotIn(failing, reactor.getReaders())
        self.assertIn(fine, reactor.getReaders())

    def test_other_reactors_left_alone(self) -> None:
        self.assertFalse(lean_dispatch(MemoryReactorClock()))
