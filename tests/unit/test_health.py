"""Active health checks without sockets: the checker's threshold state machine on a
``Clock`` with a fake probe, the manager across plans, the sans-io probe sessions, and
``run_probe``'s deadline on a memory reactor."""

from __future__ import annotations

import struct
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, StreamEnded
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransportWithDisconnection
from twisted.logger import LogEvent, LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.upstreams import HealthCheck, Upstream
from gateway.dataplane.health.manager import GRACE, HealthChecker, HealthManager
from gateway.dataplane.health.probes import (
    GrpcHealthSession,
    HttpStatusSession,
    TcpPayloadSession,
    encode_varint,
    grpc_frame,
    health_request,
    http_request,
    probe_http,
    serving_status,
)
from gateway.dataplane.routing.plan import Plan, build_plan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.tls.client import TLSClientConfig
from tests.unit.config.helpers import base_config, load


def make_host(port: int = 8080, scheme: str = "http") -> UpstreamHost:
    url = f"{scheme}://10.0.0.1:{port}"
    return UpstreamHost(Upstream(url, scheme, "10.0.0.1", port, "", None))


class FakeProbe:
    """A probe with scripted results: ``True``/``False``, an exception, or ``None``
    (a Deferred that never fires). Records every call."""

    def __init__(self, *results: object) -> None:
        self.results = list(results)
        self.calls: list[tuple[Any, UpstreamHost, HealthCheck, TLSClientConfig | None]] = []
        self.hanging: list[Deferred[bool]] = []

    def __call__(self, reactor: Any, host: UpstreamHost, check: HealthCheck,
                 tls: TLSClientConfig | None) -> Deferred[bool]:
        self.calls.append((reactor, host, check, tls))
        result = self.results.pop(0) if self.results else True
        if isinstance(result, BaseException):
            raise result
        if result is None:
            d: Deferred[bool] = Deferred()
            self.hanging.append(d)
            return d
        if result == "fail":
            return fail(ConnectionError("probe blew up"))
        return succeed(bool(result))


def state_events(events: list[LogEvent]) -> list[LogEvent]:
    return [e for e in events if "state" in e and "kind" in e]


class CheckerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.host = make_host()

    def checker(self, probe: FakeProbe, **check: Any) -> HealthChecker:
        settings = {"kind": "http", "interval": 10.0, "timeout": 2.0, **check}
        return HealthChecker(self.clock, self.host, HealthCheck(**settings), route="app",
                             probe=probe)

    def run_probes(self, checker: HealthChecker, count: int) -> list[bool]:
        """Start, then advance one interval at a time; host.healthy after each probe."""
        seen = []
        checker.start()
        seen.append(self.host.healthy)
        for _ in range(count - 1):
            self.clock.advance(checker.check.interval)
            seen.append(self.host.healthy)
        return seen

    def test_first_probe_runs_at_start_then_every_interval(self) -> None:
        probe = FakeProbe()
        checker = self.checker(probe, interval=5.0)
        checker.start()
        self.assertEqual(len(probe.calls), 1)
        self.assertIs(probe.calls[0][0], self.clock)
        self.clock.advance(4.9)
        self.assertEqual(len(probe.calls), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(probe.calls), 2)
        checker.stop()
        self.clock.advance(50)
        self.assertEqual(len(probe.calls), 2)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_unhealthy_after_threshold_failures_in_a_row(self) -> None:
        probe = FakeProbe(False, True, False, False, False)
        seen = self.run_probes(self.checker(probe, unhealthy_threshold=2), 5)
        # a success in between resets the count
        self.assertEqual(seen, [True, True, True, False, False])

    def test_healthy_again_after_threshold_successes(self) -> None:
        probe = FakeProbe(False, True, True, False, True, True, True)
        seen = self.run_probes(
            self.checker(probe, unhealthy_threshold=1, healthy_threshold=3), 7
        )
        self.assertEqual(seen, [False, False, False, False, False, False, True])

    def test_state_changes_are_logged_once_each(self) -> None:
        probe = FakeProbe(False, False, False, True, True)
        with capturedLogs() as events:
            self.run_probes(self.checker(probe, unhealthy_threshold=1), 5)
        changes = state_events(list(events))
        self.assertEqual([e["state"] for e in changes], ["unhealthy", "healthy"])
        first = changes[0]
        self.assertEqual((first["host"], first["route"], first["kind"]),
                         ("10.0.0.1:8080", "app", "http"))
        self.assertEqual(first["log_level"], LogLevel.warn)
        self.assertEqual(changes[1]["log_level"], LogLevel.info)

    def test_exceptions_count_as_failures_and_the_loop_goes_on(self) -> None:
        probe = FakeProbe(RuntimeError("sync boom"), "fail", True, True)
        checker = self.checker(probe, unhealthy_threshold=2)
        seen = self.run_probes(checker, 4)
        self.assertEqual(seen, [True, False, True, True])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.assertEqual(len(self.flushLoggedErrors(ConnectionError)), 1)
        self.assertTrue(checker.running)
        self.assertEqual(len(probe.calls), 4)

    def test_a_probe_that_never_answers_times_out_as_a_failure(self) -> None:
        probe = FakeProbe(None, True)
        checker = self.checker(probe, unhealthy_threshold=1, interval=10.0, timeout=2.0)
        checker.start()
        self.clock.advance(2.0 + GRACE)
        self.assertFalse(self.host.healthy)
        self.assertTrue(probe.hanging[0].called)  # cancelled by the deadline
        self.flushLoggedErrors()
        self.clock.advance(10.0)
        self.assertEqual(len(probe.calls), 2)

    def test_stop_cancels_the_probe_in_flight_and_ignores_it(self) -> None:
        probe = FakeProbe(None)
        checker = self.checker(probe, unhealthy_threshold=1)
        checker.start()
        checker.stop()
        self.assertTrue(probe.hanging[0].called)
        self.assertTrue(self.host.healthy)
        self.assertFalse(checker.running)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.flushLoggedErrors(), [])


def plan_for(*routes: dict[str, Any], previous: Plan | None = None) -> Plan:
    return build_plan(load(base_config(policy=list(routes))), previous)


def route(host: str, to: Any, checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"from": f"https://{host}", "to": to,
                           "allow_public_unauthenticated_access": True}
    if checks is not None:
        out["health_checks"] = checks
    return out


HTTP_CHECK = {"interval": "5s", "unhealthy_threshold": 1, "http_health_check": {"path": "/hz"}}
TCP_CHECK = {"interval": "5s", "unhealthy_threshold": 1, "tcp_health_check": {}}


class ManagerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.probe = FakeProbe()
        self.manager = HealthManager(self.clock, probe=self.probe)

    def keys(self) -> set[tuple[str, str]]:
        return {(c.host.address, c.check.kind) for c in self.manager.checkers}

    def test_one_checker_per_host_and_check_of_checked_routes(self) -> None:
        plan = plan_for(
            route("a.example.com", ["http://10.0.0.1:80", "http://10.0.0.2:80"],
                  [HTTP_CHECK, TCP_CHECK]),
            route("b.example.com", "http://10.0.0.3:80"),
        )
        self.manager.update(plan)
        self.assertEqual(self.keys(), {("10.0.0.1:80", "http"), ("10.0.0.2:80", "http"),
                                       ("10.0.0.1:80", "tcp"), ("10.0.0.2:80", "tcp")})
        self.assertTrue(all(c.running for c in self.manager.checkers))
        self.assertEqual(len(self.probe.calls), 4)  # each probed at once
        self.assertEqual({c.route for c in self.manager.checkers}, {"0"})

    def test_reload_keeps_unchanged_hosts_and_stops_removed_ones(self) -> None:
        first = plan_for(
            route("a.example.com", ["http://10.0.0.1:80", "http://10.0.0.2:80"], [HTTP_CHECK]),
            route("c.example.com", "http://10.0.0.4:80", [HTTP_CHECK]),
        )
        self.manager.update(first)
        kept = {c.host.address: c for c in self.manager.checkers}
        second = plan_for(
            route("a.example.com", ["http://10.0.0.1:80", "http://10.0.0.2:80"], [HTTP_CHECK]),
            route("b.example.com", "http://10.0.0.3:80", [TCP_CHECK]),
            previous=first,
        )
        self.manager.update(second)
        now = {c.host.address: c for c in self.manager.checkers}
        self.assertEqual(set(now), {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"})
        self.assertIs(now["10.0.0.1:80"], kept["10.0.0.1:80"])  # same host object, same checker
        self.assertIs(now["10.0.0.2:80"], kept["10.0.0.2:80"])
        self.assertFalse(kept["10.0.0.4:80"].running)
        self.assertEqual(now["10.0.0.3:80"].check.kind, "tcp")
        self.manager.stop()
        self.assertEqual(self.manager.checkers, ())
        self.assertFalse(any(c.running for c in now.values()))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_changed_upstreams_get_fresh_hosts_and_checkers(self) -> None:
        first = plan_for(route("a.example.com", "http://10.0.0.1:80", [HTTP_CHECK]))
        self.manager.update(first)
        (old,) = self.manager.checkers
        second = plan_for(route("a.example.com", ["http://10.0.0.1:80", "http://10.0.0.9:80"],
                                [HTTP_CHECK]), previous=first)
        self.manager.update(second)
        self.assertFalse(old.running)
        self.assertEqual(self.keys(), {("10.0.0.1:80", "http"), ("10.0.0.9:80", "http")})
        self.assertTrue(all(c.host in second.routes[0].hosts for c in self.manager.checkers))

    def test_a_host_is_healthy_only_when_every_check_passes(self) -> None:
        self.probe.results = [True, False]  # http passes, tcp fails
        plan = plan_for(route("a.example.com", "http://10.0.0.1:80", [HTTP_CHECK, TCP_CHECK]))
        self.manager.update(plan)
        host = plan.routes[0].hosts[0]
        self.assertFalse(host.healthy)
        self.probe.results = [True, True]
        self.clock.advance(5.0)
        self.assertTrue(host.healthy)

    def test_removing_the_checks_makes_the_host_healthy_again(self) -> None:
        self.probe.results = [False]
        first = plan_for(route("a.example.com", "http://10.0.0.1:80", [HTTP_CHECK]))
        self.manager.update(first)
        host = first.routes[0].hosts[0]
        self.assertFalse(host.healthy)
        second = plan_for(route("a.example.com", "http://10.0.0.1:80"), previous=first)
        self.assertIs(second.routes[0].hosts[0], host)
        self.manager.update(second)
        self.assertEqual(self.manager.checkers, ())
        self.assertTrue(host.healthy)

    def test_route_tls_settings_are_passed_to_the_probe(self) -> None:
        plan = plan_for(route("a.example.com", "https://10.0.0.1:443", [HTTP_CHECK]))
        self.manager.update(plan)
        self.assertEqual(self.probe.calls[0][3], plan.routes[0].tls)
        self.assertIsNotNone(plan.routes[0].tls)


class HttpSessionTests(SynchronousTestCase):
    def test_request(self) -> None:
        check = HealthCheck("http", path="/healthz?x=1")
        self.assertEqual(
            http_request(make_host(8080), check),
            b"GET /healthz?x=1 HTTP/1.1\r\nHost: 10.0.0.1:8080\r\nUser-Agent: "
            b"gateway-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        )
        default_port = http_request(make_host(443, "https"), check)
        self.assertIn(b"\r\nHost: 10.0.0.1\r\n", default_port)
        named = http_request(make_host(), HealthCheck("http", host="svc.internal"))
        self.assertIn(b"\r\nHost: svc.internal\r\n", named)
        with self.assertRaises(ValueError):
            http_request(make_host(), HealthCheck("http", path="/a b"))

    def test_status_ranges(self) -> None:
        ranges = ((200, 300), (404, 405))
        for status, expected in ((200, True), (299, True), (300, False), (404, True),
                                 (503, False)):
            session = HttpStatusSession(b"", ranges)
            session.feed(b"HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n" % status)
            self.assertEqual(session.verdict, expected, status)

    def test_split_head_and_informational_responses(self) -> None:
        session = HttpStatusSession(b"", ((200, 201),))
        session.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2")
        self.assertIsNone(session.verdict)
        session.feed(b"00 OK\r\nContent-Length: 5\r\n\r\n")
        self.assertIs(session.verdict, True)

    def test_garbage_is_a_failure(self) -> None:
        session = HttpStatusSession(b"", ((200, 201),))
        session.feed(b"SSH-2.0-OpenSSH_9.2\r\n")
        self.assertIs(session.verdict, False)


class TcpSessionTests(SynchronousTestCase):
    def test_connect_only(self) -> None:
        session = TcpPayloadSession(b"", ())
        self.assertEqual(session.start(), b"")
        self.assertIs(session.verdict, True)

    def test_blocks_in_order_across_reads(self) -> None:
        session = TcpPayloadSession(b"PING\r\n", (b"+PO", b"NG"))
        self.assertEqual(session.start(), b"PING\r\n")
        session.feed(b"+P")
        self.assertIsNone(session.verdict)
        session.feed(b"ON")
        self.assertIsNone(session.verdict)
        session.feed(b"G\r\n")
        self.assertIs(session.verdict, True)

    def test_blocks_out_of_order_never_match(self) -> None:
        session = TcpPayloadSession(b"", (b"world", b"hello"))
        session.feed(b"hello world")
        self.assertIsNone(session.verdict)  # decided False when the peer closes or at timeout

    def test_too_much_data_without_a_match_fails(self) -> None:
        session = TcpPayloadSession(b"", (b"never",))
        session.feed(b"x" * 70_000)
        self.assertIs(session.verdict, False)


def grpc_server(session: GrpcHealthSession, status: int | None, grpc_status: bytes = b"0",
                http_status: bytes = b"200") -> tuple[bytes, bytes]:
    """Serve the session's request on an in-memory h2 server; (request message, reply)."""
    server = H2Connection(H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    body = b""
    request_headers: dict[bytes, bytes] = {}
    for event in server.receive_data(session.start()):
        if isinstance(event, RequestReceived):
            request_headers = dict(event.headers or [])
        elif isinstance(event, DataReceived):
            body += event.data or b""
        elif isinstance(event, StreamEnded):
            head = [(b":status", http_status), (b"content-type", b"application/grpc")]
            server.send_headers(1, head)
            if status is not None:
                message = b"\x08" + encode_varint(status)
                server.send_data(1, grpc_frame(message))
            server.send_headers(1, [(b"grpc-status", grpc_status)], end_stream=True)
    assert request_headers[b":path"] == b"/grpc.health.v1.Health/Check"
    assert request_headers[b"te"] == b"trailers"
    return body, server.data_to_send()


class GrpcTests(SynchronousTestCase):
    def session(self, service: str = "") -> GrpcHealthSession:
        return GrpcHealthSession(b"http", b"10.0.0.1:50051", service)

    def test_request_message_encoding(self) -> None:
        self.assertEqual(health_request(""), b"")
        self.assertEqual(health_request("api"), b"\x0a\x03api")
        self.assertEqual(health_request("x" * 200)[:3], b"\x0a\xc8\x01")
        session = self.session("api")
        body, _ = grpc_server(session, 1)
        self.assertEqual(body, b"\x00" + struct.pack(">I", 5) + b"\x0a\x03api")

    def test_serving(self) -> None:
        session = self.session("api")
        _, reply = grpc_server(session, 1)
        session.feed(reply)
        self.assertIs(session.verdict, True)

    def test_not_serving_unknown_and_errors(self) -> None:
        for status, grpc_status, http_status in ((2, b"0", b"200"), (None, b"0", b"200"),
                                                 (1, b"5", b"200"), (1, b"0", b"503")):
            session = self.session()
            _, reply = grpc_server(session, status, grpc_status, http_status)
            session.feed(reply)
            self.assertIs(session.verdict, False, (status, grpc_status, http_status))

    def test_not_http2_is_a_failure(self) -> None:
        session = self.session()
        session.start()
        session.feed(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        self.assertIs(session.verdict, False)

    def test_serving_status_skips_unknown_fields(self) -> None:
        message = b"\x12\x02hi" + b"\x19" + b"\x00" * 8 + b"\x08\x01"
        self.assertEqual(serving_status(message), 1)
        self.assertEqual(serving_status(b""), 0)
        with self.assertRaises(ValueError):
            serving_status(b"\x08")


class RunProbeTests(SynchronousTestCase):
    """The connection side of a probe on a memory reactor: the deadline really aborts."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.host = UpstreamHost(Upstream("http://127.0.0.1:8080", "http", "127.0.0.1", 8080,
                                          "", None))
        self.check = HealthCheck("http", timeout=3.0, path="/hz")

    def connect(self) -> tuple[Any, StringTransportWithDisconnection]:
        host, port, factory, timeout, _ = self.reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("127.0.0.1", 8080, 3.0))
        protocol: Any = factory.buildProtocol(None)
        transport = StringTransportWithDisconnection()
        transport.protocol = protocol
        protocol.makeConnection(transport)
        return protocol, transport

    def test_answer_closes_and_fires_the_verdict(self) -> None:
        result = probe_http(self.reactor, self.host, self.check, None)
        protocol, transport = self.connect()
        self.assertTrue(transport.value().startswith(b"GET /hz HTTP/1.1\r\n"))
        self.assertNoResult(result)
        protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        self.assertIs(self.successResultOf(result), True)
        self.assertFalse(transport.connected)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_deadline_aborts_a_silent_connection(self) -> None:
        result = probe_http(self.reactor, self.host, self.check, None)
        _, transport = self.connect()
        self.reactor.advance(2.9)
        self.assertNoResult(result)
        self.reactor.advance(0.1)
        self.assertIs(self.successResultOf(result), False)
        self.assertTrue(transport.disconnected)  # abortConnection, not a polite close

    def test_deadline_cancels_the_connection_attempt(self) -> None:
        result = probe_http(self.reactor, self.host, self.check, None)
        self.reactor.advance(3.0)
        self.assertIs(self.successResultOf(result), False)
        self.assertTrue(self.reactor.connectors[0].stoppedConnecting)

    def test_peer_closing_before_an_answer_is_a_failure(self) -> None:
        result = probe_http(self.reactor, self.host, self.check, None)
        _, transport = self.connect()
        transport.loseConnection()
        self.assertIs(self.successResultOf(result), False)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_cancelling_aborts(self) -> None:
        result = probe_http(self.reactor, self.host, self.check, None)
        _, transport = self.connect()
        result.cancel()
        self.assertTrue(result.called)  # False here (the abort is synchronous), else cancelled
        result.addErrback(lambda f: f.trap(CancelledError))
        self.assertFalse(transport.connected)
        self.assertEqual(self.reactor.getDelayedCalls(), [])
