"""A body of unknown length is framed where the wire is spoken: by the client's HTTP/1.1
sink for a response, by ``UpstreamConnection`` for an upload; the exchange only says how
the body is delimited (``head.BODY_*``)."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.head import BODY_CHUNKED, BODY_LENGTH, BODY_NONE
from gateway.dataplane.routing.plan import build_plan
from gateway.dataplane.upstream.http1_client import UpstreamConnection

from .config.helpers import base_config, load


class Http1ResponseFramingTests(SynchronousTestCase):
    def setUp(self) -> None:
        snapshot = load(base_config(insecure_server=True, policy=[
            {"from": "http://app.example.com", "to": "http://127.0.0.1:9000",
             "allow_public_unauthenticated_access": True}]))
        self.conn = Http1Connection(ProxyCore(MemoryReactorClock(), build_plan(snapshot),
                                              tls=False))
        self.transport = StringTransport()
        self.conn.makeConnection(self.transport)

    def test_unknown_length_is_chunked_then_the_next_response_is_not(self) -> None:
        self.conn.write_head(200, b"", [(b"a", b"1")], BODY_CHUNKED, False, b"hi")
        self.conn.write_body(b"there")
        self.conn.end_body()
        self.assertEqual(self.transport.value(),
                         b"HTTP/1.1 200 OK\r\na: 1\r\ntransfer-encoding: chunked\r\n\r\n"
                         b"2\r\nhi\r\n5\r\nthere\r\n0\r\n\r\n")
        self.transport.clear()
        self.conn.write_head(200, b"", [(b"content-length", b"2")], BODY_LENGTH, False)
        self.conn.write_body(b"ok")
        self.conn.end_body()
        self.assertEqual(self.transport.value(),
                         b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    def test_no_body(self) -> None:
        self.conn.write_head(204, b"", [], BODY_NONE, True)
        self.conn.end_body()
        self.assertEqual(self.transport.value(),
                         b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")


class UpstreamUploadFramingTests(SynchronousTestCase):
    def connection(self) -> tuple[UpstreamConnection, StringTransport]:
        conn = UpstreamConnection(SimpleNamespace(), None)  # type: ignore[arg-type]
        transport = StringTransport()
        conn.makeConnection(transport)
        return conn, transport

    def test_a_chunked_upload(self) -> None:
        conn, transport = self.connection()
        conn.send(object(), b"POST / HTTP/1.1\r\nhost: a\r\n\r\n", False,  # type: ignore[arg-type]
                  chunked=True)
        conn.write_body(b"abc")
        conn.end_body()
        self.assertEqual(transport.value(),
                         b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n"
                         b"3\r\nabc\r\n0\r\n\r\n")

    def test_a_sized_upload_is_sent_as_it_comes(self) -> None:
        conn, transport = self.connection()
        conn.send(object(), b"PUT / HTTP/1.1\r\ncontent-length: 3\r\n\r\n",  # type: ignore[arg-type]
                  False)
        conn.write_body(b"abc")
        conn.end_body()
        self.assertEqual(transport.value(),
                         b"PUT / HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc")
