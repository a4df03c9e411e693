"""The relay's channels on recording transports: which channels and requests pass,
and the order of data, EOF and exit status when a window is full."""

from __future__ import annotations

import struct
from typing import Any

from twisted.conch.ssh import connection
from twisted.conch.ssh.common import NS
from twisted.trial.unittest import SynchronousTestCase

from gateway.ssh import limits
from gateway.ssh.channel_relay import Context, PersonSide, RelayedConnection, ServerSide


class Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []

    def sendPacket(self, kind: int, payload: bytes) -> None:
        self.sent.append((kind, payload))


class FakeUpstream(connection.SSHConnection):
    def __init__(self) -> None:
        connection.SSHConnection.__init__(self)  # type: ignore[no-untyped-call]
        self.transport = Wire()  # type: ignore[assignment]
        self.opened: list[Any] = []

    def openChannel(self, channel: Any, extra: bytes = b"") -> None:
        self.opened.append((channel, extra))


def context(forwarding: bool = False) -> Context:
    return Context(connection_id="c", route="db", login="root", user="alice@example.com",
                   client="192.0.2.1", allow_port_forwarding=forwarding,
                   recordings=lambda *a: None, clock=lambda: 0.0)


def open_packet(kind: bytes, sender: int = 5, window: int = 1 << 20, extra: bytes = b""
                ) -> bytes:
    return NS(kind) + struct.pack(">3L", sender, window, 32768) + extra


class RelayTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.up = FakeUpstream()
        self.relay = RelayedConnection(self.up, context())
        self.wire = Wire()
        self.relay.transport = self.wire  # type: ignore[assignment]

    def open_session(self, window: int = 1 << 20) -> tuple[PersonSide, ServerSide]:
        self.relay.ssh_CHANNEL_OPEN(open_packet(b"session", window=window))
        server, _ = self.up.opened[-1]
        self.up.localToRemoteChannel[0] = 9
        self.up.channelsToRemoteChannel[server] = 9
        self.up.channels[0] = server
        server.id = 0
        server.remoteMaxPacket = 32768  # (set by the server's open confirmation)
        server.channelOpen(b"")
        person = server.peer
        assert isinstance(person, PersonSide) and isinstance(server, ServerSide)
        return person, server

    def test_session_opens_once_the_server_confirmed(self) -> None:
        self.relay.ssh_CHANNEL_OPEN(open_packet(b"session"))
        self.assertEqual(self.wire.sent, [])  # nothing until the server answers
        server, _ = self.up.opened[0]
        server.channelOpen(b"")
        self.assertEqual(self.wire.sent[0][0], connection.MSG_CHANNEL_OPEN_CONFIRMATION)

    def test_port_forwarding_refused_unless_the_route_allows_it(self) -> None:
        target = NS(b"127.0.0.1") + struct.pack(">L", 22) + NS(b"127.0.0.1") + \
            struct.pack(">L", 1)
        self.relay.ssh_CHANNEL_OPEN(open_packet(b"direct-tcpip", extra=target))
        kind, payload = self.wire.sent[0]
        self.assertEqual(kind, connection.MSG_CHANNEL_OPEN_FAILURE)
        self.assertEqual(struct.unpack(">2L", payload[:8]),
                         (5, connection.OPEN_ADMINISTRATIVELY_PROHIBITED))
        self.assertIn(b"port forwarding is not allowed on route db", payload)
        self.assertEqual(self.up.opened, [])
        allowed = RelayedConnection(self.up, context(forwarding=True))
        allowed.transport = Wire()  # type: ignore[assignment]
        allowed.ssh_CHANNEL_OPEN(open_packet(b"direct-tcpip", extra=target))
        self.assertEqual(len(self.up.opened), 1)

    def test_other_channel_types_and_too_many_channels(self) -> None:
        self.relay.ssh_CHANNEL_OPEN(open_packet(b"x11"))
        self.assertEqual(struct.unpack(">2L", self.wire.sent[-1][1][:8]),
                         (5, connection.OPEN_UNKNOWN_CHANNEL_TYPE))
        for _ in range(limits.CHANNELS_PER_CONNECTION):
            self.relay.ssh_CHANNEL_OPEN(open_packet(b"session"))
        self.relay.ssh_CHANNEL_OPEN(open_packet(b"session"))
        self.assertEqual(struct.unpack(">2L", self.wire.sent[-1][1][:8]),
                         (5, connection.OPEN_RESOURCE_SHORTAGE))

    def test_agent_and_x11_requests_refused_and_global_requests_too(self) -> None:
        person, _ = self.open_session()
        # (answers are Deferreds: replies go out in the order of the requests)
        self.assertIs(self.successResultOf(
            person.requestReceived(b"auth-agent-req@openssh.com", b"")), False)
        self.assertIs(self.successResultOf(person.requestReceived(b"x11-req", b"")), False)
        self.assertEqual(self.relay.gotGlobalRequest(b"tcpip-forward", b""), 0)
        self.assertEqual(self.up.transport.sent, [])  # type: ignore[attr-defined]

    def test_exit_status_waits_behind_buffered_output(self) -> None:
        """Output the person's window cannot take yet is buffered; the EOF and exit
        status the server sends after it go out after it, not before."""
        person, server = self.open_session(window=10)
        self.wire.sent.clear()
        server.dataReceived(b"0123456789abcdef")
        server.eofReceived()
        server.requestReceived(b"exit-status", struct.pack(">L", 3))
        kinds = [k for k, _ in self.wire.sent]
        self.assertEqual(kinds, [connection.MSG_CHANNEL_DATA])
        person.addWindowBytes(100)
        kinds = [k for k, _ in self.wire.sent]
        self.assertEqual(kinds, [connection.MSG_CHANNEL_DATA, connection.MSG_CHANNEL_DATA,
                                 connection.MSG_CHANNEL_EOF, connection.MSG_CHANNEL_REQUEST])
        self.assertIn(b"exit-status", self.wire.sent[-1][1])
        self.assertEqual(person.exit_status, 3)

    def test_a_full_peer_withholds_the_window(self) -> None:
        """While the server's side is buffering, the person's window is not reopened;
        once it drains, it is."""
        person, server = self.open_session()
        server.remoteWindowLeft = 0
        person.localWindowLeft = 0
        person.dataReceived(b"x" * 10)  # buffered toward the server: the person is held
        self.assertTrue(person.held)
        self.relay.adjustWindow(person, 1000)
        self.assertEqual(person.localWindowLeft, 0)
        server.addWindowBytes(1 << 20)
        self.assertFalse(person.held)
        self.assertEqual(person.localWindowLeft, person.localWindowSize)


class JumpTests(SynchronousTestCase):
    def test_only_channels_to_routes(self) -> None:
        from gateway.ssh.jump import JumpConnection

        made: list[str] = []
        jump = JumpConnection(lambda: {"db"}, lambda route: made.append(route),  # type: ignore[arg-type,return-value,func-returns-value]
                              "alice")
        wire = Wire()
        jump.transport = wire  # type: ignore[assignment]
        jump.ssh_CHANNEL_OPEN(open_packet(b"session"))
        self.assertEqual(struct.unpack(">2L", wire.sent[-1][1][:8]),
                         (5, connection.OPEN_ADMINISTRATIVELY_PROHIBITED))
        self.assertIn(b"there is no SSH route alice; name one as LOGIN@ROUTE", wire.sent[-1][1])
        target = NS(b"web") + struct.pack(">L", 22) + NS(b"127.0.0.1") + struct.pack(">L", 1)
        jump.ssh_CHANNEL_OPEN(open_packet(b"direct-tcpip", extra=target))
        self.assertIn(b"there is no SSH route web", wire.sent[-1][1])
        target = NS(b"DB") + struct.pack(">L", 22) + NS(b"127.0.0.1") + struct.pack(">L", 1)
        jump.ssh_CHANNEL_OPEN(open_packet(b"direct-tcpip", extra=target))
        self.assertEqual(made, ["db"])  # an inner connection was asked for; none given
        self.assertIn(b"too many connections", wire.sent[-1][1])
