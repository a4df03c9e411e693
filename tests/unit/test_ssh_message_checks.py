"""Hostile SSH messages end in a protocol-error disconnect and one info line (issue 39):
channel messages for channels that are not open, short packets, replies to nothing,
transport messages Conch cannot parse; and a refused server host key is answered with
a fixed reason. In memory: the raw test client against the gateway's server transport,
and the gateway's upstream client against a server transport."""

from __future__ import annotations

import struct
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.ssh import keys
from twisted.conch.ssh.common import NS
from twisted.conch.ssh.transport import (
    DISCONNECT_PROTOCOL_ERROR,
    DISCONNECT_SERVICE_NOT_AVAILABLE,
)
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.metrics import REGISTRY
from gateway.ssh.auth import GatewayUserAuth
from gateway.ssh.certs import Issued
from gateway.ssh.message_checks import State, fault
from gateway.ssh.transport import GatewayFactory
from gateway.ssh.upstream import (
    HOST_KEY_REFUSED,
    CertificateAuth,
    UpstreamConnection,
    UpstreamTransport,
    pinned_check,
)
from tests.fuzz.fuzz_ssh_preauth import Gate
from tests.support import ssh_raw as raw

HOST_KEY = keys.Key(ed25519.Ed25519PrivateKey.generate())
CLIENT_KEY = keys.Key(ed25519.Ed25519PrivateKey.generate())
ADDRESS = IPv4Address("TCP", "127.0.0.1", 40000)


def states(table: dict[int, State]) -> Any:
    return lambda channel: table.get(channel, State.UNKNOWN)


class FaultTests(SynchronousTestCase):
    def test_each_channel_message_needs_its_channel_state(self) -> None:
        table = states({0: State.OPEN, 1: State.PENDING, 2: State.CLOSED})
        for kind, make in raw.CHANNEL_MESSAGES.items():
            needs = 1 if kind.startswith("open_") else 0
            number, packet = make(needs)
            self.assertIsNone(fault(number, packet, table, 0), kind)
            for other in {0, 1, 2, 7} - {needs}:
                number, packet = make(other)
                why = fault(number, packet, table, 0)
                assert why is not None, (kind, other)
                self.assertIn(f"for channel {other}, which is", why)

    def test_short_packets_and_replies_to_nothing(self) -> None:
        table = states({0: State.OPEN, 1: State.PENDING})
        # where the fields Conch reads end (a request's own data, an open failure's
        # language tag: not read there)
        read = {"request": 4 + 4 + 3 + 1, "open_failure": 8 + 4 + 2}
        for kind, make in raw.CHANNEL_MESSAGES.items():
            number, packet = make(1 if kind.startswith("open_") else 0)
            for cut in range(read.get(kind, len(packet))):
                why = fault(number, packet[:cut], table, 0)
                assert why is not None and "cut short" in why, (kind, cut)
        self.assertEqual(fault(raw.REQUEST_SUCCESS, b"", table, 0),
                         "a reply to no global request")
        self.assertIsNone(fault(raw.REQUEST_FAILURE, b"", table, 1))
        self.assertIn("cut short", fault(raw.GLOBAL_REQUEST, NS(b"x"), table, 0) or "")
        self.assertIn("cut short", fault(raw.CHANNEL_OPEN, NS(b"session") + b"\x00" * 11,
                                         table, 0) or "")


def strikes() -> float:
    return REGISTRY.get_sample_value("gateway_ssh_strikes_total",
                                     {"rule": "protocol_error"}) or 0.0


class Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def lines(self, text: str) -> list[dict[str, Any]]:
        return [e for e in self.events if text in str(e.get("log_format", ""))]


class ServerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events = Events()
        globalLogPublisher.addObserver(self.events)
        self.addCleanup(globalLogPublisher.removeObserver, self.events)
        self.gate = Gate(bound="session")
        factory = GatewayFactory(MemoryReactorClock(), [HOST_KEY],
                                 lambda ssh: GatewayUserAuth(ssh, self.gate))
        self.server: Any = factory.buildProtocol(ADDRESS)
        self.link = raw.MemoryLink(self.server, StringTransport(peerAddress=ADDRESS))

    def authenticate(self) -> None:
        self.link.send(raw.SERVICE_REQUEST, NS(b"ssh-userauth"))
        self.link.send(raw.USERAUTH_REQUEST,
                       raw.publickey(b"root@db", CLIENT_KEY, self.link.client.session_id))
        self.assertIn(raw.USERAUTH_SUCCESS, [k for k, _ in self.link.client.received])

    def assert_protocol_error(self, said: str) -> None:
        self.assertEqual(self.link.client.disconnect,
                         (DISCONNECT_PROTOCOL_ERROR, b"protocol error: " + said.encode()))
        self.assertTrue(self.link.server_wire.disconnecting)
        lines = self.events.lines("disconnected (protocol error)")
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0]["why"], said)
        self.assertEqual(lines[0]["log_level"].name, "info")
        self.assertEqual([e for e in self.events.events if e.get("log_failure")], [])
        # nothing more is read once disconnected
        self.link.client.send(raw.CHANNEL_DATA, struct.pack(">L", 9) + NS(b"x"))
        self.link.server.dataReceived(self.link.out.take())
        self.assertEqual(len(self.events.lines("disconnected (protocol error)")), 1)

    def test_channel_message_for_an_unknown_channel(self) -> None:
        """Without the check each raised KeyError out of dataReceived."""
        self.authenticate()
        self.link.send(*raw.CHANNEL_MESSAGES["window_adjust"](7))
        self.assert_protocol_error("a CHANNEL_WINDOW_ADJUST for channel 7, which is not open")

    def test_open_confirmation_for_a_channel_the_client_opened(self) -> None:
        """The gateway opens no channel toward a person: a confirmation naming one of
        the person's own channels would have reopened it in Conch."""
        self.authenticate()
        self.link.send(raw.CHANNEL_OPEN, raw.channel_open(b"session", 0))
        self.link.send(*raw.CHANNEL_MESSAGES["open_confirmation"](0))
        self.assert_protocol_error("a CHANNEL_OPEN_CONFIRMATION for channel 0, "
                                   "which is not open")

    def test_short_channel_data(self) -> None:
        self.authenticate()
        self.link.send(raw.CHANNEL_DATA, b"\x00\x00")
        self.assert_protocol_error("a CHANNEL_DATA cut short")

    def test_global_reply_to_nothing(self) -> None:
        """Conch popped from an empty list: IndexError."""
        self.authenticate()
        self.link.send(raw.REQUEST_SUCCESS, b"")
        self.assert_protocol_error("a reply to no global request")

    def test_short_debug_before_authentication(self) -> None:
        self.link.send(4, b"\x01")  # MSG_DEBUG: always_display, then two strings
        self.assert_protocol_error("a malformed DEBUG (error)")

    def test_key_exchange_message_outside_a_key_exchange(self) -> None:
        """Conch's handler read the group of an exchange that never started."""
        self.link.send(32, NS(b"\x05"))  # KEX_DH_GEX_INIT
        self.assert_protocol_error("a KEX_DH_GEX_INIT outside a key exchange")

    def test_a_protocol_error_is_a_strike_against_the_address(self) -> None:
        """Issue 39: a client that keeps breaking the protocol is penalised like one
        that keeps failing authentication (each connection cost the server a key
        exchange); before, the cut was the only consequence."""
        before = strikes()
        self.link.send(4, b"\x01")
        self.assert_protocol_error("a malformed DEBUG (error)")
        self.assertEqual(strikes(), before + 1)

    def test_a_signed_in_persons_protocol_error_is_no_strike(self) -> None:
        self.authenticate()
        before = strikes()
        self.link.send(*raw.CHANNEL_MESSAGES["window_adjust"](7))
        self.assert_protocol_error("a CHANNEL_WINDOW_ADJUST for channel 7, which is not open")
        self.assertEqual(strikes(), before)

    def test_a_second_userauth_service_is_refused(self) -> None:
        """A second SERVICE_REQUEST for ssh-userauth made a fresh service: its failed
        attempts and its pending sign-in forgotten, so the one-sign-in-per-connection
        bound and the failure limit were reset at will (found by the ssh_preauth fuzz
        target once it asserted one sign-in per connection)."""
        before = REGISTRY.get_sample_value("gateway_ssh_strikes_total",
                                           {"rule": "service_again"}) or 0.0
        self.link.send(raw.SERVICE_REQUEST, NS(b"ssh-userauth"))
        self.assertIn(raw.SERVICE_ACCEPT, [k for k, _ in self.link.client.received])
        self.link.send(raw.SERVICE_REQUEST, NS(b"ssh-userauth"))
        self.assertEqual(self.link.client.received.count((raw.SERVICE_ACCEPT,
                                                          NS(b"ssh-userauth"))), 1)
        assert self.link.client.disconnect is not None
        self.assertEqual(self.link.client.disconnect[0], DISCONNECT_SERVICE_NOT_AVAILABLE)
        self.assertTrue(self.link.server_wire.disconnecting)
        self.assertEqual(REGISTRY.get_sample_value("gateway_ssh_strikes_total",
                                                   {"rule": "service_again"}), before + 1)

    def test_nothing_is_read_after_a_disconnect(self) -> None:
        """Requests read together with the one that ended the connection (here the
        11th failure) went on to the service, which answered (and disconnected) again."""
        self.link.send(raw.SERVICE_REQUEST, NS(b"ssh-userauth"))
        for _ in range(14):
            self.link.client.send(raw.USERAUTH_REQUEST,
                                  raw.userauth_request(b"root@db", b"none"))
        self.link.pump()
        self.assertTrue(self.link.server_wire.disconnecting)
        self.assertEqual(len(self.events.lines("Disconnecting with error")), 1)


class UpstreamHostKeyTests(SynchronousTestCase):
    def test_a_refused_host_key_is_answered_with_a_fixed_reason(self) -> None:
        """Conch's ECDH reply handler sent ``bad host key [ecdh] [Failure instance:
        ... UpstreamFailed: host key mismatch]`` to the server."""
        ready: Deferred[UpstreamConnection] = Deferred()
        ready.addErrback(lambda _: None)
        issued = Issued(ed25519.Ed25519PrivateKey.generate(), b"", 1, 0)
        auth = CertificateAuth("root", issued, UpstreamConnection(ready))
        client = UpstreamTransport(pinned_check(()), [b"ssh-ed25519"], auth, ready, "",
                                   time.time, route="db")
        factory = GatewayFactory(MemoryReactorClock(), [HOST_KEY],
                                 lambda ssh: GatewayUserAuth(ssh, Gate()))
        server: Any = factory.buildProtocol(ADDRESS)
        to_server, to_client = StringTransport(), StringTransport(peerAddress=ADDRESS)
        client.makeConnection(to_server)
        server.makeConnection(to_client)
        to_server_seen = b""
        for _ in range(10):
            a, b = to_server.value(), to_client.value()
            to_server.clear()
            to_client.clear()
            to_server_seen += a
            if a and not to_client.disconnecting:
                server.dataReceived(a)
            if b:
                client.dataReceived(b)
        self.assertTrue(client.wrong_host_key)
        self.assertTrue(to_server.disconnecting)
        # before NEWKEYS: in clear, MSG_DISCONNECT, HOST_KEY_NOT_VERIFIABLE, the reason
        self.assertIn(struct.pack(">BL", 1, 9) + NS(HOST_KEY_REFUSED), to_server_seen)
        self.assertNotIn(b"Failure", to_server_seen)
        self.assertNotIn(b"mismatch", to_server_seen)


class Wire:
    """An SSH transport as a connection service sees it: the packets it sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []
        self.transport = StringTransport(peerAddress=ADDRESS)

    def sendPacket(self, kind: int, payload: bytes) -> None:
        self.sent.append((kind, payload))


class OtherConnectionTests(SynchronousTestCase):
    """The jump's outer connection and the gateway's own toward a server check the
    same way (the inner connections of a jump are the person's, above)."""

    def setUp(self) -> None:
        self.events = Events()
        globalLogPublisher.addObserver(self.events)
        self.addCleanup(globalLogPublisher.removeObserver, self.events)

    def deliver(self, conn: Any, kind: int, payload: bytes) -> Wire:
        wire = Wire()
        conn.transport = wire
        conn.packetReceived(kind, payload)
        return wire

    def assert_disconnected(self, wire: Wire, role: str) -> None:
        self.assertEqual(wire.sent[-1][0], 1)  # MSG_DISCONNECT
        self.assertEqual(struct.unpack(">L", wire.sent[-1][1][:4])[0],
                         DISCONNECT_PROTOCOL_ERROR)
        self.assertTrue(wire.transport.disconnecting)
        lines = self.events.lines("disconnected (protocol error)")
        self.assertEqual([e["role"] for e in lines], [role])
        self.assertEqual([e for e in self.events.events if e.get("log_failure")], [])

    def test_jump_outer_connection(self) -> None:
        from gateway.ssh.jump import JumpConnection

        jump = JumpConnection(lambda: {"db"}, lambda route: None, "me")
        wire = self.deliver(jump, *raw.CHANNEL_MESSAGES["eof"](0))
        self.assert_disconnected(wire, "client")

    def test_server_sends_data_for_a_channel_never_opened(self) -> None:
        ready: Deferred[UpstreamConnection] = Deferred()
        wire = self.deliver(UpstreamConnection(ready), *raw.CHANNEL_MESSAGES["data"](4))
        self.assert_disconnected(wire, "server")

    def test_server_opening_a_channel_is_refused_without_a_traceback(self) -> None:
        """Conch's ``getChannel`` refusal logged a traceback at critical level."""
        ready: Deferred[UpstreamConnection] = Deferred()
        wire = self.deliver(UpstreamConnection(ready), raw.CHANNEL_OPEN,
                            raw.channel_open(b"x11", 6))
        self.assertEqual(wire.sent, [(raw.CHANNEL_OPEN_FAILURE, struct.pack(">2L", 6, 1)
                                      + NS(b"not allowed") + NS(b""))])
        self.assertFalse(wire.transport.disconnecting)
        self.assertEqual([e for e in self.events.events if e.get("log_failure")], [])
