"""One exchange driven on its own: a fake sink for the client's side, a memory peer for
the upstream, and the stages it passes through (``gateway.dataplane.exchange.stage``).

No codec is involved: the test fills in the request as a codec would, calls ``begin``,
answers as the upstream and checks what the sink was handed and where the exchange is.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange import stage as stages
from gateway.dataplane.exchange.base import ExchangeBase
from gateway.dataplane.exchange.exchange import Exchange
from gateway.dataplane.exchange.head import ConnectionFacts, RequestHead
from gateway.dataplane.exchange.head import request_head as make_head
from gateway.dataplane.exchange.stage import (
    AUTHORIZING,
    CONNECTING,
    DONE,
    HEAD,
    NEXT,
    READY,
    RESPONDING,
    ROUTING,
    TUNNEL,
    WAITING,
    Stage,
)
from gateway.dataplane.exchange.tunnel import Tunnel
from gateway.dataplane.routing.plan import build_plan
from tests.support import stage_check
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import IDENTITY, SECRET, base_config, load

ROUTES = [
    {"from": "https://app.example.com", "to": "http://127.0.0.1:9000/",
     "allow_public_unauthenticated_access": True, "timeout": "5s"},
    {"from": "https://private.example.com", "to": "http://127.0.0.1:9001/"},
    {"from": "tcp+https://db.example.com:5432", "to": "tcp://127.0.0.1:9002",
     "allow_public_unauthenticated_access": True},
]
SNAPSHOT = load(base_config(policy=ROUTES, shared_secret=SECRET, cookie_secret=SECRET, **IDENTITY))


FACTS = ConnectionFacts("192.0.2.7")  # a plain connection: no TLS facts


def request_head(host: str, path: str, method: bytes = b"GET") -> RequestHead:
    """A whole request's head as a codec hands it over (a CONNECT's path is empty)."""
    connect = method == b"CONNECT"
    return make_head(method, host.encode() if connect else path.encode(), b"1.1",
                     [(b"host", host.encode())], host, path, complete=True,
                     connect=connect, request_id=b"")


class RecordingSink:
    """The client's side: what a codec would have written, and its pauses."""

    def __init__(self) -> None:
        self.heads: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        self.body = b""
        self.ended = False
        self.aborted = False
        self.done: list[ExchangeBase] = []
        self.pauses: set[str] = set()
        self.connects: list[Tunnel] = []

    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   framing: int, close: bool, first_body: bytes = b"") -> None:
        self.heads.append((status, headers))
        self.body += first_body

    def write_body(self, data: bytes) -> None:
        self.body += data

    def end_body(self) -> None:
        self.ended = True

    def flush(self) -> None:
        pass

    def exchange_done(self, exchange: ExchangeBase) -> None:
        self.done.append(exchange)

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self, reason: str) -> None:
        self.pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        self.pauses.discard(reason)

    def send_continue(self) -> None:
        pass

    def start_response_flow(self, producer: Any) -> None:
        pass

    def stop_response_flow(self) -> None:
        pass

    def start_connect(self, tunnel: Tunnel, upstream: Any) -> None:
        self.connects.append(tunnel)


class LaterAuthorizer:
    """Decides every request later: ``decide`` fires the pending decision."""

    def __init__(self) -> None:
        self.pending: list[Deferred[Allow | Reply]] = []

    def authorize(self, request: RequestInfo, route: Route) -> Deferred[Allow | Reply]:
        decision: Deferred[Allow | Reply] = Deferred()
        self.pending.append(decision)
        return decision

    def handles(self, host: str, path: str) -> bool:
        return False

    def internal(self, request: RequestInfo, body: bytes = b"") -> None:
        return None

    def sign_in(self, request: RequestInfo) -> Reply:
        return Reply(401, b"", ())

    def decide(self, decision: Allow | Reply) -> None:
        self.pending.pop(0).callback(decision)


class ExchangeStageTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.authorizer = LaterAuthorizer()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=True,
                              authorizer=self.authorizer)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.sink = RecordingSink()

    def exchange(self, host: str = "app.example.com", path: str = "/x",
                 method: bytes = b"GET") -> Exchange:
        """A request as a codec leaves it: its head read, complete."""
        exchange = Exchange(self.sink, self.core, FACTS, request_head(host, path, method))
        self.assertIs(exchange.stage, HEAD)
        exchange.head_complete()
        self.assertIs(exchange.stage, READY)
        self.assertTrue(exchange.ready)
        return exchange

    def test_a_request_passes_every_stage_of_a_relay(self) -> None:
        exchange = self.exchange()
        exchange.begin()
        self.assertIs(exchange.stage, CONNECTING)
        upstream = MemoryUpstream(self.reactor)
        self.assertIs(exchange.stage, WAITING)
        self.assertTrue(upstream.received().startswith(b"GET /x HTTP/1.1\r\n"))
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi")
        self.assertIs(exchange.stage, DONE)
        self.assertTrue(exchange.finished)
        self.assertEqual([status for status, _ in self.sink.heads], [200])
        self.assertEqual((self.sink.body, self.sink.ended, self.sink.done),
                         (b"hi", True, [exchange]))

    def test_a_head_begun_at_once_skips_ready(self) -> None:
        """A codec begins a request that need not wait straight from HEAD (READY is for
        one that waits its turn); it is ready all the same."""
        exchange = Exchange(self.sink, self.core, FACTS, request_head("app.example.com", "/x"))
        self.assertFalse(exchange.ready)
        exchange.begin()
        self.assertIs(exchange.stage, CONNECTING)
        self.assertTrue(exchange.ready)

    def test_the_request_id_is_chosen_with_the_head(self) -> None:
        """The client's X-Request-Id when valid, else a new one, from the moment the
        exchange has its head (the upstream head, the response and the log share it)."""
        def made(request_id: bytes | None) -> bytes:
            head = request_head("app.example.com", "/x")
            head.request_id = request_id
            return Exchange(self.sink, self.core, FACTS, head).rid

        self.assertEqual(made(b"abc-1"), b"abc-1")
        self.assertRegex(made(b"not valid"), rb"^[0-9a-f]{32}$")
        self.assertRegex(made(b""), rb"^[0-9a-f]{32}$")
        self.assertEqual(made(None), b"")  # a head refused before it was read: on first use
        exchange = Exchange(self.sink, self.core, FACTS)
        self.assertEqual(exchange.rid, b"")
        head = request_head("app.example.com", "/x")
        head.request_id = b"abc-2"
        exchange.head_read(head)
        self.assertEqual(exchange.rid, b"abc-2")

    def test_a_response_head_is_the_responding_stage(self) -> None:
        exchange = self.exchange()
        exchange.begin()
        upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nha")
        self.assertIs(exchange.stage, RESPONDING)
        self.assertTrue(exchange.response_started)
        self.assertFalse(exchange.finished)
        upstream.respond(b"lf")
        self.assertIs(exchange.stage, DONE)
        self.assertEqual(self.sink.body, b"half")

    def test_an_answer_of_the_gateways_own_skips_the_upstream(self) -> None:
        exchange = self.exchange(path="/ping")
        exchange.begin()
        self.assertIs(exchange.stage, DONE)
        self.assertEqual(self.reactor.tcpClients, [])
        self.assertEqual(([s for s, _ in self.sink.heads], self.sink.body), ([200], b"OK\n"))

    def test_no_route_is_answered_while_routing(self) -> None:
        exchange = self.exchange(host="nowhere.example.com")
        exchange.begin()
        self.assertIs(exchange.stage, DONE)
        self.assertEqual([status for status, _ in self.sink.heads], [404])

    def test_the_client_leaving_while_waiting_ends_it_without_a_word(self) -> None:
        exchange = self.exchange()
        exchange.begin()
        upstream = MemoryUpstream(self.reactor)
        exchange.downstream_lost()
        self.assertIs(exchange.stage, DONE)
        self.assertTrue(upstream.transport.disconnecting)
        self.assertEqual(self.sink.heads, [])
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")  # too late
        self.assertEqual(self.sink.heads, [])

    def test_the_route_timeout_while_waiting_is_a_504(self) -> None:
        exchange = self.exchange()
        exchange.begin()
        MemoryUpstream(self.reactor)
        self.reactor.advance(5.5)  # the route's 5 s, then the watchdog's next look
        exchange.timed_out()
        self.assertIs(exchange.stage, DONE)
        self.assertEqual([status for status, _ in self.sink.heads], [504])

    def test_a_failed_connect_is_answered_from_the_connecting_stage(self) -> None:
        from twisted.internet.error import ConnectionRefusedError

        exchange = self.exchange()
        exchange.begin()
        _, _, factory, _, _ = self.reactor.tcpClients[-1]
        factory.clientConnectionFailed(None, ConnectionRefusedError())
        self.assertIs(exchange.stage, DONE)
        self.assertEqual([status for status, _ in self.sink.heads], [503])

    def test_an_unrequested_switch_is_refused(self) -> None:
        exchange = self.exchange()
        exchange.begin()
        MemoryUpstream(self.reactor).respond(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
            b"connection: upgrade\r\n\r\n")
        self.assertIs(exchange.stage, DONE)
        self.assertEqual([status for status, _ in self.sink.heads], [502])

    def test_a_decision_that_comes_later_is_the_authorizing_stage(self) -> None:
        exchange = self.exchange(host="private.example.com")
        exchange.begin()
        self.assertIs(exchange.stage, AUTHORIZING)
        self.assertIn("authorize", self.sink.pauses)
        self.authorizer.decide(Allow(reason="test"))
        self.assertIs(exchange.stage, CONNECTING)
        self.assertNotIn("authorize", self.sink.pauses)

    def test_a_denial_that_comes_later_is_answered(self) -> None:
        exchange = self.exchange(host="private.example.com")
        exchange.begin()
        self.authorizer.decide(Reply(403, b"no", (), reason="test"))
        self.assertIs(exchange.stage, DONE)
        self.assertEqual(([s for s, _ in self.sink.heads], self.sink.body), ([403], b"no"))
        self.assertEqual(self.reactor.tcpClients, [])

    def test_a_client_gone_before_its_decision_gets_nothing(self) -> None:
        exchange = self.exchange(host="private.example.com")
        exchange.begin()
        exchange.downstream_lost()
        self.authorizer.decide(Allow(reason="test"))
        self.assertIs(exchange.stage, DONE)
        self.assertEqual((self.sink.heads, self.reactor.tcpClients), ([], []))

    def test_a_connect_becomes_a_tunnel_through_its_tunnel_sink(self) -> None:
        exchange = self.exchange(host="db.example.com:5432", path="", method=b"CONNECT")
        exchange.begin()
        self.assertIs(exchange.stage, CONNECTING)
        _, _, factory, _, _ = self.reactor.tcpClients[-1]
        from twisted.internet.address import IPv4Address
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 9002))
        protocol.makeConnection(StringTransport())
        self.assertIs(exchange.stage, TUNNEL)
        self.assertTrue(exchange.finished)
        self.assertEqual(len(self.sink.connects), 1)
        self.assertIs(self.sink.connects[0].exchange, exchange)
        self.assertEqual(self.sink.heads, [])  # the tunnel sink answers the 200 itself


class StageTableTests(SynchronousTestCase):
    def test_every_stage_before_a_response_may_answer_or_end(self) -> None:
        for before in (HEAD, READY, ROUTING, AUTHORIZING, CONNECTING, WAITING):
            self.assertIn(RESPONDING, NEXT[before], before.name)
            self.assertIn(DONE, NEXT[before], before.name)

    def test_tunnel_and_done_are_final(self) -> None:
        self.assertEqual((NEXT[TUNNEL], NEXT[DONE]), (frozenset(), frozenset()))
        self.assertEqual([s for s in Stage if s >= stages.FINAL], [TUNNEL, DONE])

    def test_every_stage_is_reachable_from_the_head(self) -> None:
        seen, todo = {HEAD}, [HEAD]
        while todo:
            for following in NEXT[todo.pop()]:
                if following not in seen:
                    seen.add(following)
                    todo.append(following)
        self.assertEqual(seen, set(Stage))

    def test_a_move_the_table_does_not_list_fails_the_test(self) -> None:
        """The suite's check (``tests/support/stage_check.py``, installed for every
        test by ``conftest``) refuses a move ``NEXT`` does not list and reports it,
        whether ``enter`` makes it or the data plane writes ``stage`` itself."""
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=True)
        exchange = Exchange(RecordingSink(), core, FACTS)
        with self.assertRaises(stage_check.IllegalMove):
            exchange.enter(WAITING)
        with self.assertRaises(stage_check.IllegalMove):
            exchange.stage = TUNNEL
        self.assertEqual(stage_check.take(), [("HEAD", "WAITING"), ("HEAD", "TUNNEL")])
        self.assertIs(exchange.stage, HEAD)
        exchange.enter(DONE)
        with self.assertRaises(stage_check.IllegalMove):
            exchange.enter(RESPONDING)
        self.assertEqual(stage_check.take(), [("DONE", "RESPONDING")])

    def test_only_enter_may_end_an_exchange(self) -> None:
        """A move to DONE or TUNNEL written outside ``enter`` would leave ``finished``
        false on an exchange that is over: the check refuses it."""
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=True)
        exchange = Exchange(RecordingSink(), core, FACTS, request_head("app.example.com", "/"))
        exchange.enter(READY)
        with self.assertRaises(stage_check.IllegalMove):
            exchange.stage = DONE
        self.assertEqual(stage_check.take(), [("READY", "DONE")])
        self.assertFalse(exchange.finished)
        exchange.enter(DONE)
        self.assertTrue(exchange.finished)
        self.assertEqual(stage_check.take(), [])

    def test_a_move_is_made_by_the_method_named_for_it(self) -> None:
        """The four moves of every relayed request are plain writes (free in
        production); the check holds each to the exchange method ``stage.MOVED_BY``
        names: a write of the same move anywhere else fails."""
        reactor = MemoryReactorClock()
        core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=True)
        exchange = Exchange(RecordingSink(), core, FACTS, request_head("app.example.com", "/"))
        with self.assertRaises(stage_check.IllegalMove) as raised:
            exchange.stage = ROUTING  # a legal move, but not made by ``begin``
        self.assertIn("stage.MOVED_BY", str(raised.exception))
        self.assertEqual(stage_check.take(), [("HEAD", "ROUTING")])
        exchange.enter(READY)  # ``enter`` makes READY
        self.assertEqual((exchange.stage, stage_check.take()), (READY, []))

    def test_every_stage_names_who_moves_to_it(self) -> None:
        self.assertEqual(set(stages.MOVED_BY), set(Stage))
        for stage in (READY, AUTHORIZING, TUNNEL, DONE):
            self.assertIn("enter", stages.MOVED_BY[stage], stage.name)
