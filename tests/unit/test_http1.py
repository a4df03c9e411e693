"""The HTTP/1.1 codec driven through in-memory transports: validation, forwarding,
keep-alive and pipelining, and the timeouts enforced by the core's watchdog."""

from __future__ import annotations

from dataclasses import dataclass, field

import httptools
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import build_plan
from tests.support.filling_transport import FillingTransport
from tests.support.memory_upstream import MemoryUpstream

from .config.helpers import IDENTITY, base_config, load

SNAPSHOT = load(base_config(
    timeout_idle="5s",
    timeout_read="3s",
    policy=[
        {
            "from": "https://app.example.com",
            "prefix": "/api/",
            "to": "http://127.0.0.1:9000/backend/",
            "allow_public_unauthenticated_access": True,
            "timeout": "2s",
            "set_request_headers": {"X-Extra": "set"},
            "remove_request_headers": ["X-Remove-Me"],
        },
        {"from": "https://private.example.com", "to": "http://10.0.0.1:80"},
        {"from": "http://old.example.com:8080", "redirect": {"https_redirect": True}},
    ],
    **IDENTITY,
))
CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
SECURITY_HEADERS = {
    b"x-content-type-options": [b"nosniff"],
    b"x-frame-options": [b"SAMEORIGIN"],
    b"x-xss-protection": [b"1; mode=block"],
    b"strict-transport-security": [b"max-age=31536000; includeSubDomains; preload"],
}


def get(path: bytes, host: bytes = b"app.example.com", method: bytes = b"GET",
        extra: bytes = b"") -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + extra + b"\r\n"


@dataclass
class Response:
    status: int = 0
    reason: bytes = b""
    headers: dict[bytes, list[bytes]] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False


class _Collector:
    """httptools callbacks gathering the responses the client received."""

    def __init__(self) -> None:
        self.responses: list[Response] = []
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.responses.append(Response())

    def on_status(self, status: bytes) -> None:
        self.responses[-1].reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.responses[-1].headers.setdefault(name.lower(), []).append(value)

    def on_headers_complete(self) -> None:
        self.responses[-1].status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.responses[-1].body += body

    def on_message_complete(self) -> None:
        self.responses[-1].complete = True


def parse(data: bytes) -> list[Response]:
    """Responses in ``data`` (for answers to GET; a HEAD answer is checked as bytes)."""
    collector = _Collector()
    collector.parser.feed_data(data)
    return collector.responses


Upstream = MemoryUpstream


class Http1TestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)

    def send(self, data: bytes) -> None:
        self.conn.dataReceived(data)

    def output(self) -> bytes:
        data: bytes = self.client.value()
        self.client.clear()
        return data

    def answer(self) -> Response:
        """The one complete response written since the last look."""
        responses = parse(self.output())
        self.assertEqual(len(responses), 1, responses)
        self.assertTrue(responses[0].complete)
        return responses[0]

    def upstream(self, index: int = -1) -> Upstream:
        return Upstream(self.reactor, index)

    def assertOpen(self) -> None:
        self.assertFalse(self.client.disconnecting, "the client connection was closed")

    def assertClosed(self) -> None:
        self.assertTrue(self.client.disconnecting, "the client connection stayed open")


class LocalAnswerTests(Http1TestCase):
    def test_ping(self) -> None:
        """/ping answers 200 ``OK\\n`` and keeps the connection for the next request."""
        for _ in range(2):
            self.send(get(b"/ping", b"anything.example"))
            response = self.answer()
            self.assertEqual((response.status, response.body), (200, b"OK\n"))
            self.assertNotIn(b"connection", response.headers)
            self.assertOpen()
        self.assertEqual(self.reactor.tcpClients, [])

    def test_ping_head_and_post(self) -> None:
        """HEAD /ping has the length but no body; other methods get 405 with Allow."""
        self.send(get(b"/ping", method=b"HEAD"))
        raw = self.output()
        self.assertTrue(raw.startswith(b"HTTP/1.1 200 OK\r\n"))
        self.assertTrue(raw.endswith(b"content-length: 3\r\n\r\n"), raw)
        self.send(get(b"/ping", method=b"POST", extra=b"Content-Length: 0\r\n"))
        response = self.answer()
        self.assertEqual(response.status, 405)
        self.assertEqual(response.headers[b"allow"], [b"GET, HEAD"])
        self.assertOpen()

    def test_unknown_host(self) -> None:
        """A Host no route names gets 404 and the connection stays usable."""
        self.send(get(b"/", b"nope.example.com"))
        response = self.answer()
        self.assertEqual(response.status, 404)
        self.assertEqual(response.body, b"404 Not Found: nope.example.com route unknown\n")
        self.assertOpen()
        self.send(get(b"/ping"))
        self.assertEqual(self.answer().status, 200)

    def test_no_matching_path(self) -> None:
        """A known host whose routes match no path gets 404 naming that."""
        self.send(get(b"/other"))
        response = self.answer()
        self.assertEqual(response.status, 404)
        self.assertEqual(response.body, b"404 Not Found: no route matches this path\n")
        self.assertOpen()

    def test_redirect(self) -> None:
        """A redirect route answers 301 with the computed Location and an empty body."""
        self.send(get(b"/x/../y?q=1", b"old.example.com:8080"))
        response = self.answer()
        self.assertEqual(response.status, 301)
        self.assertEqual(response.headers[b"location"], [b"https://old.example.com/y?q=1"])
        self.assertEqual((response.headers[b"content-length"], response.body), ([b"0"], b""))
        self.assertOpen()
        self.assertEqual(self.reactor.tcpClients, [])

    def test_private_route_unauthorized(self) -> None:
        """A route that is not public is refused with 401 by the default authorizer."""
        self.send(get(b"/x", b"private.example.com"))
        response = self.answer()
        self.assertEqual(response.status, 401)
        self.assertEqual(response.body, b"401 Unauthorized: this route requires sign-in\n")
        for name, values in SECURITY_HEADERS.items():
            self.assertEqual(response.headers[name], values)
        self.assertEqual(self.reactor.tcpClients, [])
        self.assertOpen()


class RejectionTests(Http1TestCase):
    def refused(self, request: bytes, status: int) -> Response:
        self.send(request)
        response = self.answer()
        self.assertEqual(response.status, status, request[:60])
        self.assertEqual(response.headers.get(b"connection"), [b"close"])
        self.assertClosed()
        self.assertEqual(self.reactor.tcpClients, [])
        return response

    def test_http10(self) -> None:
        """HTTP/1.0 is refused with 426 naming HTTP/1.1, and the connection closes."""
        response = self.refused(b"GET /api/x HTTP/1.0\r\nHost: app.example.com\r\n\r\n", 426)
        self.assertEqual(response.headers[b"upgrade"], [b"HTTP/1.1"])

    def test_content_length_with_chunked(self) -> None:
        """Content-Length together with Transfer-Encoding is ambiguous framing: 400."""
        self.refused(get(b"/api/x", method=b"POST",
                         extra=b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), 400)

    def test_duplicate_content_length(self) -> None:
        """Two differing Content-Length values: 400."""
        self.refused(get(b"/api/x", method=b"POST",
                         extra=b"Content-Length: 3\r\nContent-Length: 4\r\n") + b"abcd", 400)

    def test_other_transfer_encoding(self) -> None:
        """A Transfer-Encoding other than chunked: 400."""
        self.refused(get(b"/api/x", method=b"POST", extra=b"Transfer-Encoding: gzip\r\n"), 400)

    def test_host_required(self) -> None:
        """A request without Host: 400."""
        response = self.refused(b"GET /api/x HTTP/1.1\r\nAccept: */*\r\n\r\n", 400)
        self.assertEqual(response.body,
                         b"400 Bad Request: exactly one Host header is required\n")

    def test_empty_host(self) -> None:
        """An empty Host: 400."""
        self.refused(b"GET /api/x HTTP/1.1\r\nHost: \r\n\r\n", 400)

    def test_two_hosts(self) -> None:
        """Two Host headers: 400."""
        self.refused(get(b"/api/x", extra=b"Host: other.example.com\r\n"), 400)

    def test_long_target(self) -> None:
        """A target over 8 KiB: 414."""
        self.refused(get(b"/api/" + b"a" * 8 * 1024), 414)

    def test_too_many_headers(self) -> None:
        """More than 100 header fields: 431."""
        extra = b"".join(b"X-H%d: v\r\n" % i for i in range(100))
        self.refused(get(b"/api/x", extra=extra), 431)

    def test_headers_too_large(self) -> None:
        """More than 64 KiB of header fields: 431."""
        self.refused(get(b"/api/x", extra=b"X-Big: " + b"v" * 65 * 1024 + b"\r\n"), 431)

    def test_encoded_slash(self) -> None:
        """An encoded slash in the path: 400 with the reason."""
        response = self.refused(get(b"/api/a%2fb"), 400)
        self.assertEqual(response.body,
                         b"400 Bad Request: encoded slash or backslash in the path\n")

    def test_refusal_aborts_earlier_pipelined_requests(self) -> None:
        """Found by fuzzing: a refused pipelined request was answered at once while the
        one before it still waited for its upstream, whose response then followed the
        400 and answered the wrong request. The earlier request is aborted instead."""
        self.send(get(b"/api/a", extra=b"Connection: close\r\n") + get(b"/api/b"))
        response = self.answer()
        self.assertEqual(response.status, 400)
        self.assertClosed()
        self.assertTrue(all(c.stoppedConnecting for c in self.reactor.connectors))

    def test_nothing_served_after_connection_close(self) -> None:
        """Found by fuzzing: a request pipelined in the same read after one answered
        with ``connection: close`` (here a 404 to a request whose body is not read) was
        forwarded, and its response written after the close."""
        self.send(get(b"/u", b"nope.example.com", b"POST", b"Content-Length: 5\r\n")
                  + b"hello" + get(b"/api/n"))
        response = self.answer()
        self.assertEqual((response.status, response.headers[b"connection"]), (404, [b"close"]))
        self.assertClosed()
        self.assertEqual(self.reactor.tcpClients, [])

    def test_no_second_answer_after_connection_close(self) -> None:
        """Found by fuzzing: the body of a request answered with a 404 and
        ``connection: close``, arriving malformed in the same read, got a 400 too."""
        self.send(get(b"/u", b"nope.example.com", b"POST", b"Transfer-Encoding: chunked\r\n")
                  + b"3;x\r\nab\r\n0\r\n\r\n")
        response = self.answer()
        self.assertEqual((response.status, response.headers[b"connection"]), (404, [b"close"]))
        self.assertClosed()

    def test_absolute_target_without_authority(self) -> None:
        """Found by fuzzing: an absolute-form target with userinfo or no host was a 500
        with a logged traceback; it is a 400 naming the problem."""
        for target in (b"http://app.@example.com/api/x", b"http:///api/x"):
            response = self.refused(get(target, b"other"), 400)
            self.assertIn(b"no valid authority", response.body)
            self.client.clear()
            self.setUp()

    def test_connect(self) -> None:
        """CONNECT to the host of an HTTP route is refused (405)."""
        self.refused(b"CONNECT app.example.com:443 HTTP/1.1\r\nHost: app.example.com:443\r\n\r\n",
                     405)

    def test_malformed(self) -> None:
        """Bytes that are not HTTP: 400."""
        self.refused(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400)


class ForwardingTests(Http1TestCase):
    REQUEST = (
        b"GET /api/items/../list?x=1 HTTP/1.1\r\n"
        b"Host: app.example.com\r\n"
        b"User-Agent: test\r\n"
        b"Connection: keep-alive, X-Hop\r\n"
        b"X-Hop: 1\r\n"
        b"Keep-Alive: timeout=5\r\n"
        b"TE: trailers\r\n"
        b"Upgrade: websocket\r\n"
        b"Proxy-Authorization: Basic eA==\r\n"
        b"X-Gateway-Identity: forged\r\n"
        b"x-gateway-jwt-assertion: forged\r\n"
        b"X-Remove-Me: 1\r\n"
        b"X-Extra: from-client\r\n"
        b"X-Forwarded-For: 203.0.113.1\r\n"
        b"X-Forwarded-Proto: https\r\n"
        b"X-Forwarded-Host: evil.example\r\n"
        b"X-Request-Id: client-id-1\r\n"
        b"Accept: */*\r\n"
        b"\r\n"
    )
    UPSTREAM_REQUEST = (
        b"GET /backend/list?x=1 HTTP/1.1\r\n"
        b"User-Agent: test\r\n"
        b"Accept: */*\r\n"
        b"host: 127.0.0.1:9000\r\n"
        b"x-forwarded-for: 203.0.113.1, 192.0.2.7\r\n"
        b"x-forwarded-proto: http\r\n"
        b"x-forwarded-host: app.example.com\r\n"
        b"X-Extra: set\r\n"
        b"x-request-id: client-id-1\r\n"
        b"\r\n"
    )
    RESPONSE = (
        b"HTTP/1.1 200 Fine\r\n"
        b"Content-Type: text/plain\r\n"
        b"Content-Length: 5\r\n"
        b"Connection: keep-alive, X-Up-Hop\r\n"
        b"X-Up-Hop: 1\r\n"
        b"Keep-Alive: timeout=60\r\n"
        b"X-Frame-Options: ALLOWALL\r\n"
        b"\r\n"
        b"hello"
    )

    def test_connects_to_upstream(self) -> None:
        """A public route makes the pool connect to the route's upstream address."""
        self.send(self.REQUEST)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        host, port, _, timeout, _ = self.reactor.tcpClients[0]
        self.assertEqual((host, port, timeout), ("127.0.0.1", 9000, 2.0))
        self.assertEqual(self.output(), b"")

    def test_request_sent_upstream(self) -> None:
        """Rewritten path, own Host and X-Forwarded-*, no hop-by-hop or identity headers."""
        self.send(self.REQUEST)
        self.assertEqual(self.upstream().received(), self.UPSTREAM_REQUEST)

    def test_response_relayed(self) -> None:
        """Status, reason and body are relayed; hop-by-hop dropped; security headers set."""
        self.send(self.REQUEST)
        upstream = self.upstream()
        upstream.respond(self.RESPONSE)
        response = self.answer()
        self.assertEqual((response.status, response.reason, response.body),
                         (200, b"Fine", b"hello"))
        self.assertEqual(response.headers, {
            b"content-type": [b"text/plain"], b"content-length": [b"5"], **SECURITY_HEADERS,
            b"x-request-id": [b"client-id-1"],
        })
        self.assertOpen()

    def test_pooled_connection_reused(self) -> None:
        """A second request on the same client connection uses the pooled upstream one."""
        self.send(self.REQUEST)
        upstream = self.upstream()
        upstream.received()
        upstream.respond(self.RESPONSE)
        self.answer()
        self.assertEqual(self.core.pool.idle_count(), 1)
        self.send(get(b"/api/again"))
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertTrue(upstream.received().startswith(b"GET /backend/again HTTP/1.1\r\n"))
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        self.assertEqual(self.answer().body, b"ok")

    def test_upstream_close_not_pooled(self) -> None:
        """An upstream answering ``Connection: close`` is not reused for the next request."""
        self.send(get(b"/api/a"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\na")
        self.assertEqual(self.answer().body, b"a")
        self.assertEqual(self.core.pool.idle_count(), 0)
        self.send(get(b"/api/b"))
        self.assertEqual(len(self.reactor.tcpClients), 2)

    def test_absolute_form(self) -> None:
        """An absolute-form target is routed by its authority, not by the Host header."""
        self.send(b"GET http://app.example.com/api/x?y HTTP/1.1\r\nHost: other.example\r\n\r\n")
        self.assertTrue(self.upstream().received().startswith(b"GET /backend/x?y HTTP/1.1\r\n"))

    def test_absolute_form_forwarded_host(self) -> None:
        """With an absolute-form target, the upstream is told the authority that was routed."""
        self.send(b"GET http://app.example.com/api/x HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        sent = self.upstream().received()
        self.assertIn(b"\r\nx-forwarded-host: app.example.com\r\n", sent)
        self.assertNotIn(b"evil.example", sent)

    def test_request_body(self) -> None:
        """A body sent before the upstream connects is held, then forwarded after the head."""
        self.send(get(b"/api/upload", method=b"POST", extra=b"Content-Length: 11\r\n") + b"hello")
        self.send(b" world")
        upstream = self.upstream()
        head, _, body = upstream.received().partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"POST /backend/upload HTTP/1.1\r\n"))
        self.assertIn(b"\r\nContent-Length: 11", head)
        self.assertEqual(body, b"hello world")

    def test_chunked_response(self) -> None:
        """An upstream's chunked body reaches the client re-chunked, as it arrives."""
        self.send(get(b"/api/stream"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        first = self.client.value()
        head, _, body = first.partition(b"\r\n\r\n")
        self.assertEqual(head.lower().count(b"transfer-encoding: chunked"), 1)
        self.assertEqual(body, b"5\r\nhello\r\n")
        upstream.respond(b"6\r\n world\r\n0\r\n\r\n")
        response = self.answer()
        self.assertEqual(response.body, b"hello world")
        self.assertNotIn(b"content-length", response.headers)
        self.assertOpen()

    def test_unframed_response(self) -> None:
        """A body delimited by the upstream closing is chunked to the client, then ended."""
        self.send(get(b"/api/old"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nsome bytes")
        upstream.protocol.connectionLost(Failure(ConnectionDone()))
        response = self.answer()
        self.assertEqual((response.status, response.body), (200, b"some bytes"))
        self.assertEqual(response.headers[b"transfer-encoding"], [b"chunked"])
        self.assertOpen()

    def test_head(self) -> None:
        """HEAD: Content-Length is relayed without a body; the connections stay usable."""
        self.send(get(b"/api/doc", method=b"HEAD"))
        upstream = self.upstream()
        self.assertTrue(upstream.received().startswith(b"HEAD /backend/doc HTTP/1.1\r\n"))
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        raw = self.output()
        self.assertTrue(raw.startswith(b"HTTP/1.1 200 OK\r\n"))
        self.assertTrue(raw.endswith(b"\r\n\r\n"), raw)
        self.assertIn(b"\r\nContent-Length: 5\r\n", raw)
        self.assertNotIn(b"transfer-encoding", raw.lower())
        self.send(get(b"/api/next"))
        self.assertEqual(len(self.reactor.tcpClients), 1)
        upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
        self.assertEqual(self.answer().body, b"next")

    def test_pipelined_in_order(self) -> None:
        """Pipelined requests are answered in the order they were sent."""
        self.send(get(b"/api/slow") + get(b"/ping") + get(b"/", b"nope.example.com"))
        self.assertEqual(self.output(), b"")
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
        responses = parse(self.output())
        self.assertEqual([(r.status, r.body[:4]) for r in responses],
                         [(200, b"slow"), (200, b"OK\n"), (404, b"404 ")])
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertOpen()

    def test_stale_pooled_connection_retried(self) -> None:
        """A pooled connection closed under a GET is retried once on a fresh connection."""
        self.send(get(b"/api/a"))
        first = self.upstream()
        first.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
        self.answer()
        self.send(get(b"/api/b"))
        self.assertEqual(len(self.reactor.tcpClients), 1)
        first.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(len(self.reactor.tcpClients), 2)
        second = self.upstream()
        self.assertTrue(second.received().startswith(b"GET /backend/b HTTP/1.1\r\n"))
        second.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb")
        self.assertEqual(self.answer().body, b"b")

    def test_stale_pooled_connection_post_not_retried(self) -> None:
        """A POST whose body was sent is not replayed: the client gets 502."""
        self.send(get(b"/api/a"))
        first = self.upstream()
        first.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
        self.answer()
        self.send(get(b"/api/b", method=b"POST", extra=b"Content-Length: 2\r\n") + b"hi")
        first.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertEqual(self.answer().status, 502)

    def test_upstream_closes_before_response(self) -> None:
        """An upstream closing without answering a fresh connection gives 502."""
        self.send(get(b"/api/x"))
        upstream = self.upstream()
        upstream.protocol.connectionLost(Failure(ConnectionDone()))
        response = self.answer()
        self.assertEqual(response.status, 502)
        self.assertOpen()

    def test_client_disconnect_aborts_upstream(self) -> None:
        """A client leaving mid-response aborts the upstream connection (not pooled)."""
        self.send(get(b"/api/big"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        self.assertTrue(self.output().endswith(b"hello"))
        self.assertFalse(upstream.transport.disconnected)
        self.conn.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(upstream.transport.disconnected)
        self.assertEqual(self.core.pool.idle_count(), 0)
        self.assertNotIn(self.conn, self.core.connections)

    def test_client_half_close_aborts_upstream(self) -> None:
        """A client closing its side while waiting aborts the request upstream."""
        self.send(get(b"/api/x"))
        upstream = self.upstream()
        self.conn.readConnectionLost()
        self.assertTrue(self.client.disconnected)
        self.conn.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(upstream.transport.disconnected)


class TimeoutTests(Http1TestCase):
    def test_idle_keepalive_closed(self) -> None:
        """An idle keep-alive connection is closed once ``timeout_idle`` passes."""
        self.send(get(b"/ping"))
        self.answer()
        self.reactor.advance(4.5)
        self.assertOpen()
        self.reactor.advance(1.0)
        self.assertClosed()
        self.assertEqual(self.output(), b"")

    def test_idle_counts_from_last_request(self) -> None:
        """Each request restarts the idle time."""
        self.send(get(b"/ping"))
        self.reactor.advance(4.0)
        self.send(get(b"/ping"))
        self.reactor.advance(4.0)
        self.assertOpen()
        self.reactor.advance(1.5)
        self.assertClosed()

    def test_incomplete_headers(self) -> None:
        """Headers that never complete get 408 and a close after ``timeout_read``."""
        self.send(b"GET /api/x HTTP/1.1\r\nHost: app.example.com\r\n")
        self.reactor.advance(2.5)
        self.assertEqual(self.output(), b"")
        self.assertOpen()
        self.reactor.advance(1.0)
        response = self.answer()
        self.assertEqual(response.status, 408)
        self.assertEqual(response.headers[b"connection"], [b"close"])
        self.assertClosed()
        self.assertEqual(self.reactor.tcpClients, [])

    def test_trickled_headers_still_time_out(self) -> None:
        """Slowloris: headers sent a byte at a time still get 408 after ``timeout_read``
        from their first byte, although each byte came in well within it."""
        self.send(b"GET /api/x HTTP/1.1\r\nHost: app.example.com\r\n")
        for _ in range(6):
            self.reactor.advance(0.5)
            self.send(b"X")
        self.reactor.advance(0.5)
        response = self.answer()
        self.assertEqual(response.status, 408)
        self.assertClosed()

    def test_upstream_never_answers(self) -> None:
        """No response within the route ``timeout``: 504 and the upstream is aborted."""
        self.send(get(b"/api/x"))
        upstream = self.upstream()
        self.reactor.advance(1.5)
        self.assertEqual(self.output(), b"")
        self.reactor.advance(1.0)
        response = self.answer()
        self.assertEqual(response.status, 504)
        self.assertEqual(response.body, b"504 Gateway Timeout: upstream request timeout\n")
        self.assertTrue(upstream.transport.disconnected)
        self.assertOpen()

    def test_connect_never_completes(self) -> None:
        """A connect still pending after the route ``timeout`` is cancelled: 504."""
        self.send(get(b"/api/x"))
        self.reactor.advance(1.5)
        self.assertEqual(self.output(), b"")
        self.reactor.advance(1.0)
        response = self.answer()
        self.assertEqual(response.status, 504)
        self.assertEqual(response.body, b"504 Gateway Timeout: upstream connect timeout\n")
        self.assertTrue(self.reactor.connectors[0].stoppedConnecting)
        self.assertOpen()

    def test_stalled_body_times_out(self) -> None:
        """An upstream that stops sending mid-body is aborted and the client cut off."""
        self.send(get(b"/api/x"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        self.reactor.advance(1.5)
        self.assertFalse(self.client.disconnected)
        self.reactor.advance(1.0)
        self.assertTrue(upstream.transport.disconnected)
        self.assertTrue(self.client.disconnected)

    def test_watchdog_stops(self) -> None:
        """``core.stop`` stops the watchdog: no more checks run on the clock."""
        self.core.stop()
        self.send(get(b"/ping"))
        self.reactor.advance(60)
        self.assertOpen()
        self.assertEqual(self.reactor.getDelayedCalls(), [])



class FlowControlTests(SynchronousTestCase):
    """A client whose send buffer fills: the response pauses the upstream read, and
    whatever happens next the pooled connection must come back reading (issue 19)."""

    BIG = 1 << 20

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = FillingTransport(64 * 1024, peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)

    def big_response(self) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.BIG + b"x" * self.BIG

    def test_last_read_completes_while_client_buffer_full(self) -> None:
        """The read that fills the client's buffer also completes the response (one
        upstream read holds the rest of the body): the connection goes back to the
        pool paused by the response flow, and the next request on it must still be
        read. This interleaving stalled keep-alive clients after large downloads.
        (The head comes in a read of its own: a response that ends within its first
        read never gets flow control, so it cannot leave anything paused.)"""
        self.conn.dataReceived(get(b"/api/big"))
        upstream = Upstream(self.reactor)
        upstream.received()
        response = self.big_response()
        upstream.respond(response[:100])
        self.assertIsNotNone(self.client.producer, "no flow for a response still streaming")
        upstream.respond(response[100:])
        self.assertTrue(self.client.producer_paused_by_us, "the client buffer never filled")
        self.assertEqual(self.core.pool.idle_count(), 1)
        self.assertEqual(upstream.transport.producerState, "producing",
                         "a pooled upstream connection was left paused")
        self.assertEqual(len(parse(self.client.drain())[0].body), self.BIG)
        self.conn.dataReceived(get(b"/api/next"))
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.assertTrue(upstream.received().startswith(b"GET /backend/next HTTP/1.1\r\n"))
        self.assertEqual(upstream.transport.producerState, "producing")
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        self.assertEqual(parse(self.client.drain())[0].body, b"ok")

    def test_drain_after_completion_does_not_resume_pooled_connection_for_old_flow(self) -> None:
        """The client buffer draining after the response ended must not touch the
        upstream connection on behalf of the finished response (it may be serving
        another client's request, paused by that client's own flow)."""
        self.conn.dataReceived(get(b"/api/big"))
        upstream = Upstream(self.reactor)
        upstream.respond(self.big_response())
        self.assertIsNone(self.client.producer, "the response flow stayed registered")
        other_client = FillingTransport(64 * 1024, peerAddress=CLIENT)
        other = Http1Connection(self.core)
        other.makeConnection(other_client)
        other.dataReceived(get(b"/api/other"))
        self.assertEqual(len(self.reactor.tcpClients), 1)  # took the pooled connection
        upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.BIG
                         + b"y" * (self.BIG // 2))
        self.assertEqual(upstream.transport.producerState, "paused")
        self.client.drain()  # the first client catches up: must not resume the upstream
        self.assertEqual(upstream.transport.producerState, "paused")
        other_client.drain()
        self.assertEqual(upstream.transport.producerState, "producing")

    def test_pipelined_request_behind_a_paused_large_response(self) -> None:
        """A request pipelined behind a large response whose client buffer filled is
        parsed and answered once the first response completes."""
        self.conn.dataReceived(get(b"/api/big") + get(b"/api/second"))
        upstream = Upstream(self.reactor)
        upstream.received()
        upstream.respond(self.big_response())
        self.assertTrue(upstream.received().startswith(b"GET /backend/second HTTP/1.1\r\n"))
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
        responses = parse(self.client.drain())
        self.assertEqual([(r.status, len(r.body)) for r in responses],
                         [(200, self.BIG), (200, 6)])
        self.assertEqual(upstream.transport.producerState, "producing")


class RefusalLogTests(Http1TestCase):
    def test_refused_request_logged_with_its_status(self) -> None:
        """A request refused while parsing is logged with the status it was answered
        and why, not as 499 ("the client left")."""
        from twisted.logger import globalLogPublisher

        events: list[dict[str, object]] = []

        def observe(event: dict[str, object]) -> None:
            if event.get("log_namespace") == "gateway.access":
                events.append(event)

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        self.send(b"GET /a HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 1\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        self.assertEqual(self.answer().status, 400)
        self.conn.connectionLost()
        self.assertEqual([e["status"] for e in events], [400])
        self.assertIn("Transfer-Encoding", str(events[0]["detail"]))


class PipelineResumeTests(Http1TestCase):
    """Reading pauses while pipelined requests wait; it must resume when the request
    still being received becomes the one served (issue 19's soak found both cases
    stalling once a pipelined batch passed one 64 KiB read)."""

    def test_partial_next_request_read_once_it_is_served(self) -> None:
        self.send(get(b"/api/a") + b"GET /api/b HTTP/1.1\r\nHo")
        self.assertEqual(self.client.producerState, "paused")
        upstream = self.upstream()
        upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
        self.assertEqual(self.client.producerState, "producing",
                         "the rest of the next request is never read")
        self.send(b"st: app.example.com\r\n\r\n")
        self.assertTrue(upstream.received().startswith(b"GET /backend/b HTTP/1.1\r\n"))

    def test_next_request_body_read_once_it_is_served(self) -> None:
        self.send(get(b"/api/a") + b"POST /api/upload HTTP/1.1\r\nHost: app.example.com\r\n"
                  b"Content-Length: 10\r\n\r\n0123")
        upstream = self.upstream()
        upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
        self.assertEqual(self.client.producerState, "producing")
        self.send(b"456789")
        sent = upstream.received()
        self.assertTrue(sent.startswith(b"POST /backend/upload HTTP/1.1\r\n"), sent)
        self.assertTrue(sent.endswith(b"\r\n\r\n0123456789"), sent)

    def test_complete_requests_keep_reading_paused(self) -> None:
        """Requests already received and waiting still hold reading paused (memory)."""
        self.send(get(b"/api/a") + get(b"/api/b") + get(b"/api/c"))
        upstream = self.upstream()
        upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
        self.assertEqual(self.client.producerState, "paused")


class _ClosingTransport(StringTransport):
    """A transport whose orderly close never completes (a TLS peer that never sends
    close_notify), recording an abort."""

    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        super().abortConnection()


class CloseTests(Http1TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.client = _ClosingTransport(peerAddress=CLIENT)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(self.client)

    def test_close_while_paused_resumes_reading(self) -> None:
        """Closing a connection whose reading is paused (pipelined requests waiting)
        resumes reading, so the peer's EOF or TLS close_notify can arrive; what else
        arrives is ignored. (A paused TLS connection kept its descriptor forever.)"""
        self.send(get(b"/api/a") + get(b"/api/b"))
        self.assertEqual(self.client.producerState, "paused")
        self.conn.close_connection()  # e.g. the watchdog gives up on the client
        self.assertTrue(self.client.disconnecting)
        self.assertEqual(self.client.producerState, "producing")
        self.conn.dataReceived(get(b"/api/c"))
        self.assertEqual(len(self.reactor.tcpClients), 1)  # nothing more dispatched

    def test_close_that_never_completes_is_aborted(self) -> None:
        """An orderly close still going after CLOSE_GRACE is aborted by the watchdog."""
        from gateway.net.pipe import CLOSE_GRACE

        self.send(get(b"/ping", extra=b"Connection: close\r\n"))
        self.assertTrue(self.client.disconnecting)
        self.reactor.advance(CLOSE_GRACE - 1)
        self.assertFalse(self.client.aborted)
        self.reactor.advance(2)
        self.assertTrue(self.client.aborted)


class GiveUpTests(Http1TestCase):
    def test_broken_body_in_the_first_read_then_next_request(self) -> None:
        """The upstream's head and an unparseable body arrive in one read: the client
        gets 502, and the next request on the connection is served (the held-back
        response's flow no longer stays registered on the client transport)."""
        self.send(get(b"/api/a"))
        upstream = self.upstream()
        upstream.respond(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        self.assertEqual(self.answer().status, 502)
        self.assertIsNone(self.client.producer)
        self.send(get(b"/api/b"))
        second = self.upstream()
        self.assertTrue(second.received().startswith(b"GET /backend/b HTTP/1.1\r\n"))
        second.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        self.assertEqual(self.answer().body, b"ok")
