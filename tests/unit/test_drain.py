"""The gateway's graceful stop (``services/drain.py``) and each codec's part in it
(``drain``), on in-memory transports and a memory clock: idle connections close at
once, requests in flight finish with ``connection: close`` (HTTP/1.1) or after a GOAWAY
NO_ERROR (HTTP/2), ``/ping`` says not ready, and the timeout or a second signal cuts
what is left."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.settings import Options
from gateway.dataplane.codecs.switch import ProtocolSwitch
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import build_plan
from gateway.services.drain import DRAINING, POLL_INTERVAL, SHUTTING_DOWN, Drain, DrainResult
from gateway.ssh.service import Active, SshService
from gateway.workers.supervisor import STOP_TIMEOUT
from tests.support import h2frames as f
from tests.unit.test_http1 import SNAPSHOT, Http1TestCase, get, parse
from tests.unit.test_http2_codec import H2TestCase

UPSTREAM_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@dataclass
class FakePart:
    """A drained part whose connections end when the test says so."""

    open: int
    begun: bool = False
    cut_with: list[str] = field(default_factory=list)

    def drain_begin(self) -> None:
        self.begun = True

    def drain_poll(self) -> int:
        return self.open

    def drain_cut(self, reason: str) -> int:
        self.cut_with.append(reason)
        left, self.open = self.open, 0
        return left


class DrainTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.began: list[str] = []

    def drain(self, *parts: FakePart, timeout: float = 5.0) -> Drain:
        return Drain(self.reactor, lambda: timeout, parts,
                     on_begin=[lambda: self.began.append("ready off")], signals=False)

    def test_ends_when_the_last_connection_does(self) -> None:
        part = FakePart(open=2)
        drain = self.drain(part)
        done = drain.run()
        self.assertTrue(part.begun)
        self.assertEqual(self.began, ["ready off"])
        self.assertNoResult(done)
        self.assertEqual(DRAINING._value.get(), 2)  # type: ignore[attr-defined]
        part.open = 0
        self.reactor.advance(POLL_INTERVAL)
        result = self.successResultOf(done)
        self.assertEqual(result, DrainResult(2, 0, POLL_INTERVAL, "done"))
        self.assertEqual(result.finished, 2)
        self.assertEqual(part.cut_with, [])
        self.assertEqual(DRAINING._value.get(), 0)  # type: ignore[attr-defined]
        self.assertFalse(self.reactor.getDelayedCalls())

    def test_timeout_cuts_what_is_left(self) -> None:
        part, other = FakePart(open=3), FakePart(open=1)
        done = self.drain(part, other, timeout=2.0).run()
        other.open = 0  # finished in time
        self.reactor.advance(1.9)
        self.assertNoResult(done)
        self.reactor.advance(0.1)
        result = self.successResultOf(done)
        self.assertEqual((result.started, result.cut, result.finished, result.why),
                         (4, 3, 1, "timeout"))
        self.assertEqual(part.cut_with, [SHUTTING_DOWN])

    def test_a_second_signal_cuts_at_once(self) -> None:
        part = FakePart(open=1)
        drain = self.drain(part, timeout=30.0)
        done = drain.run()
        self.reactor.advance(0.2)
        drain.cut_now()
        self.assertNoResult(done)  # released a turn later: the cut connections are lost
        self.reactor.advance(0)
        self.assertEqual(self.successResultOf(done).why, "signal")
        self.assertFalse(self.reactor.getDelayedCalls())  # the deadline is gone too
        drain.cut_now()  # a third signal: nothing more to do
        self.assertEqual(part.cut_with, [SHUTTING_DOWN])

    def test_zero_timeout_is_the_stop_of_old(self) -> None:
        part = FakePart(open=1)
        self.assertIsNone(self.successResultOf(self.drain(part, timeout=0).run()))
        self.assertFalse(part.begun)
        self.assertEqual(self.began, [])

    def test_nothing_open_ends_at_once(self) -> None:
        result = self.successResultOf(self.drain(FakePart(open=0)).run())
        self.assertEqual((result.started, result.why), (0, "done"))

    def test_a_second_stop_waits_for_the_same_drain(self) -> None:
        part = FakePart(open=1)
        drain = self.drain(part)
        first, second = drain.run(), drain.run()
        self.assertNoResult(second)
        part.open = 0
        self.reactor.advance(POLL_INTERVAL)
        self.assertIs(self.successResultOf(first), self.successResultOf(second))


class Http1DrainTests(Http1TestCase):
    def test_idle_keep_alive_connection_closes(self) -> None:
        self.send(get(b"/ping"))
        self.assertEqual(self.answer().status, 200)
        self.conn.drain()
        self.assertClosed()

    def test_request_in_flight_finishes_with_connection_close(self) -> None:
        self.send(get(b"/api/slow"))
        upstream = self.upstream()
        self.conn.drain()
        self.assertOpen()
        self.conn.drain()  # (every poll asks again)
        self.assertOpen()
        upstream.respond(UPSTREAM_OK)
        response = self.answer()
        self.assertEqual((response.status, response.body), (200, b"ok"))
        self.assertEqual(response.headers[b"connection"], [b"close"])
        self.assertClosed()

    def test_response_already_begun_ends_then_closes(self) -> None:
        self.send(get(b"/api/slow"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
        self.conn.drain()
        self.send(get(b"/ping"))  # pipelined after the drain began: not read
        upstream.respond(b"cd")
        responses = parse(self.output())
        self.assertEqual([(r.status, r.body) for r in responses], [(200, b"abcd")])
        self.assertClosed()

    def test_tunnel_stays_until_the_drain_cuts_it(self) -> None:
        """A websocket or CONNECT pipe is long-lived by nature: left to the drain's
        deadline (the proxy service's ``drain_cut``)."""
        self.conn.pipe = object()  # type: ignore[assignment]
        self.conn.drain()
        self.assertOpen()
        self.assertFalse(self.conn.draining)

    def test_ping_answers_503_while_draining(self) -> None:
        """A health check already on its way when the drain begins says not ready, so
        a load balancer that still had the connection sends no more."""
        self.send(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
        self.core.draining = True
        self.conn.drain()
        self.send(b"\r\n")
        response = self.answer()
        self.assertEqual((response.status, response.body), (503, b"draining\n"))
        self.assertEqual(response.headers[b"connection"], [b"close"])
        self.assertClosed()


class SwitchDrainTests(SynchronousTestCase):
    def test_connection_without_a_request_byte_closes(self) -> None:
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=False)
        switch = ProtocolSwitch(core, "auto", False)
        transport = StringTransport()
        switch.makeConnection(transport)
        self.assertIn(switch, core.connections)
        switch.drain()
        self.assertTrue(transport.disconnected)
        self.assertNotIn(switch, core.connections)


class H2DrainTests(H2TestCase):
    """Read as raw frames once the GOAWAY is out: python-h2 closes its side on a GOAWAY
    and refuses the frames of the streams still finishing, which real clients
    (nghttp2, browsers) read."""

    def frames(self) -> list[Frame]:
        frames = f.parse(bytearray(self.transport.value()))
        self.transport.clear()
        return frames

    def test_goaway_then_open_streams_finish(self) -> None:
        first = self.request(b"/x")
        second = self.request(b"/y")
        upstreams = [self.upstream(0), self.upstream(1)]
        self.server.drain()
        (goaway,) = self.frames()
        assert isinstance(goaway, GoAwayFrame)
        self.assertEqual((goaway.error_code, goaway.last_stream_id), (0, second))
        self.assertFalse(self.transport.disconnecting)
        upstreams[0].respond(UPSTREAM_OK)
        self.server.drain()  # one stream still open: the connection stays
        self.assertFalse(self.transport.disconnecting)
        upstreams[1].respond(UPSTREAM_OK)
        ends = [(type(fr).__name__, fr.stream_id, "END_STREAM" in fr.flags)
                for fr in self.frames()]
        self.assertEqual(ends, [("HeadersFrame", first, False), ("DataFrame", first, True),
                                ("HeadersFrame", second, False), ("DataFrame", second, True)])
        self.server.drain()
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse([fr for fr in self.frames() if isinstance(fr, GoAwayFrame)])

    def test_stream_opened_after_the_goaway_is_refused(self) -> None:
        """A request crossing the GOAWAY on the wire gets REFUSED_STREAM (safe to retry
        elsewhere) and reaches no upstream."""
        first = self.request(b"/x")
        self.server.drain()
        self.frames()
        late = self.client.get_next_available_stream_id()
        self.client.send_headers(late, [(b":method", b"GET"), (b":scheme", b"https"),
                                        (b":authority", b"app.example.com"),
                                        (b":path", b"/late")], end_stream=True)
        f.deliver(self.server, self.reactor, self.client.data_to_send())
        self.assertEqual(len(self.reactor.tcpClients), 1)
        (reset,) = self.frames()
        assert isinstance(reset, RstStreamFrame)
        self.assertEqual((reset.stream_id, reset.error_code), (late, 7))  # REFUSED_STREAM
        self.upstream().respond(UPSTREAM_OK)
        self.assertEqual([fr.stream_id for fr in self.frames()], [first, first])

    def test_idle_connection_closes_after_its_goaway(self) -> None:
        self.server.drain()
        (goaway,) = self.frames()
        assert isinstance(goaway, GoAwayFrame)
        self.assertEqual(goaway.last_stream_id, 0)
        self.assertTrue(self.transport.disconnecting)


class SshDrainTests(SynchronousTestCase):
    """SSH sessions are long-lived: kept through the drain, then closed with a
    disconnect message OpenSSH prints ("the gateway is shutting down")."""

    def test_sessions_stay_then_are_told_why(self) -> None:
        told: list[tuple[int, bytes]] = []

        class Transport:
            def sendDisconnect(self, code: int, message: bytes) -> None:
                told.append((code, message))

        stopped: list[bool] = []

        class Listener:
            def stopService(self) -> None:
                stopped.append(True)

        service = SshService.__new__(SshService)
        service.listener = Listener()  # type: ignore[assignment]
        service.active = {"c1": Active(Transport(), None, "s", None, 0.0, 1,  # type: ignore[arg-type]
                                       "allowed")}
        service.drain_begin()
        self.assertEqual(stopped, [True])
        self.assertEqual(service.drain_poll(), 1)
        self.assertEqual(told, [])
        self.assertEqual(service.drain_cut(SHUTTING_DOWN), 1)
        self.assertEqual(told, [(11, b"the gateway is shutting down")])  # BY_APPLICATION


def test_systemd_unit_waits_for_the_drain_and_the_supervisor() -> None:
    """systemd's SIGKILL (TimeoutStopSec) must come after the default drain and the
    supervisor's own SIGKILL fallback, or a stop would cut what the drain lets finish."""
    unit = (Path(__file__).resolve().parents[2] / "debian" / "gateway.service").read_text()
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("TimeoutStopSec=")]
    seconds = float(line.partition("=")[2].removesuffix("s"))
    default = Options.shutdown_drain_timeout
    assert 0 < default < 10  # inside podman's and docker's 10 s stop grace
    assert seconds > default + STOP_TIMEOUT
