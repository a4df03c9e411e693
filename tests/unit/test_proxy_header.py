"""PROXY protocol headers: v1 and v2, split anywhere, LOCAL, and everything refused."""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.listeners.proxyproto import ProxyHeaderFactory
from gateway.wire.proxyheader import (
    MAX_V2_BLOCK,
    V2_SIGNATURE,
    BadProxyHeader,
    ProxyHeader,
    read_header,
)

V1 = b"PROXY TCP4 203.0.113.9 192.0.2.1 5555 443\r\n"


def v2(command: int = 1, family: int = 0x11, block: bytes | None = None) -> bytes:
    if block is None:
        block = bytes([203, 0, 113, 9, 192, 0, 2, 1]) + struct.pack("!HH", 5555, 443)
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(block)) + block


class ReadHeaderTests(SynchronousTestCase):
    def assertSplitsAnywhere(self, header: bytes, expected: ProxyHeader) -> None:
        """Every prefix waits; the whole header (plus request bytes) is read."""
        for cut in range(len(header)):
            self.assertIsNone(read_header(header[:cut]), cut)
        self.assertEqual(read_header(header + b"GET /"), (expected, len(header)))

    def test_v1(self) -> None:
        self.assertSplitsAnywhere(V1, ProxyHeader(("203.0.113.9", 5555), ("192.0.2.1", 443), 1))
        tcp6 = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n"
        self.assertSplitsAnywhere(tcp6, ProxyHeader(("2001:db8::1", 1), ("2001:db8::2", 65535), 1))

    def test_v1_unknown_keeps_real_peer(self) -> None:
        self.assertSplitsAnywhere(b"PROXY UNKNOWN\r\n", ProxyHeader(None, None, 1))
        self.assertEqual(read_header(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"),
                         (ProxyHeader(None, None, 1), 35))

    def test_v2(self) -> None:
        self.assertSplitsAnywhere(v2(), ProxyHeader(("203.0.113.9", 5555), ("192.0.2.1", 443), 2))
        block6 = bytes(15) + b"\x01" + bytes(15) + b"\x02" + struct.pack("!HH", 7, 8)
        self.assertSplitsAnywhere(v2(family=0x21, block=block6),
                                  ProxyHeader(("::1", 7), ("::2", 8), 2))

    def test_v2_tlvs_skipped(self) -> None:
        header = v2(block=v2()[16:] + b"\x04\x00\x03abc")
        found = read_header(header + b"rest")
        assert found is not None
        self.assertEqual(found[1], len(header))
        self.assertEqual(found[0].source, ("203.0.113.9", 5555))

    def test_v2_local_and_unusable_families_keep_real_peer(self) -> None:
        """LOCAL (a proxy's own health check) with any block, UNSPEC and UNIX
        families: the real connection's addresses stand, the block is skipped."""
        for header in (v2(command=0), v2(command=0, family=0x00, block=b""),
                       v2(family=0x00, block=b"\x00" * 5), v2(family=0x31, block=bytes(216)),
                       v2(family=0x10)):
            self.assertEqual(read_header(header), (ProxyHeader(None, None, 2), len(header)))

    def test_refused(self) -> None:
        bad = [
            b"GET / HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00", b"PROXYZ", b"proxy tcp4",
            b"PROXY TCP4 203.0.113.9 192.0.2.1 5555\r\n",  # a field missing
            b"PROXY TCP4 203.0.113.9 192.0.2.1 5555 443 extra\r\n",
            b"PROXY TCP4 evil<script> 192.0.2.1 5555 443\r\n",  # not an IP literal
            b"PROXY TCP4 2001:db8::1 192.0.2.1 5555 443\r\n",  # wrong family
            b"PROXY TCP4 203.0.113.9 192.0.2.1 +555 443\r\n",
            b"PROXY TCP4 203.0.113.9 192.0.2.1 65536 443\r\n",
            b"PROXY TCP4 203.0.113.9 192.0.2.1 0555 443\r\n",
            b"PROXY TCP5 203.0.113.9 192.0.2.1 5555 443\r\n",
            b"PROXY TCP4 203.0.113.9 192.0.2.1 5555 443\n",  # bare LF
            b"PROXY " + b"1" * 120,  # no CRLF within 107 bytes
            V2_SIGNATURE + b"\x31\x11\x00\x0c",  # version 3
            V2_SIGNATURE + b"\x22\x11\x00\x0c",  # command 2
            V2_SIGNATURE + b"\x21\x41\x00\x0c",  # family 4
            V2_SIGNATURE + b"\x21\x13\x00\x0c",  # protocol 3
            V2_SIGNATURE + b"\x21\x11" + struct.pack("!H", MAX_V2_BLOCK + 1),  # oversized
            v2(block=b"\x01\x02\x03\x04"),  # too short for AF_INET
        ]
        for data in bad:
            with self.assertRaises(BadProxyHeader, msg=repr(data)):
                read_header(data)


class _Recorder(Protocol):
    def __init__(self) -> None:
        self.data = b""

    def dataReceived(self, data: bytes) -> None:
        self.data += data


class WrapperTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.inner = _Recorder()
        self.factory = ProxyHeaderFactory(Factory.forProtocol(lambda: self.inner))
        self.wrapper = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.5", 4000))
        self.wrapper.makeConnection(self.transport)

    def test_header_in_pieces_then_data(self) -> None:
        for byte in range(len(V1)):
            self.wrapper.dataReceived(V1[byte:byte + 1])
            self.assertEqual(self.inner.data, b"")
        self.wrapper.dataReceived(b"GET /")
        self.assertEqual(self.inner.data, b"GET /")
        self.assertFalse(self.wrapper.header_pending)
        self.assertEqual(self.wrapper.getPeer(), IPv4Address("TCP", "203.0.113.9", 5555))
        self.assertEqual(self.wrapper.getHost(), IPv4Address("TCP", "192.0.2.1", 443))

    def test_local_keeps_real_peer(self) -> None:
        self.wrapper.dataReceived(v2(command=0) + b"GET /")
        self.assertEqual(self.inner.data, b"GET /")
        self.assertEqual(self.wrapper.getPeer(), IPv4Address("TCP", "10.0.0.5", 4000))

    def test_garbage_aborts(self) -> None:
        self.wrapper.dataReceived(b"GET / HTTP/1.1\r\n")
        self.assertTrue(self.transport.disconnected)
        self.assertEqual(self.inner.data, b"")
