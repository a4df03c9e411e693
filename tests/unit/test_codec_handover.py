"""What crosses from a codec into an exchange: a ``RequestHead``, the connection's
``ConnectionFacts``, the body, and nothing else (``exchange/head.py``).

The codecs used to fill the exchange in field by field (40 assignments to 19 fields);
these tests hold that they hand over values instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.codecs.http1_head import read_head
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.head import BODY_CHUNKED, BODY_LENGTH, RequestHead, request_head
from gateway.dataplane.http2.head import read_head as read_h2_head
from gateway.dataplane.routing.plan import build_plan
from gateway.observability.tracing.tracer import Tracer

from .config.helpers import base_config, load

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
CODECS = ("dataplane/codecs/http1.py", "dataplane/codecs/http1_head.py",
          "dataplane/http2/connection.py", "dataplane/http2/head.py",
          "dataplane/http2/stream.py")


def exchange_writes(source: str) -> list[str]:
    """``name.field = ...`` (or ``+=``) in ``source`` where ``name`` holds an exchange
    by the codecs' naming (``exchange``, ``current``, ``earlier``, ``head``, or
    ``stream.exchange``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if not isinstance(one, ast.Attribute):
                    continue
                owner = one.value
                named = owner.id if isinstance(owner, ast.Name) else \
                    owner.attr if isinstance(owner, ast.Attribute) else ""
                if named in ("exchange", "current", "earlier", "head"):
                    found.append(f"{ast.unparse(one)} (line {node.lineno})")
    return found


class NoFieldWritesTests(SynchronousTestCase):
    def test_the_codecs_write_no_exchange_field(self) -> None:
        for name in CODECS:
            with self.subTest(name):
                source = (GATEWAY / name).read_text()
                self.assertEqual(exchange_writes(source), [], name)

    def test_the_check_sees_a_write(self) -> None:
        self.assertEqual(exchange_writes("exchange.host = 'x'\ncurrent.detail += 'y'\n"
                                         "(exchange.path, a) = f()\n"),
                         ["exchange.host (line 1)", "current.detail (line 2)",
                          "exchange.path (line 3)"])


class Http1HandoverTests(SynchronousTestCase):
    """The HTTP/1.1 codec's head, as the exchange gets it."""

    def setUp(self) -> None:
        snapshot = load(base_config(insecure_server=True, policy=[
            {"from": "http://app.example.com", "to": "http://127.0.0.1:9000",
             "allow_public_unauthenticated_access": True}]))
        self.core = ProxyCore(MemoryReactorClock(), build_plan(snapshot), tls=False)
        self.conn = Http1Connection(self.core)
        self.conn.makeConnection(StringTransport(peerAddress=IPv4Address(
            "TCP", "192.0.2.5", 4000)))

    def head_of(self, request: bytes) -> RequestHead:
        self.conn.dataReceived(request)
        exchange = self.conn.queue[0] if self.conn.queue else self.conn.current
        assert exchange is not None
        return exchange.head

    def test_a_chunked_upload(self) -> None:
        head = self.head_of(b"POST /a;v=1?q=1 HTTP/1.1\r\nHost: App.example.com\r\n"
                            b"Transfer-Encoding: chunked\r\nX-Request-Id: id-1\r\n\r\n")
        self.assertEqual((head.method, head.target, head.version, head.host, head.path,
                          head.path_parameters, head.query, head.framing, head.complete,
                          head.keep_alive, head.request_id),
                         (b"POST", b"/a;v=1?q=1", b"1.1", "app.example.com", "/a", ";v=1",
                          b"?q=1", BODY_CHUNKED, False, True, b"id-1"))
        self.assertEqual(self.conn.facts.peer if self.conn.facts else "", "192.0.2.5")

    def test_a_sized_upload_that_closes(self) -> None:
        head = self.head_of(b"PUT / HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 3\r\n"
                            b"Connection: close\r\nExpect: 100-continue\r\n\r\n")
        self.assertEqual((head.framing, head.complete, head.keep_alive, head.expect_continue,
                          head.connection_tokens),
                         (BODY_LENGTH, False, False, True, frozenset({b"close"})))

    def test_a_traced_request_finds_its_caller_in_the_head(self) -> None:
        """What the exchange's readers (the tracer here) read of the request is the
        head's: a traceparent the codec flagged is the trace's parent. (The tracer read
        a flag the exchange no longer had, and every traced request was answered 500;
        a fake exchange in its own tests hid it.)"""
        provider = TracerProvider(shutdown_on_exit=False)
        self.core.tracer = Tracer(provider.get_tracer("test"), 0.0)
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        self.conn.dataReceived(b"GET / HTTP/1.1\r\nHost: app.example.com\r\n"
                               b"traceparent: 00-" + trace.encode() +
                               b"-00f067aa0ba902b7-01\r\n\r\n")
        exchange = self.conn.queue[0] if self.conn.queue else self.conn.current
        assert exchange is not None
        self.assertTrue(exchange.head.trace_context)
        self.assertEqual((exchange.trace_id, exchange.status), (trace, 0))
        self.assertIsNotNone(exchange.trace)


def unset_slots(head: RequestHead) -> list[str]:
    return [name for name in RequestHead.__slots__ if not hasattr(head, name)]


class EverySlotSetTests(SynchronousTestCase):
    """The codecs fill a bare ``RequestHead()`` slot by slot for every request (a Python
    ``__init__`` of seventeen fields cost 0.18 µs a request); a slot left out would fail
    only where it is read."""

    def test_the_http1_head_has_every_slot(self) -> None:
        head = read_head(b"GET", b"/a;v=1?q=1", [(b"Host", b"App.example.com")])
        self.assertEqual((head.host, head.path, head.path_parameters, head.query),
                         ("app.example.com", "/a", ";v=1", b"?q=1"))
        self.assertEqual(unset_slots(head), [])

    def test_the_http2_head_has_every_slot(self) -> None:
        head, problem = read_h2_head(
            [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a?q=1"),
             (b":authority", b"app.example.com")], True, False)
        self.assertEqual((problem, head.path, head.query), ("", "/a", b"?q=1"))
        self.assertEqual(unset_slots(head), [])

    def test_the_check_sees_an_unset_slot(self) -> None:
        self.assertIn("method", unset_slots(RequestHead()))
        self.assertEqual(unset_slots(request_head(b"GET", b"/", b"1.1", [])), [])
