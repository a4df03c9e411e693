"""An MCP route's request through one exchange (``dataplane/exchange/mcp_request.py``),
decided by the real HTTP entrance (``authorize.http_requests.Decider``) for a cookie
session, with a recording sink for the client and a memory peer for the upstream: what
reaches the upstream (the body exactly as read, or nothing), what the client is
answered, and the verdicts the exchange keeps for the response side."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import MemoryReactorClock

from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.exchange import Exchange
from gateway.dataplane.exchange.head import BODY_CHUNKED, BODY_LENGTH, BODY_NONE, ConnectionFacts
from gateway.dataplane.exchange.head import request_head as make_head
from gateway.dataplane.exchange.stage import AUTHORIZING, DONE, WAITING
from gateway.dataplane.routing.plan import build_plan
from gateway.mcp.errors import HEADER_MISMATCH, PARSE_ERROR, REFUSED
from gateway.rpc.authorize_wire import (
    decision_from_pb,
    decision_to_pb,
    request_from_pb,
    request_to_pb,
)
from gateway.rpc.protos import authorize_pb2 as pb
from tests.support.memory_upstream import MemoryUpstream

from .test_exchange_stages import FACTS, RecordingSink
from .test_identity import ALICE, BOB, JSON, IdentityCase, snapshot

HOST = "mcp.test"
POLICY = [
    {"allow": {"and": [{"email": {"is": "alice@example.com"}},
                       {"mcp_tool": {"in": ["get_ticket", "search_tickets"]}}]}},
    {"allow": {"and": [{"email": {"is": "bob@example.com"}}, {"http_method": "PUT"}]}},
    {"allow": {"and": [{"email": {"is": "carol@example.com"}},
                       {"mcp_method": {"in": ["tools/call"]}}]}},
]
CAROL = {"sub": "carol-id", "email": "carol@example.com"}
ROUTES = [
    {"from": f"https://{HOST}", "to": "http://127.0.0.1:9", "mcp": {"max_request_bytes": 4096},
     "policy": POLICY, "timeout": "10s"},
    {"from": "https://plain.test", "to": "http://127.0.0.1:9", "timeout": "10s",
     "allow_any_authenticated_user": True},
]


def call(name: str, id_: object = 1, **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"name": name, "arguments": {"q": "x"}, **extra}}


class Authorizer:
    """The identity layer's decider as the data plane asks it."""

    def __init__(self, case: IdentityCase) -> None:
        self.case = case

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        return self.case.identity.decider.authorize(request, route)

    def sign_in(self, request: RequestInfo) -> Decision:
        return self.case.identity.sign_in(request)


class Sink(RecordingSink):
    """The recording sink, counting the 100 Continues it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.continued = 0

    def send_continue(self) -> None:
        self.continued += 1


class WireAuthorizer(Authorizer):
    """The decider behind a split deployment's wire: the request and the decision each
    through their protobuf messages (``rpc/authorize_wire.py``), as the authorize
    service and the proxy exchange them."""

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        sent = pb.CheckRequest.FromString(request_to_pb(request, "_gateway", "k")
                                          .SerializeToString())
        decision = self.case.identity.decider.authorize(request_from_pb(sent), route)
        assert not isinstance(decision, Deferred)
        back = pb.CheckResponse.FromString(decision_to_pb(decision, "k").SerializeToString())
        answer = decision_from_pb(back, request.mcp)
        assert answer is not None
        return answer


class LaterAdmission(Authorizer):
    """Holds its first answer (the admission) until ``release``."""

    def __init__(self, case: IdentityCase, every: bool = False) -> None:
        super().__init__(case)
        self.every = every  # hold the decision on the messages too
        self.held: list[tuple[Deferred[Decision], Decision]] = []

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        decision = super().authorize(request, route)
        if not self.every and (self.held or request.mcp is None or request.mcp.calls):
            return decision
        assert not isinstance(decision, Deferred)
        later: Deferred[Decision] = Deferred()
        self.held.append((later, decision))
        return later

    def release(self) -> None:
        later, decision = self.held.pop(0)
        later.callback(decision)


class FiredAdmission(Authorizer):
    """Answers the admission through a Deferred that has fired already."""

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        decision = super().authorize(request, route)
        if request.mcp is not None and not request.mcp.calls:
            assert not isinstance(decision, Deferred)
            return succeed(decision)
        return decision


class McpExchangeTests(IdentityCase):
    def setUp(self) -> None:
        super().setUp()
        self.snapshot = snapshot(policy=ROUTES, timeout_idle="60s")
        self.rebuild()

    def rebuild(self, authorizer: Any = None) -> None:
        from gateway.authenticate.identity import Identity

        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.reactor = MemoryReactorClock()
        self.reactor.advance(self.clock.now)
        self.core = ProxyCore(self.reactor, build_plan(self.snapshot), tls=True,
                              authorizer=authorizer or Authorizer(self))
        self.sink = Sink()

    def send(self, body: bytes | None, *, method: bytes = b"POST", headers: list[Any] | None = None,
             who: dict[str, Any] | None = ALICE, host: str = HOST, pieces: int = 1,
             length: bool = True) -> Exchange:
        """A request to the MCP route as a codec hands it over: the head, then the body
        in ``pieces``."""
        all_headers = [(b"host", host.encode()), JSON, *(headers or [])]
        if who is not None:
            all_headers.append(self.cookie(self.session(who)))
        framing = BODY_NONE
        if body is not None:
            framing = BODY_LENGTH if length else BODY_CHUNKED
            if length:
                all_headers.append((b"content-length", b"%d" % len(body)))
        expect = any(n.lower() == b"expect" for n, _ in all_headers)
        head = make_head(method, b"/mcp", b"1.1", all_headers, host, "/mcp", framing=framing,
                         complete=not body, expect_continue=expect, request_id=b"")
        exchange = Exchange(self.sink, self.core, FACTS, head)
        exchange.begin()
        if body:
            size = -(-len(body) // pieces)
            for start in range(0, len(body), size):
                if exchange.finished:
                    break
                exchange.request_body(body[start:start + size])
            exchange.request_complete()
        return exchange

    def answered(self) -> tuple[int, Any]:
        self.assertEqual(len(self.sink.heads), 1)
        status, headers = self.sink.heads[0]
        self.assertIn((b"content-type", b"application/json"), headers)
        return status, json.loads(self.sink.body)

    def test_an_allowed_call_is_forwarded_exactly_as_read(self) -> None:
        body = json.dumps(call("get_ticket"), indent=3).encode() + b"\n"
        exchange = self.send(body, pieces=3)
        upstream = MemoryUpstream(self.reactor)
        self.assertIs(exchange.stage, WAITING)
        sent = upstream.received()
        self.assertTrue(sent.startswith(b"POST /mcp HTTP/1.1\r\n"))
        self.assertTrue(sent.endswith(b"\r\n\r\n" + body), sent[-200:])
        assert exchange.mcp is not None
        self.assertEqual([(v.call.name, v.allowed) for v in exchange.mcp.verdicts],
                         [("get_ticket", True)])
        self.assertEqual(exchange.mcp.request.calls[0].method, "tools/call")
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        self.assertEqual(self.sink.body, b"{}")

    def test_a_chunked_body_is_forwarded_chunked(self) -> None:
        body = json.dumps(call("search_tickets")).encode()
        self.send(body, pieces=4, length=False)
        sent = MemoryUpstream(self.reactor).received()
        self.assertIn(b"transfer-encoding: chunked", sent.lower())
        self.assertIn(body[:10], sent)

    def test_a_denied_call_is_a_json_rpc_error_and_never_upstream(self) -> None:
        exchange = self.send(json.dumps(call("delete_ticket", id_="x-7")).encode())
        self.assertEqual(self.reactor.tcpClients, [])
        self.assertIs(exchange.stage, DONE)
        status, answer = self.answered()
        self.assertEqual((status, answer["id"], answer["error"]["code"]), (200, "x-7", REFUSED))
        self.assertIn("'delete_ticket'", answer["error"]["message"])
        assert exchange.mcp is not None
        self.assertEqual([v.allowed for v in exchange.mcp.verdicts], [False])
        self.assertIn("policy-no-allow-matched", exchange.decision_reason)

    def test_a_batch_hiding_a_denied_call_is_refused_whole(self) -> None:
        batch = [call("get_ticket", 1), call("search_tickets", 2),
                 {"jsonrpc": "2.0", "method": "notifications/progress"},
                 call("delete_ticket", 3)]
        exchange = self.send(json.dumps(batch).encode())
        self.assertEqual(self.reactor.tcpClients, [])
        status, answers = self.answered()
        self.assertEqual((status, [a["id"] for a in answers]), (200, [1, 2, 3]))
        assert exchange.mcp is not None
        self.assertEqual([v.allowed for v in exchange.mcp.verdicts], [True, True, True, False])

    def test_nobody_signed_in_is_answered_before_the_body_is_read(self) -> None:
        """The sign-in answer comes before the gateway reads (and parses) a body for
        someone it does not know."""
        exchange = self.send(json.dumps(call("get_ticket", blob="x" * 3000)).encode(),
                             who=None, headers=[(b"Expect", b"100-continue")])
        self.assertEqual(self.reactor.tcpClients, [])
        self.assertEqual(self.sink.heads[0][0], 401)
        self.assertEqual((exchange.received, self.sink.continued), (0, 0))

    def test_a_policy_that_lets_nobody_in_admits_them(self) -> None:
        """Where the policy may let in someone not signed in, their body is read and
        each message decided."""
        self.snapshot = snapshot(policy=[{
            "from": f"https://{HOST}", "to": "http://127.0.0.1:9", "mcp": {},
            "policy": [{"allow": {"or": [{"mcp_method": "tools/list"}]}}]}])
        self.rebuild()
        self.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
                  who=None)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.send(json.dumps(call("get_ticket")).encode(), who=None)
        self.assertEqual(self.sink.heads[-1][0], 401)  # that one needs someone: sign in

    def test_a_later_admission_holds_the_body_until_it_comes(self) -> None:
        """An admission decided later (a session fetched from the databroker): the body
        that arrives meanwhile is held, then decided and forwarded."""
        later = LaterAdmission(self)
        self.rebuild(later)
        body = json.dumps(call("get_ticket")).encode()
        exchange = self.send(body, pieces=2, headers=[(b"Expect", b"100-continue")])
        self.assertEqual((self.reactor.tcpClients, self.sink.continued), ([], 0))
        self.assertIn("authorize", self.sink.pauses)
        later.release()
        self.assertNotIn("authorize", self.sink.pauses)
        self.assertEqual(self.sink.continued, 1)
        self.assertTrue(MemoryUpstream(self.reactor).received().endswith(body))
        assert exchange.mcp is not None
        self.assertEqual([v.allowed for v in exchange.mcp.verdicts], [True])

    def session_given(self) -> bytes:
        """Alice initializes; the server answers with its session id ``s-1``: the
        ``Mcp-Session-Id`` she gets."""
        self.send(json.dumps(call("get_ticket")).encode())
        upstream = self.upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"mcp-session-id: s-1\r\ncontent-length: 2\r\n\r\n{}")
        self.assertNotIn(b"mcp-session-id", upstream.received().lower())
        given = [v for n, v in self.sink.heads[-1][1] if n.lower() == b"mcp-session-id"]
        self.assertEqual(len(given), 1)
        self.sink = Sink()
        return given[0]

    def test_the_session_id_is_bound_to_the_person(self) -> None:
        """The server's session id reaches the client with a MAC over who got it
        (visible ASCII only, as the transport asks); the server gets its own id back
        only from that person: another person's token with it, or the server's bare
        id, is 404 with a JSON-RPC error and reaches no server (security review: anyone
        who learnt a session id could attach to its stream and replay its events)."""
        given = self.session_given()
        self.assertTrue(given.startswith(b"s-1."))
        self.assertTrue(all(0x21 <= c <= 0x7E for c in given))
        for method, body in ((b"POST", json.dumps(call("get_ticket", 2)).encode()),
                             (b"GET", None)):
            with self.subTest(method=method):
                self.send(body, method=method, headers=[(b"Mcp-Session-Id", given),
                                                        (b"Last-Event-ID", b"e-9")])
                sent = self.upstream.received().lower()  # (the pooled connection)
                self.assertIn(b"mcp-session-id: s-1\r\n", sent)
                self.upstream.respond(b"HTTP/1.1 204 No Content\r\n\r\n")
        changed = given[:-1] + (b"B" if given.endswith(b"A") else b"A")
        for who, value in ((CAROL, given), (ALICE, b"s-1"), (ALICE, changed),
                           (ALICE, given.replace(b"s-1", b"s-2"))):
            with self.subTest(who=who["email"], value=value):
                self.sink = Sink()
                exchange = self.send(json.dumps(call("get_ticket", 3)).encode(), who=who,
                                     headers=[(b"Mcp-Session-Id", value)])
                self.assertIs(exchange.stage, DONE)
                status, answer = self.answered()
                self.assertEqual((status, answer["error"]["code"]), (404, REFUSED))
                self.assertIn("Session not found", answer["error"]["message"])
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertEqual(self.upstream.received(), b"")

    def test_a_request_of_no_message_carries_no_session_id(self) -> None:
        """A method that carries no MCP message (here PUT, which Bob's rule allows)
        reaches the server without a session id: nobody checked it."""
        given = self.session_given()
        self.send(b"{}", method=b"PUT", who=BOB, headers=[(b"Mcp-Session-Id", given)])
        sent = self.upstream.received()  # (the pooled connection)
        self.assertTrue(sent.startswith(b"PUT "), sent)
        self.assertNotIn(b"mcp-session-id", sent.lower())

    def test_a_body_being_read_is_let_go_when_its_client_goes(self) -> None:
        """The body of a client that went away while its admission was being decided
        gives its share of the connection's budget back at once, though the pending
        decision still holds the exchange (security review: the budgets of MCP bodies
        being read, ``mcp_request``)."""
        later = LaterAdmission(self)
        self.rebuild(later)
        facts = ConnectionFacts("192.0.2.8")
        head = make_head(b"POST", b"/mcp", b"1.1", [
            (b"host", HOST.encode()), JSON, self.cookie(self.session(ALICE)),
            (b"content-length", b"100")], HOST, "/mcp", framing=BODY_LENGTH,
            complete=False, request_id=b"")
        exchange = Exchange(self.sink, self.core, facts, head)
        exchange.begin()
        exchange.request_body(b" " * 40)
        self.assertEqual(facts.mcp_buffered, 40)
        exchange.downstream_lost()
        self.assertEqual(facts.mcp_buffered, 0)
        later.release()
        self.assertEqual((self.sink.heads, self.reactor.tcpClients), ([], []))

    def test_a_pipelined_body_that_came_before_its_turn(self) -> None:
        """A pipelined HTTP/1.1 request's body, whole or its first part, arrives while the
        request waits its turn: it is read with the rest (a security review found the
        early pieces dropped: a whole body parsed as no body, 400 -32700; a part lost,
        and the rest forwarded under the original Content-Length)."""
        body = json.dumps(call("get_ticket")).encode()
        for split in (len(body), 10):
            with self.subTest(split=split):
                self.rebuild()
                headers = [(b"host", HOST.encode()), JSON, self.cookie(self.session(ALICE)),
                           (b"content-length", b"%d" % len(body))]
                head = make_head(b"POST", b"/mcp", b"1.1", headers, HOST, "/mcp",
                                 framing=BODY_LENGTH, complete=False, request_id=b"")
                exchange = Exchange(self.sink, self.core, FACTS)
                exchange.head_complete(head)  # waits its turn
                exchange.request_body(body[:split])
                if split == len(body):
                    exchange.request_complete()
                exchange.begin()  # its turn
                if split < len(body):
                    exchange.request_body(body[split:])
                    exchange.request_complete()
                sent = MemoryUpstream(self.reactor, -1).received()
                self.assertTrue(sent.endswith(b"\r\n\r\n" + body), sent[-200:])

    def test_a_body_sent_after_a_later_admission(self) -> None:
        """A codec holds the body while the exchange waits (paused for "authorize"): it
        comes after the admission, and is decided then (it hung: the exchange, still
        AUTHORIZING, took itself for waiting for the admission)."""
        later = LaterAdmission(self)
        self.rebuild(later)
        body = json.dumps(call("get_ticket")).encode()
        head = make_head(b"POST", b"/mcp", b"1.1",
                         [(b"host", HOST.encode()), JSON, self.cookie(self.session(ALICE)),
                          (b"content-length", b"%d" % len(body))],
                         HOST, "/mcp", framing=BODY_LENGTH, request_id=b"")
        exchange = Exchange(self.sink, self.core, FACTS, head)
        exchange.begin()
        later.release()
        exchange.request_body(body[:10])
        exchange.request_body(body[10:])
        exchange.request_complete()
        self.assertTrue(MemoryUpstream(self.reactor).received().endswith(body))

    def test_an_admission_answered_before_the_body_came(self) -> None:
        """An admission answered through a Deferred (already fired, as the MCP token
        lookup's over the memory store, or later, over Redis) before the body arrived:
        the body that comes afterwards is decided and forwarded (it once waited for an
        admission that had come, the exchange still being in AUTHORIZING)."""
        for authorizer in (FiredAdmission(self), LaterAdmission(self)):
            self.rebuild(authorizer)
            self.sink = Sink()
            body = json.dumps(call("get_ticket")).encode()
            headers = [(b"host", HOST.encode()), JSON, self.cookie(self.session(ALICE)),
                       (b"content-length", b"%d" % len(body))]
            head = make_head(b"POST", b"/mcp", b"1.1", headers, HOST, "/mcp",
                             framing=BODY_LENGTH, complete=False, request_id=b"")
            exchange = Exchange(self.sink, self.core, FACTS, head)
            exchange.begin()
            if isinstance(authorizer, LaterAdmission):
                authorizer.release()
            exchange.request_body(body)
            exchange.request_complete()
            self.assertTrue(MemoryUpstream(self.reactor, -1).received().endswith(body),
                            type(authorizer).__name__)

    def test_both_decisions_later(self) -> None:
        """Admission and the messages' decision both come later: the exchange waits in
        AUTHORIZING twice (a move the stage table allows for this)."""
        later = LaterAdmission(self, every=True)
        self.rebuild(later)
        exchange = self.send(json.dumps(call("delete_ticket")).encode())
        later.release()
        self.assertIs(exchange.stage, AUTHORIZING)
        self.assertEqual(self.sink.heads, [])
        later.release()
        self.assertEqual(self.answered()[0], 200)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_a_body_past_the_limit_is_413(self) -> None:
        body = json.dumps(call("get_ticket", blob="x" * 5000)).encode()
        exchange = self.send(body)  # its content-length: refused before reading
        status, answer = self.answered()
        self.assertEqual((status, answer["error"]["code"]), (413, -32600))
        self.assertEqual(exchange.received, 0)
        self.sink = Sink()
        exchange = self.send(body, pieces=5, length=False)  # grows past it
        self.assertEqual(self.answered()[0], 413)
        self.assertFalse(exchange.keep_alive)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_a_body_of_exactly_the_limit_is_read(self) -> None:
        prefix = json.dumps(call("get_ticket", blob=""))
        body = prefix.replace('"blob": ""', '"blob": "' + "x" * (4096 - len(prefix)) + '"')
        self.assertEqual(len(body), 4096)
        self.send(body.encode(), pieces=7, length=False)
        self.assertEqual(len(self.reactor.tcpClients), 1)

    def test_headers_that_disagree_are_400(self) -> None:
        self.send(json.dumps(call("delete_ticket")).encode(),
                  headers=[(b"Mcp-Method", b"tools/call"), (b"Mcp-Name", b"get_ticket")])
        status, answer = self.answered()
        self.assertEqual((status, answer["error"]["code"], answer["id"]),
                         (400, HEADER_MISMATCH, 1))
        self.assertEqual(self.reactor.tcpClients, [])

    def test_not_json_is_a_parse_error(self) -> None:
        self.send(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"')
        status, answer = self.answered()
        self.assertEqual((status, answer["error"]["code"]), (400, PARSE_ERROR))
        self.sink = Sink()
        self.send(None)  # no body at all
        self.assertEqual(self.answered()[1]["error"]["code"], PARSE_ERROR)

    def test_another_origin_is_403(self) -> None:
        self.send(json.dumps(call("get_ticket")).encode(),
                  headers=[(b"Origin", b"https://evil.test")])
        status, answer = self.answered()
        self.assertEqual((status, answer["id"]), (403, None))
        self.assertEqual(self.reactor.tcpClients, [])
        self.sink = Sink()
        self.send(json.dumps(call("get_ticket")).encode(),
                  headers=[(b"Origin", b"https://mcp.test")])
        self.assertEqual(len(self.reactor.tcpClients), 1)

    def test_get_and_delete_need_some_message_allowed(self) -> None:
        """A GET or DELETE carries no message: whoever the policy lets send some
        message on the route may (alice by tool, carol by method), nobody else (bob's
        only rule is about PUT requests, which carry no message)."""
        exchange = self.send(None, method=b"GET")
        self.assertEqual(len(self.reactor.tcpClients), 1)
        assert exchange.mcp is not None
        self.assertEqual([(v.call.method, v.allowed, v.rule) for v in exchange.mcp.verdicts],
                         [("", True, "allow[0]")])
        self.send(None, method=b"DELETE", who=CAROL)
        self.assertEqual(len(self.reactor.tcpClients), 2)
        self.send(None, method=b"DELETE", who=BOB)
        self.assertEqual(self.sink.heads[-1][0], 403)
        self.assertEqual(len(self.reactor.tcpClients), 2)

    def test_the_routes_portal_lists_the_route_as_its_get_is_decided(self) -> None:
        """/.gateway/routes decides an MCP route as the data plane decides its GET: for
        whoever may send some message (alice, carol), not for bob."""
        from gateway.authenticate.endpoints import Endpoints

        from .test_identity import request

        def listed(who: dict[str, Any]) -> list[str]:
            answer = Endpoints(self.identity, self.snapshot.routes).internal(request(
                "/.gateway/routes", host=HOST,
                headers=[JSON, self.cookie(self.session(who))]))
            assert isinstance(answer, Reply), answer
            return [r["url"] for r in json.loads(answer.body)["routes"]]

        self.assertIn(f"https://{HOST}/", listed(ALICE))
        self.assertIn(f"https://{HOST}/", listed(CAROL))
        self.assertNotIn(f"https://{HOST}/", listed(BOB))

    def test_other_methods_carry_no_message(self) -> None:
        """A PUT is decided as any request (bob's rule lets PUT in), and is no message:
        the MCP criteria are false for it (alice's tool rule refuses it)."""
        exchange = self.send(b"x", method=b"PUT", who=BOB)
        self.assertIsNone(exchange.mcp)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.send(b"x", method=b"PUT")
        self.assertEqual(self.sink.heads[-1][0], 403)
        self.assertNotIn(b"jsonrpc", self.sink.body)  # the route's 403, no JSON-RPC

    def test_an_allow_without_verdicts_is_refused(self) -> None:
        """An authorizer that does not know MCP (an older split authorize service)
        answers an Allow deciding no message: refused, never forwarded."""
        class Blind:
            def authorize(self, request: RequestInfo, route: Route) -> Decision:
                return Allow()

            def sign_in(self, request: RequestInfo) -> Decision:
                return Reply(401, b"")

        self.rebuild(Blind())
        self.send(json.dumps(call("get_ticket")).encode())
        self.assertEqual(self.answered()[0], 500)
        self.assertEqual(self.reactor.tcpClients, [])

    def test_a_split_deployment_decides_each_message_too(self) -> None:
        """The messages cross the wire to the authorize service, the verdicts come back
        with the decision: an allowed call forwarded, a denied one refused as JSON-RPC."""
        self.rebuild(WireAuthorizer(self))
        exchange = self.send(json.dumps(call("get_ticket", id_=2**70)).encode())
        self.assertEqual(len(self.reactor.tcpClients), 1)
        assert exchange.mcp is not None
        self.assertEqual([(v.call.id, v.call.name, v.allowed) for v in exchange.mcp.verdicts],
                         [(2**70, "get_ticket", True)])
        batch = [call("get_ticket", "a"), {"jsonrpc": "2.0", "method": "notifications/x"},
                 call("delete_ticket", 3)]
        exchange = self.send(json.dumps(batch).encode())
        self.assertEqual(len(self.reactor.tcpClients), 1)
        status, _ = self.sink.heads[-1]
        self.assertEqual((status, [a["id"] for a in json.loads(self.sink.body)]),
                         (200, ["a", 3]))
        assert exchange.mcp is not None
        self.assertEqual([v.allowed for v in exchange.mcp.verdicts], [True, True, False])

    def test_long_lived_responses_are_not_cut_by_the_route_timeout(self) -> None:
        """An MCP route's stream stays open past the route's 10 s while events come
        within timeout_idle (60 s); silence longer than that ends it."""
        exchange = self.send(json.dumps(call("get_ticket")).encode())
        upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(5):
            self.reactor.advance(30)
            self.assertFalse(self.core_timed_out(exchange))
            upstream.respond(b"3\r\n:\n\n\r\n")  # an SSE comment: a keep-alive
        self.assertEqual(self.sink.body, b":\n\n" * 5)
        self.reactor.advance(61)
        self.assertTrue(self.core_timed_out(exchange))
        # a route without mcp keeps its timeout between pieces of a response
        self.sink = Sink()
        plain = self.send(b"{}", host="plain.test")
        upstream = MemoryUpstream(self.reactor)
        upstream.respond(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        self.reactor.advance(9)
        self.assertFalse(self.core_timed_out(plain))
        self.reactor.advance(2)
        self.assertTrue(self.core_timed_out(plain))

    def test_the_silence_bound_of_an_mcp_route(self) -> None:
        """timeout_idle, or the route's timeout when longer; none with timeout_idle 0."""
        def bound(**settings: Any) -> float:
            plan, _ = build_plan(snapshot(policy=ROUTES, **settings)).lookup(HOST, "/mcp")
            assert plan is not None
            return plan.response_timeout

        self.assertEqual(bound(timeout_idle="60s"), 60.0)
        self.assertEqual(bound(timeout_idle="5s"), 10.0)  # the route's 10 s is longer
        self.assertEqual(bound(timeout_idle="0s"), float("inf"))
        plain, _ = build_plan(snapshot(policy=ROUTES, timeout_idle="0s")).lookup(
            "plain.test", "/")
        assert plain is not None
        self.assertEqual(plain.response_timeout, 10.0)

    def core_timed_out(self, exchange: Exchange) -> bool:
        """What the codecs' watchdog does with the exchange's deadline."""
        now = self.reactor.seconds()
        return bool(exchange.deadline) and now > exchange.deadline
