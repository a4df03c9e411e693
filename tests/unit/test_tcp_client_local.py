"""The local end of a tunnel over in-memory transports: held paused while the tunnel
opens, what it sent meanwhile forwarded after the gateway's early bytes, end of stream
passed on as a half-close (plain) or lingering (TLS), failures reported and closed."""

from __future__ import annotations

import contextlib
import os

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.tcp.dial import GatewayConnection
from gateway.cli.tcp.local import LINGER, LocalSide, Outcome
from gateway.cli.tcp.messages import TunnelError
from gateway.cli.tcp.stdio import StdioEnds
from gateway.net.pipe import CLOSE_GRACE

OK = b"HTTP/1.1 200 Connection established\r\n\r\n"


class HalfCloseable(StringTransport):
    """A StringTransport that also records ``loseWriteConnection`` (as TCP has)."""

    write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True


class Recorded(Outcome):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def opened(self, side: LocalSide) -> None:
        self.events.append(("opened", ""))

    def failed(self, side: LocalSide, message: str) -> None:
        self.events.append(("failed", message))

    def closed(self, side: LocalSide, reason: str) -> None:
        self.events.append(("closed", reason))

    def gone(self, side: LocalSide) -> None:
        self.events.append(("gone", ""))


class LocalSideTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.outcome = Recorded()
        self.opening: Deferred[GatewayConnection] = Deferred()
        self.local_transport = HalfCloseable()

    def start(self, half_close: bool = True) -> LocalSide:
        side = LocalSide(self.clock, lambda: self.opening, half_close, self.outcome)
        side.makeConnection(self.local_transport)
        return side

    def remote(self, *after_head: bytes) -> tuple[GatewayConnection, HalfCloseable]:
        remote = GatewayConnection(b"CONNECT x:1 HTTP/1.1\r\n\r\n")
        transport = HalfCloseable()
        remote.makeConnection(transport)
        transport.clear()
        remote.dataReceived(OK + b"".join(after_head[:1]))
        for data in after_head[1:]:
            remote.dataReceived(data)
        return remote, transport

    def test_paused_while_opening_then_everything_in_order(self) -> None:
        side = self.start()
        self.assertEqual(self.local_transport.producerState, "paused")
        side.dataReceived(b"SSH-2.0-client\r\n")  # read before the pause took effect
        remote, remote_transport = self.remote(b"SSH-2.0-server\r\n", b"more")
        self.assertEqual(remote_transport.producerState, "paused")
        self.opening.callback(remote)
        self.assertEqual(self.local_transport.value(), b"SSH-2.0-server\r\nmore")
        self.assertEqual(remote_transport.value(), b"SSH-2.0-client\r\n")
        self.assertEqual(self.local_transport.producerState, "producing")
        self.assertEqual(remote_transport.producerState, "producing")
        self.assertEqual(self.outcome.events, [("opened", "")])
        remote.dataReceived(b"later")
        side.dataReceived(b"reply")
        self.assertTrue(self.local_transport.value().endswith(b"later"))
        self.assertTrue(remote_transport.value().endswith(b"reply"))
        # each side is the other's producer: a slow reader pauses the fast writer
        self.assertIs(self.local_transport.producer, remote_transport)
        self.assertIs(remote_transport.producer, self.local_transport)

    def test_half_close_both_ways_over_plain_tcp(self) -> None:
        side = self.start(half_close=True)
        remote, remote_transport = self.remote()
        self.opening.callback(remote)
        side.readConnectionLost()
        self.assertTrue(remote_transport.write_closed)
        self.assertFalse(remote_transport.disconnecting)
        remote.dataReceived(b"answer after our EOF")
        self.assertEqual(self.local_transport.value(), b"answer after our EOF")
        remote.readConnectionLost()  # both directions ended: both connections close
        self.assertTrue(remote_transport.disconnecting)
        self.assertTrue(self.local_transport.disconnecting)
        self.assertEqual(self.outcome.events[-1], ("closed", "both sides finished"))

    def test_local_end_before_the_tunnel_is_passed_on_after(self) -> None:
        side = self.start(half_close=True)
        side.dataReceived(b"PING\r\n")
        side.readConnectionLost()
        remote, remote_transport = self.remote()
        self.opening.callback(remote)
        self.assertEqual(remote_transport.value(), b"PING\r\n")
        self.assertTrue(remote_transport.write_closed)

    def test_gateway_end_before_the_pipe_is_passed_on_after(self) -> None:
        self.start()
        remote, _ = self.remote(b"bye")
        remote.readConnectionLost()
        self.opening.callback(remote)
        self.assertEqual(self.local_transport.value(), b"bye")
        self.assertTrue(self.local_transport.write_closed)

    def test_over_tls_the_local_end_lingers_while_the_gateway_sends(self) -> None:
        side = self.start(half_close=False)
        remote, remote_transport = self.remote()
        self.opening.callback(remote)
        side.dataReceived(b"PING\r\n")
        side.readConnectionLost()
        self.assertFalse(remote_transport.write_closed)  # never a raw TCP shutdown under TLS
        self.clock.advance(LINGER - 0.5)
        remote.dataReceived(b"+PONG\r\n")
        self.clock.advance(LINGER - 0.5)
        self.assertFalse(remote_transport.disconnecting)
        self.assertEqual(self.local_transport.value(), b"+PONG\r\n")
        self.clock.advance(1.0)
        self.assertTrue(remote_transport.disconnecting)
        self.assertTrue(self.local_transport.disconnecting)
        self.assertEqual(self.outcome.events[-1], ("closed", "the local side finished sending"))

    def test_gateway_closes_the_tunnel(self) -> None:
        side = self.start()
        remote, _ = self.remote()
        self.opening.callback(remote)
        remote.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(self.local_transport.disconnecting)
        self.assertEqual(self.outcome.events[-1], ("closed", "the gateway closed the tunnel"))
        side.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.outcome.events[-1], ("gone", ""))

    def test_failure_is_reported_and_the_local_connection_closed(self) -> None:
        side = self.start()
        self.opening.errback(TunnelError("no TCP route for x:1"))
        self.assertEqual(self.outcome.events, [("failed", "no TCP route for x:1")])
        self.assertTrue(self.local_transport.disconnecting)
        self.assertEqual(side.failure, "no TCP route for x:1")

    def test_local_connection_gone_while_opening_cancels(self) -> None:
        side = self.start()
        side.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(self.opening.called)
        self.assertFalse(any(event == "failed" for event, _ in self.outcome.events))
        self.flushLoggedErrors()

    def test_tunnel_after_the_local_side_went_away_is_closed(self) -> None:
        opening: Deferred[GatewayConnection] = Deferred(lambda d: None)
        self.opening = opening
        side = self.start()
        side.lost = True  # as if connectionLost came while a sign-in could not be cancelled
        remote, remote_transport = self.remote()
        side._established(remote)
        self.assertTrue(remote_transport.disconnecting)


class StdioTests(SynchronousTestCase):
    """``--listen -``: the local end is stdin/stdout, which the pipe may have to abort."""

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.outcome = Recorded()
        self.opening: Deferred[GatewayConnection] = Deferred()
        stdin_r, self.stdin_w = os.pipe()
        self.stdout_r, stdout_w = os.pipe()
        self.fds = [stdin_r, self.stdin_w, self.stdout_r, stdout_w]
        self.side = LocalSide(self.clock, lambda: self.opening, True, self.outcome)
        self.stdio = StdioEnds(self.side, stdin=stdin_r, stdout=stdout_w, reactor=self.clock)

    def tearDown(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def test_unfinished_close_ends_stdio(self) -> None:
        """The gateway ends the tunnel; stdout cannot be flushed (its reader stopped
        reading), so the pipe aborts it after ``CLOSE_GRACE``: that ends the local side
        (before the fix, ``abortConnection`` raised and ``gateway tcp`` never exited)."""
        remote = GatewayConnection(b"CONNECT x:1 HTTP/1.1\r\n\r\n")
        remote_transport = HalfCloseable()
        remote.makeConnection(remote_transport)
        remote.dataReceived(OK)
        self.opening.callback(remote)
        self.assertEqual(self.outcome.events, [("opened", "")])
        remote.dataReceived(b"x" * 65536)  # more than the pipe buffer: stdout blocks
        remote.connectionLost(Failure(ConnectionLost()))
        self.assertFalse(self.stdio.disconnected)
        self.clock.advance(CLOSE_GRACE)
        self.assertTrue(self.stdio.disconnected)
        self.assertIn(("gone", ""), self.outcome.events)

    def test_close_after_stdout_went_away_ends_at_once(self) -> None:
        """stdout closed by its reader first (ssh exited); then the gateway ends the
        tunnel: the local side ends now, not ``CLOSE_GRACE`` later."""
        remote = GatewayConnection(b"CONNECT x:1 HTTP/1.1\r\n\r\n")
        remote.makeConnection(HalfCloseable())
        remote.dataReceived(OK)
        self.opening.callback(remote)
        self.stdio.childConnectionLost("write", Failure(ConnectionDone()))
        self.assertFalse(self.stdio.disconnected)
        remote.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(self.stdio.disconnected)
        self.assertIn(("gone", ""), self.outcome.events)

    def test_abort_stops_both_directions(self) -> None:
        """Neither descriptor is watched any more and the protocol hears of it (once)."""
        self.assertTrue(self.clock.getReaders())
        self.stdio.abortConnection()
        self.stdio.abortConnection()  # a second abort is harmless
        self.assertTrue(self.stdio.disconnected)
        self.assertEqual((self.clock.getReaders(), self.clock.getWriters()), ([], []))
        self.assertEqual(self.outcome.events.count(("gone", "")), 1)
