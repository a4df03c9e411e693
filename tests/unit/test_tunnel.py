"""CONNECT tunnels without sockets: the authority parser, TCP routes in the plan and
the config, the byte pipe, and the HTTP/1.1 codec's CONNECT path on a memory reactor
(early bytes, half-close, re-authorization of an open tunnel)."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.head import ConnectionFacts
from gateway.dataplane.routing.plan import build_plan
from gateway.net.pipe import Pipe
from gateway.wire.normalize import BadTarget, connect_authority
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import IDENTITY, base_config, errors_of, load

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
ROUTES = [
    {"from": "tcp+https://db.example.com:5432", "to": "tcp://127.0.0.1:15432",
     "allowed_users": ["alice@example.com"]},
    {"from": "https://db.example.com:5432", "to": "http://127.0.0.1:18080",
     "allow_public_unauthenticated_access": True},
    {"from": "tcp+https://open.example.com:22", "to": "tcp://127.0.0.1:2222",
     "allow_public_unauthenticated_access": True, "timeout": "10s"},
]
SNAPSHOT = load(base_config(policy=ROUTES, **IDENTITY))



# The 200 that opens a tunnel, with the exchange's X-Request-Id (as every answer has).
OK_HEAD = rb"\AHTTP/1\.1 200 Connection established\r\nx-request-id: [0-9a-f]{32}\r\n\r\n"

class AuthorityTests(SynchronousTestCase):
    def test_valid(self) -> None:
        """host:port, lower-cased, trailing dot removed; IPv6 literals in brackets."""
        for target, expected in ((b"DB.Example.com:5432", "db.example.com:5432"),
                                 (b"db.example.com.:5432", "db.example.com:5432"),
                                 (b"127.0.0.1:22", "127.0.0.1:22"),
                                 (b"[::1]:6379", "[::1]:6379"),
                                 (b"a:1", "a:1"), (b"a:65535", "a:65535")):
            self.assertEqual(connect_authority(target), expected)

    def test_invalid(self) -> None:
        """Only the authority form: no path, scheme, user info, missing or bad port."""
        for target in (b"db.example.com", b"db.example.com:", b"/db:1", b"http://db:1/",
                       b"user@db:1", b"db:0", b"db:65536", b"db:1:2", b"::1:22", b"",
                       b"db:1/x", b"db :1", b"-db:1", b"db:+1"):
            with self.assertRaises(BadTarget, msg=target):
                connect_authority(target)


class RouteTests(SynchronousTestCase):
    def test_lookup_prefers_the_kind_asked_for(self) -> None:
        """An HTTP route and a TCP route on one host:port: CONNECT finds the TCP one,
        an ordinary request the HTTP one."""
        plan = build_plan(SNAPSHOT)
        tcp, known = plan.lookup_tcp("db.example.com:5432")
        self.assertTrue(known)
        assert tcp is not None
        self.assertTrue(tcp.tcp)
        http, _ = plan.lookup("db.example.com:5432", "/")
        assert http is not None
        self.assertFalse(http.tcp)
        self.assertEqual(plan.lookup_tcp("db.example.com:5433"), (None, False))
        only_tcp, _ = plan.lookup("open.example.com:22", "/")
        assert only_tcp is not None
        self.assertTrue(only_tcp.tcp)  # the codec answers 405 naming CONNECT

    def test_tcp_timeout_defaults_to_none(self) -> None:
        """A TCP route's timeout is an idle timeout: none unless set; an HTTP route keeps
        default_upstream_timeout."""
        by_from = {r.from_url: r for r in SNAPSHOT.routes}
        self.assertEqual(by_from["tcp+https://db.example.com:5432"].timeout, 0.0)
        self.assertEqual(by_from["tcp+https://open.example.com:22"].timeout, 10.0)
        self.assertEqual(by_from["https://db.example.com:5432"].timeout, 30.0)

    def test_tcp_timeout_not_capped_by_timeout_write(self) -> None:
        """Like websocket routes, a tunnel's idle timeout may exceed timeout_write; an
        HTTP route's may not."""
        load(base_config(timeout_write="5s", policy=[
            {"from": "tcp+https://db.example.com:5432", "to": "tcp://127.0.0.1:1",
             "allow_public_unauthenticated_access": True, "timeout": "1h"}]))
        self.assertTrue(any("exceeds timeout_write" in e for e in errors_of(base_config(
            timeout_write="5s", policy=[{"from": "https://a.example.com",
                                         "to": "http://127.0.0.1:1", "timeout": "1h",
                                         "allow_public_unauthenticated_access": True}]))))


class _End(StringTransport):
    """A transport end that can half-close, recording it (and failing as Twisted's TCP
    transport does when its socket is already gone)."""

    def __init__(self) -> None:
        super().__init__()
        self.write_closed = False
        self.disconnected = False

    def loseWriteConnection(self) -> None:
        if self.disconnected:
            raise ValueError("file descriptor cannot be a negative integer (-1)")
        self.write_closed = True

    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        super().abortConnection()


class PipeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.a, self.b = _End(), _End()
        self.reasons: list[str] = []
        self.pipe = Pipe(self.clock, self.a, self.b, 5.0,
                         on_close=lambda pipe, reason: self.reasons.append(reason))

    def test_relays_and_counts(self) -> None:
        self.pipe.from_a(b"abc")
        self.pipe.from_b(b"12345")
        self.assertEqual((self.b.value(), self.a.value()), (b"abc", b"12345"))
        self.assertEqual((self.pipe.sent_to_b, self.pipe.sent_to_a), (3, 5))

    def test_each_end_is_the_others_producer(self) -> None:
        """A full client buffer pauses the upstream read, and the other way round."""
        self.assertIs(self.a.producer, self.b)
        self.assertIs(self.b.producer, self.a)

    def test_half_close_then_both(self) -> None:
        """One side's EOF half-closes the other and the pipe stays open; the second
        EOF closes it."""
        self.pipe.eof_from(self.a)
        self.assertTrue(self.b.write_closed)
        self.assertFalse(self.pipe.closed)
        self.pipe.from_b(b"still answering")
        self.assertEqual(self.a.value(), b"still answering")
        self.pipe.eof_from(self.b)
        self.assertTrue(self.pipe.closed)
        self.assertEqual(self.reasons, ["both sides finished"])
        self.assertTrue(self.a.disconnecting and self.b.disconnecting)

    def test_eof_toward_a_closed_side_closes(self) -> None:
        """The client's EOF arrives after the upstream's socket closed (its
        connectionLost still to come): the pipe closes, no half-close on a dead socket
        (a traceback in the soak's websocket sessions)."""
        self.b.disconnected = True
        self.pipe.eof_from(self.a)
        self.assertTrue(self.pipe.closed)
        self.assertFalse(self.b.write_closed)

    def test_reset_passed_on_as_reset(self) -> None:
        """A side lost by a reset aborts the other (a clean close there would make a
        truncated stream look complete)."""
        self.pipe.lost("upstream connection lost", clean=False)
        self.assertTrue(self.a.aborted and self.b.aborted)
        self.assertEqual(self.reasons, ["upstream connection lost"])

    def test_close_that_cannot_finish_is_aborted(self) -> None:
        """Closing toward a peer that stopped reading (data still buffered) or never
        answers close_notify: aborted after CLOSE_GRACE."""
        from gateway.net.pipe import CLOSE_GRACE

        self.pipe.from_b(b"unread by a stuck client")
        self.pipe.close("idle timeout")
        self.assertFalse(self.a.aborted)
        self.b.disconnected = True  # this side finished its close
        self.clock.advance(CLOSE_GRACE + 0.1)
        self.assertTrue(self.a.aborted)
        self.assertFalse(self.b.aborted)

    def test_eof_after_the_pipe_closed_is_ignored(self) -> None:
        """The upstream's close ended the pipe; the client's EOF comes afterwards."""
        self.pipe.lost("upstream closed")
        self.b.disconnected = True
        self.pipe.eof_from(self.a)
        self.assertEqual(self.reasons, ["upstream closed"])

    def test_no_half_close_closes(self) -> None:
        """An end that cannot half-close (TLS): the other side's EOF closes the pipe."""
        plain, other = StringTransport(), _End()
        pipe = Pipe(self.clock, plain, other, 0, on_close=lambda p, r: self.reasons.append(r))
        pipe.eof_from(other)
        self.assertTrue(pipe.closed)
        self.assertEqual(self.reasons, ["upstream finished sending"])

    def test_idle_timeout(self) -> None:
        """Traffic keeps the pipe open; the idle timeout after the last byte closes it."""
        self.clock.advance(4)
        self.pipe.from_a(b"x")
        self.clock.advance(4)
        self.assertFalse(self.pipe.closed)
        self.clock.advance(1.5)
        self.assertTrue(self.pipe.closed)
        self.assertEqual(self.reasons, ["idle timeout"])

    def test_no_idle_timeout(self) -> None:
        pipe = Pipe(self.clock, StringTransport(), StringTransport(), 0)
        self.clock.advance(10 ** 6)
        self.assertFalse(pipe.closed)


class SwitchableAuthorizer:
    """Allows alice's tunnel until told otherwise (a sign-out elsewhere), or breaks."""

    def __init__(self) -> None:
        self.allowed = True
        self.calls = 0
        self.broken: str = ""  # "raise" or "errback"

    def authorize(self, request: RequestInfo, route: object) -> Decision | Deferred[Decision]:
        self.calls += 1
        if self.calls > 1 and self.broken == "raise":
            raise KeyError("session store exploded")
        if self.calls > 1 and self.broken == "errback":
            return fail(KeyError("session store exploded"))
        if self.allowed:
            return Allow()
        return Reply(401, b"signed out", reason="unauthenticated")

    def handles(self, host: str, path: str) -> bool:
        return False

    def internal(self, request: RequestInfo, body: bytes = b"") -> Decision | None:
        return None


class _ConnectCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.authorizer = SwitchableAuthorizer()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False,
                              authorizer=self.authorizer)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)

    def open(self, extra: bytes = b"") -> Any:
        self.conn.dataReceived(b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
                               b"Host: db.example.com:5432\r\n\r\n" + extra)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        host, port = self.reactor.tcpClients[0][:2]
        self.assertEqual((host, port), ("127.0.0.1", 15432))
        return MemoryUpstream(self.reactor)


class Http1ConnectTests(_ConnectCase):

    def test_tunnel(self) -> None:
        """200, then bytes both ways; bytes that came with the head go upstream first."""
        upstream = self.open(b"early")
        self.assertRegex(self.client.value(), OK_HEAD + rb"\Z")  # with its request id
        self.assertEqual(upstream.received(), b"early")
        self.conn.dataReceived(b"more")
        self.assertEqual(upstream.received(), b"more")
        upstream.respond(b"answer")
        self.assertTrue(self.client.value().endswith(b"\r\n\r\nanswer"))

    def test_bytes_arriving_before_the_tunnel_opens(self) -> None:
        """Bytes that come after the CONNECT head in a later read (a later TLS record)
        are the tunnel's, not a request: they reach the upstream after the head's."""
        self.conn.dataReceived(b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
                               b"Host: db.example.com:5432\r\n\r\nfirst ")
        self.conn.dataReceived(b"GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n")
        self.assertFalse(self.client.disconnecting)
        upstream = MemoryUpstream(self.reactor)
        self.assertEqual(upstream.received(),
                         b"first GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n")
        self.assertRegex(self.client.value(), OK_HEAD + rb"\Z")

    def test_upstream_speaks_first(self) -> None:
        """A service that greets on connect (SSH): the greeting follows the 200."""
        self.conn.dataReceived(b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
                               b"Host: db.example.com:5432\r\n\r\n")
        factory = self.reactor.tcpClients[0][2]
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 15432))
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b"SSH-2.0-test\r\n")
        self.assertRegex(self.client.value(), OK_HEAD + rb"SSH-2\.0-test\r\n\Z")

    def test_client_half_close_passed_on(self) -> None:
        """The client's EOF half-closes the upstream connection; the upstream's answer
        still reaches the client, and its EOF then ends the tunnel."""
        self.conn.dataReceived(b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
                               b"Host: db.example.com:5432\r\n\r\n")
        factory = self.reactor.tcpClients[0][2]
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 15432))
        upstream = _End()
        protocol.makeConnection(upstream)
        self.conn.readConnectionLost()
        self.assertTrue(upstream.write_closed)
        self.assertFalse(self.client.disconnecting)
        protocol.dataReceived(b"last words")
        self.assertTrue(self.client.value().endswith(b"last words"))
        protocol.readConnectionLost()
        self.assertTrue(self.client.disconnecting)

    def test_revoked_session_ends_tunnel(self) -> None:
        """The open tunnel is authorized again every second: a sign-out ends it."""
        upstream = self.open()
        calls = self.authorizer.calls
        self.reactor.advance(1.25)
        self.assertGreater(self.authorizer.calls, calls)
        self.assertFalse(self.client.disconnecting)
        self.authorizer.allowed = False
        self.reactor.advance(1.25)
        self.assertTrue(self.client.disconnected)
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual(self.core.tunnels, set())

    def test_denied_never_connects(self) -> None:
        """A refused CONNECT opens no upstream connection; a sign-in redirect becomes
        401 for a tunnel client."""
        self.authorizer.allowed = False
        self.conn.dataReceived(b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
                               b"Host: db.example.com:5432\r\n\r\n")
        self.assertEqual(self.reactor.tcpClients, [])
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 401 "))
        self.assertIn(b"gateway tcp db.example.com:5432", self.client.value())


class TunnelRecheckFailureTests(_ConnectCase):
    def test_authorizer_exception_closes_tunnel_and_watchdog_survives(self) -> None:
        """A check that raises ends the tunnel (fail closed) and the listener's
        watchdog keeps running: timeouts and other re-checks still happen."""
        for broken in ("raise", "errback"):
            with self.subTest(broken=broken):
                self.setUp()
                self.authorizer.broken = broken
                upstream = self.open()
                self.reactor.advance(1.25)
                self.assertTrue(self.client.disconnected, broken)
                self.assertTrue(upstream.transport.disconnected)
                self.assertTrue(self.core._watchdog.running)
                self.assertEqual(self.core.tunnels, set())
                self.flushLoggedErrors(KeyError)

    def test_client_certificate_rechecked(self) -> None:
        """A route whose client-certificate policy now refuses the connection (a CRL
        reload, a new client CA) ends its open tunnels."""
        upstream = self.open()
        verdict: list[str | None] = [None]
        self.patch(ConnectionFacts, "client_cert_problem", lambda facts, policy: verdict[0])
        plan, _ = self.core.plan.lookup_tcp("db.example.com:5432")
        assert plan is not None
        plan.client_cert = object()  # type: ignore[assignment]
        self.reactor.advance(1.25)
        self.assertFalse(self.client.disconnected)
        verdict[0] = "revoked"
        self.reactor.advance(1.25)
        self.assertTrue(self.client.disconnected)
        self.assertTrue(upstream.transport.disconnected)


class SpliceSetupTests(_ConnectCase):
    def test_kernel_pipes_leave_nothing_open_on_failure(self) -> None:
        import os

        from gateway.dataplane.pipes import splice

        opened: list[tuple[int, int]] = []
        real = os.pipe2

        def second_fails(flags: int) -> tuple[int, int]:
            if opened:
                raise OSError(24, "Too many open files")
            opened.append(real(flags))
            return opened[0]

        self.patch(splice.os, "pipe2", second_fails)
        with self.assertRaises(OSError):
            splice.kernel_pipes()
        for fd in opened[0]:
            with self.assertRaises(OSError):
                os.fstat(fd)  # closed again

    def test_splice_unavailable_falls_back_to_copying(self) -> None:
        """No descriptors for the kernel pipes: the tunnel opens with the copying pipe
        (it used to stop both sockets first and hang)."""
        from gateway.dataplane.codecs import http1

        def no_pipes(*args: object, **kwargs: object) -> None:
            raise OSError(24, "Too many open files")

        self.patch(http1, "can_splice", lambda transport: True)
        self.patch(http1, "SplicePipe", no_pipes)
        upstream = self.open(b"early")
        self.assertIsInstance(self.conn.pipe, Pipe)
        self.assertEqual(upstream.received(), b"early")
        upstream.respond(b"answer")
        self.assertTrue(self.client.value().endswith(b"\r\n\r\nanswer"))
        self.flushLoggedErrors()


WS_ROUTES = [
    {"from": "https://chat.example.com", "to": "http://127.0.0.1:18081",
     "allowed_users": ["alice@example.com"], "allow_websockets": True},
]


class WebsocketRecheckTests(SynchronousTestCase):
    """An upgraded connection is a pipe that outlives its request, like a tunnel: it is
    authorized again every second and ends on a sign-out or a policy edit."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.authorizer = SwitchableAuthorizer()
        self.core = ProxyCore(self.reactor, build_plan(load(base_config(
            policy=WS_ROUTES, **IDENTITY))), tls=False, authorizer=self.authorizer)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)
        self.conn.dataReceived(b"GET /socket HTTP/1.1\r\nHost: chat.example.com\r\n"
                               b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        self.upstream = MemoryUpstream(self.reactor)
        self.assertIn(b"upgrade: websocket", self.upstream.received().lower())
        self.upstream.respond(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                              b"Connection: Upgrade\r\n\r\nhello")
        self.assertTrue(self.client.value().endswith(b"hello"))
        self.assertEqual(len(self.core.tunnels), 1)

    def test_sign_out_ends_the_websocket(self) -> None:
        calls = self.authorizer.calls
        self.reactor.advance(1.25)
        self.assertGreater(self.authorizer.calls, calls)
        self.assertFalse(self.client.disconnecting)
        self.authorizer.allowed = False
        self.reactor.advance(1.25)
        self.assertTrue(self.client.disconnected)
        self.assertTrue(self.upstream.transport.disconnected)
        self.assertEqual(self.core.tunnels, set())

    def test_route_no_longer_allowing_websockets_ends_it(self) -> None:
        routes = [{**WS_ROUTES[0], "allow_websockets": False}]
        self.core.set_plan(build_plan(load(base_config(policy=routes, **IDENTITY))))
        self.reactor.advance(1.25)
        self.assertTrue(self.client.disconnected)
        self.assertEqual(self.core.tunnels, set())

    def test_closed_websocket_is_forgotten(self) -> None:
        self.upstream.protocol.connectionLost(Failure(ConnectionDone()))
        self.reactor.advance(11)
        self.assertEqual(self.core.tunnels, set())


class RecordingWatch:
    """``core.live``: what the data plane asks to watch, and a way to end it."""

    def __init__(self) -> None:
        self.watched: list[tuple[list[tuple[bytes, bytes]], Any]] = []
        self.forgotten = 0

    def watch(self, headers: list[tuple[bytes, bytes]], end: Any) -> Any:
        self.watched.append((headers, end))

        def forget() -> None:
            self.forgotten += 1
        return forget


class SessionEndTests(_ConnectCase):
    """Issue 42: a tunnel or websocket is listed under its session when it opens, so
    the session's end closes it at once rather than at its next check."""

    def setUp(self) -> None:
        super().setUp()
        self.live = RecordingWatch()
        self.core.live = self.live

    def test_the_session_ending_closes_the_tunnel_at_once(self) -> None:
        upstream = self.open()
        self.assertEqual(len(self.live.watched), 1)
        headers, end = self.live.watched[0]
        self.assertIn((b"host", b"db.example.com:5432"),
                      [(k.lower(), v) for k, v in headers])
        end("your session has ended (signed out or revoked)")  # no clock advance
        self.assertTrue(self.client.disconnected)
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual(self.core.tunnels, set())

    def test_a_closed_tunnel_is_forgotten(self) -> None:
        upstream = self.open()
        upstream.protocol.connectionLost(Failure(ConnectionDone()))
        self.conn.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.live.forgotten, 1)

    def test_a_public_tunnel_is_not_watched(self) -> None:
        self.conn.dataReceived(b"CONNECT open.example.com:22 HTTP/1.1\r\n"
                               b"Host: open.example.com:22\r\n\r\n")
        MemoryUpstream(self.reactor)
        self.assertEqual(len(self.core.tunnels), 1)
        self.assertEqual(self.live.watched, [])


class WebsocketSessionEndTests(SynchronousTestCase):
    def test_the_session_ending_closes_the_websocket_at_once(self) -> None:
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(load(base_config(policy=WS_ROUTES,
                                                              **IDENTITY))),
                         tls=False, authorizer=SwitchableAuthorizer())
        live = RecordingWatch()
        core.live = live
        client = StringTransport(peerAddress=CLIENT)
        conn = Http1Connection(core)
        conn.makeConnection(client)
        conn.dataReceived(b"GET /socket HTTP/1.1\r\nHost: chat.example.com\r\n"
                          b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        upstream = MemoryUpstream(reactor)
        upstream.respond(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\n\r\nhello")
        self.assertEqual(len(live.watched), 1)
        live.watched[0][1]("your session has ended (signed out or revoked)")
        self.assertTrue(client.disconnected)
        self.assertEqual(core.tunnels, set())
