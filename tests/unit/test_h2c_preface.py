"""A plain-text ``codec_type: auto`` listener: first bytes that are neither the HTTP/2
preface nor an HTTP/1 request line are a failed HTTP/2 preface (RFC 9113 3.4: a
connection error PROTOCOL_ERROR), answered with SETTINGS and GOAWAY and closed, while
every HTTP/1 request line goes to the HTTP/1.1 codec as before, with the same deadlines.

Regression (issue 28, h2spec ``http2/3.5/2`` on h2c): the switch handed every first
bytes that were not the exact preface to the HTTP/1.1 codec, so ``INVALID CONNECTION
PREFACE`` (and ``PRI * HTTP/2.0`` with a broken rest) got an HTTP/1.1 400, which an
HTTP/2 client reads as a frame of 4.7 MB."""

from __future__ import annotations

from typing import Any

from hyperframe.frame import GoAwayFrame, SettingsFrame
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.http1 import MAX_TARGET, Http1Connection
from gateway.dataplane.codecs.switch import HTTP1, NOT_HTTP1, ProtocolSwitch, first_line
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.http2.protocol import PREFACE, ErrorCode
from gateway.dataplane.routing.plan import build_plan
from gateway.net.pipe import CLOSE_GRACE
from tests.support import h2frames as f

from .test_connection_setup import CLIENT, TICK
from .test_http1 import SNAPSHOT  # timeout_read 3 s, timeout_idle 5 s

H2SPEC_3_5_2 = b"INVALID CONNECTION PREFACE\r\n\r\n"
PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


class FirstLineTests(SynchronousTestCase):
    def test_http1_request_lines(self) -> None:
        """Every request line that names HTTP/ stays HTTP/1, however malformed
        otherwise (the codec answers it: 400, 414, 426), and so does HTTP/0.9's."""
        for line in (b"GET / HTTP/1.1\r\n", b"OPTIONS * HTTP/1.1\r\n",
                     b"CONNECT db.test:5432 HTTP/1.1\r\n", b"GET http://a.test/x HTTP/1.1\r\n",
                     b"M-SEARCH * HTTP/1.1\r\n", b"GET / HTTP/1.0\r\n", b"GET / HTTP/2.0\r\n",
                     b"get / HTTP/1.1\r\n", b"FOO / HTTP/1.1\r\n", b"GET /a b HTTP/1.1\r\n",
                     b"GET\t/\tHTTP/1.1\r\n", b"GET / HTTP/1.1 \r\n", b"GET  / HTTP/1.1\r\n",
                     b"GET / HTTP/", b"\r\nGET / HTTP/1.1\r\n", b"\n", b"GET /\r\n",
                     b"GET /\n", b"GET /\xff\r\n", b"PRIX / HTTP/1.1\r\n"):
            self.assertEqual(first_line(line), HTTP1, line)

    def test_neither(self) -> None:
        for line in (H2SPEC_3_5_2, b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", b"PRI / HTTP/1.1\r\n",
                     b"PRI ", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                     b"SSH-2.0-OpenSSH_9.2\r\n", b"GET\r\n", b"GET / FOO\r\n",
                     b"GET  \r\n", b"{\"json\": 1}\r\n", b"\x00\x00\x12\x04"):
            self.assertEqual(first_line(line), NOT_HTTP1, line)

    def test_not_known_yet(self) -> None:
        for part in (b"G", b"GET", b"GET ", b"GET /", b"GET / HT", b"GET /a b",
                     b"INVALID CONNECTION PREFACE"):
            self.assertIsNone(first_line(part), part)


class SwitchTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        self.client = StringTransport(peerAddress=CLIENT)
        self.switch = ProtocolSwitch(self.core, "auto", tls=False)
        self.switch.makeConnection(self.client)

    def wait(self, seconds: float) -> None:
        for _ in range(round(seconds / TICK)):
            self.reactor.advance(TICK)

    def codec(self) -> Any:
        """What the transport delivers to now: the switch, or the codec it became."""
        return getattr(self.client, "protocol", self.switch)

    def deliver(self, data: bytes) -> None:
        self.codec().dataReceived(data)

    def assert_failed_preface(self) -> None:
        frames = f.parse(bytearray(self.client.value()))
        self.assertEqual([type(x) for x in frames], [SettingsFrame, GoAwayFrame])
        goaway = frames[1]
        assert isinstance(goaway, GoAwayFrame)
        self.assertEqual((goaway.error_code, goaway.last_stream_id),
                         (ErrorCode.PROTOCOL_ERROR, 0))
        self.assertTrue(self.client.disconnecting)
        self.assertNotIsInstance(self.codec(), (Http1Connection, H2Connection))
        self.assertEqual(len(self.core.penalties), 0)  # no strike: see ProtocolSwitch._refuse

    def test_h2spec_invalid_preface(self) -> None:
        self.deliver(H2SPEC_3_5_2)
        self.assert_failed_preface()
        self.assertFalse(self.client.value().startswith(b"HTTP/"))

    def test_pri_request_line_with_a_broken_rest(self) -> None:
        self.deliver(b"PRI * HTTP/2.0\r\n\r\n")
        self.assertEqual(self.client.value(), b"")  # a prefix of the preface: waits
        self.deliver(b"XX\r\n\r\n")
        self.assert_failed_preface()

    def test_line_in_pieces_then_refused_and_nothing_more_read(self) -> None:
        self.deliver(b"INVALID ")
        self.deliver(b"CONNECTION PREFACE")
        self.assertEqual(self.client.value(), b"")
        self.deliver(b"\r\n\r\n")
        self.assert_failed_preface()
        written = self.client.value()
        self.deliver(PING)
        self.assertEqual(self.client.value(), written)

    def test_refused_close_is_bounded(self) -> None:
        """A client that never reads what was written: aborted after CLOSE_GRACE."""
        self.deliver(H2SPEC_3_5_2)
        self.assertFalse(self.client.disconnected)
        self.wait(CLOSE_GRACE + 2 * TICK)
        self.assertTrue(self.client.disconnected)
        self.assertNotIn(self.switch, self.core.connections)

    def test_preface_in_pieces_is_http2(self) -> None:
        self.deliver(PREFACE[:5])
        self.deliver(PREFACE[5:] + f.settings())
        self.assertIsInstance(self.codec(), H2Connection)

    def test_http1_request_in_one_read(self) -> None:
        self.deliver(PING)
        self.assertIsInstance(self.codec(), Http1Connection)
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 200"))

    def test_http1_request_byte_by_byte(self) -> None:
        for byte in PING:
            self.deliver(bytes([byte]))
            self.assertFalse(self.client.disconnecting)
        self.assertIsInstance(self.codec(), Http1Connection)
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 200"))

    def test_bad_http1_request_still_400(self) -> None:
        self.deliver(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 400"))

    def test_read_deadline_runs_from_the_first_byte(self) -> None:
        """A request line trickling in waits in the switch, but the 408 comes when the
        codec's would have: timeout_read (3 s) after the line's first bytes, however
        the rest arrives."""
        self.deliver(b"GET /pi")
        self.wait(2.0)
        self.deliver(b"ng HTTP/1.1\r\nHost: x\r\n")  # decided; head unfinished
        self.assertIsInstance(self.codec(), Http1Connection)
        self.wait(0.75)
        self.assertEqual(self.client.value(), b"")
        self.wait(0.5)
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 408"))

    def test_read_deadline_while_the_line_is_undecided(self) -> None:
        self.deliver(b"GET /pi")
        self.wait(2.75)
        self.assertEqual(self.client.value(), b"")
        self.assertFalse(self.client.disconnecting)
        self.wait(0.5)
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 408"))
        self.assertIsInstance(self.codec(), Http1Connection)

    def test_long_target_still_414(self) -> None:
        """A target past MAX_TARGET is not waited on for ever: the codec gets it and
        answers 414 as it did."""
        self.deliver(b"GET /" + b"a" * MAX_TARGET)
        self.assertTrue(self.client.value().startswith(b"HTTP/1.1 414"))

    def test_http1_codec_type_unchanged(self) -> None:
        """codec_type http1 never tells the two apart: HTTP/1.1 whatever the bytes."""
        switch = ProtocolSwitch(self.core, "http1", tls=False)
        client = StringTransport(peerAddress=CLIENT)
        switch.makeConnection(client)
        switch.dataReceived(H2SPEC_3_5_2)
        self.assertTrue(client.value().startswith(b"HTTP/1.1 400"))
