"""The tunnel request on the wire and the parsing of the gateway's answer: the CONNECT
bytes, the answer's head (in any split), the bytes after it, error bodies, and the
gateway connection protocol over an in-memory transport."""

from __future__ import annotations

import json

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway import __version__
from gateway.cli.tcp.dial import GatewayConnection
from gateway.cli.tcp.wire import (
    MAX_BODY,
    BadResponse,
    Refused,
    ResponseHead,
    connect_request,
    error_detail,
)

OK = b"HTTP/1.1 200 Connection established\r\n\r\n"


class ConnectRequestTests(SynchronousTestCase):
    def test_without_token(self) -> None:
        self.assertEqual(
            connect_request("db.example.com:5432", None),
            b"CONNECT db.example.com:5432 HTTP/1.1\r\n"
            b"Host: db.example.com:5432\r\n"
            b"Accept: application/json\r\n"
            b"User-Agent: gateway-tcp/" + __version__.encode() + b"\r\n\r\n")

    def test_with_token(self) -> None:
        request = connect_request("[::1]:22", "tok.en-_")
        self.assertTrue(request.startswith(
            b"CONNECT [::1]:22 HTTP/1.1\r\nHost: [::1]:22\r\n"
            b"Authorization: Gateway tok.en-_\r\n"))
        self.assertTrue(request.endswith(b"\r\n\r\n"))
        self.assertEqual(request.count(b"\r\n\r\n"), 1)


class ResponseHeadTests(SynchronousTestCase):
    def test_bytes_after_the_head_are_kept(self) -> None:
        head = ResponseHead()
        self.assertTrue(head.feed(OK + b"SSH-2.0-OpenSSH_9.2\r\n"))
        self.assertEqual((head.status, head.reason), (200, "Connection established"))
        self.assertEqual(head.rest, b"SSH-2.0-OpenSSH_9.2\r\n")

    def test_any_split(self) -> None:
        data = (b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\n\r\n{}")
        for cut in range(1, len(data)):
            with self.subTest(cut=cut):
                head = ResponseHead()
                done = head.feed(data[:cut])
                done = head.feed(data[cut:]) or done
                self.assertTrue(done)
                self.assertEqual(head.status, 403)
                self.assertEqual(head.header("content-type"), "application/json")
                self.assertEqual(head.body_length(), 2)
                self.assertEqual(head.rest, b"{}")

    def test_not_http(self) -> None:
        for data in (b"SSH-2.0-OpenSSH\r\n", b"\x15\x03\x01\x00\x02\x02\x46",
                     b"HTTP/1.1 2000 OK\r\n\r\n", b"HTTP/2 200\r\n\r\n",
                     b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"):
            with self.subTest(data=data), self.assertRaises(BadResponse):
                ResponseHead().feed(data)

    def test_head_too_long(self) -> None:
        head = ResponseHead()
        head.feed(b"HTTP/1.1 200 OK\r\n")
        with self.assertRaises(BadResponse):
            head.feed(b"X-Long: " + b"a" * 70000)


class ErrorDetailTests(SynchronousTestCase):
    def test_json(self) -> None:
        body = json.dumps({"status": 404, "error": "no TCP route for db:1"}).encode()
        self.assertEqual(error_detail(body, "application/json"), "no TCP route for db:1")

    def test_text_first_line_printable_and_short(self) -> None:
        self.assertEqual(error_detail(b"403 Forbidden: go away\nmore", "text/plain"),
                         "403 Forbidden: go away")
        self.assertEqual(error_detail(b"bad\x1b[31mred", None), "bad [31mred")
        self.assertEqual(len(error_detail(b"x" * 1000, None)), 300)

    def test_bad_json_falls_back_to_text(self) -> None:
        self.assertEqual(error_detail(b"{oops", "application/json"), "{oops")


class GatewayConnectionTests(SynchronousTestCase):
    def connect(self) -> tuple[GatewayConnection, StringTransport, list[object]]:
        protocol = GatewayConnection(b"CONNECT x:1 HTTP/1.1\r\n\r\n")
        transport = StringTransport()
        protocol.makeConnection(transport)
        results: list[object] = []
        protocol.answered.addBoth(results.append)
        return protocol, transport, results

    def test_sends_the_request_on_connect(self) -> None:
        _, transport, _ = self.connect()
        self.assertEqual(transport.value(), b"CONNECT x:1 HTTP/1.1\r\n\r\n")

    def test_established_is_paused_and_keeps_early_bytes(self) -> None:
        protocol, transport, results = self.connect()
        protocol.dataReceived(OK[:10])
        self.assertEqual(results, [])
        protocol.dataReceived(OK[10:] + b"first")
        protocol.dataReceived(b"second")
        self.assertEqual(results, [protocol])
        self.assertEqual(transport.producerState, "paused")
        self.assertEqual(protocol.early, [b"first", b"second"])

    def test_refused_with_content_length(self) -> None:
        protocol, transport, results = self.connect()
        body = json.dumps({"status": 403, "error": "not you"}).encode()
        protocol.dataReceived(b"HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\n"
                              b"content-length: %d\r\n\r\n" % len(body) + body[:5])
        self.assertEqual(results, [])
        protocol.dataReceived(body[5:])
        self.assertEqual(results, [Refused(403, "not you")])
        self.assertTrue(transport.disconnecting)

    def test_refused_body_until_close(self) -> None:
        protocol, _, results = self.connect()
        protocol.dataReceived(b"HTTP/1.1 503 Service Unavailable\r\n\r\ndown")
        protocol.readConnectionLost()
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(results, [Refused(503, "down")])

    def test_refused_body_is_bounded(self) -> None:
        protocol, transport, results = self.connect()
        protocol.dataReceived(b"HTTP/1.1 500 Oops\r\n\r\n" + b"x" * (MAX_BODY + 10))
        self.assertEqual(len(protocol.body), MAX_BODY)
        self.assertEqual(len(results), 1)
        self.assertTrue(transport.disconnecting)

    def test_not_http_fails_and_aborts(self) -> None:
        protocol, transport, results = self.connect()
        protocol.dataReceived(b"SSH-2.0-OpenSSH_9.2\r\n")
        self.assertTrue(transport.disconnecting)
        failure = results[0]
        assert isinstance(failure, Failure)
        self.assertTrue(failure.check(BadResponse))

    def test_closed_without_answer(self) -> None:
        protocol, _, results = self.connect()
        protocol.connectionLost(Failure(ConnectionLost()))
        failure = results[0]
        assert isinstance(failure, Failure)
        self.assertTrue(failure.check(ConnectionLost))

    def test_cancel_aborts(self) -> None:
        protocol, transport, results = self.connect()
        protocol.answered.cancel()
        self.assertTrue(transport.disconnecting)
        self.assertEqual(len(results), 1)
