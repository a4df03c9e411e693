"""Jump-host mode: ``ssh -J gateway:2222 root@db``. The outer connection's user name
names no route (OpenSSH sends the local user's name); once its key is bound and the
person is known, it may only open ``direct-tcpip`` channels to route names, and the
gateway terminates the inner SSH connection carried in each one itself (``ChannelWire``
is its transport): the same host key, sign-in, policy decision and certificate as a
direct ``ssh root@db@gateway``, with the route taken from the channel."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from twisted.conch.ssh import channel, connection
from twisted.conch.ssh.common import getNS
from twisted.internet.address import IPv4Address
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.ssh import limits
from gateway.ssh.message_checks import CheckedConnection
from gateway.ssh.transport import GatewayServerTransport, refuse_channel

log = Logger(namespace="gateway.ssh")


class ChannelWire:
    """The transport of an inner SSH connection: its bytes are a channel's data."""

    disconnecting = False
    disconnected = False

    def __init__(self, carrier: JumpChannel, peer: Any) -> None:
        self.carrier = carrier
        self.peer = peer

    def write(self, data: bytes) -> None:
        if not self.disconnecting:
            self.carrier.put(data)

    def writeSequence(self, data: list[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        if not self.disconnecting:
            self.disconnecting = True
            self.carrier.lose()

    def abortConnection(self) -> None:
        self.loseConnection()

    def getPeer(self) -> Any:
        return self.peer

    def getHost(self) -> Any:
        return IPv4Address("TCP", "127.0.0.1", 0)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        pass

    def unregisterProducer(self) -> None:
        pass


class JumpChannel(channel.SSHChannel):
    """A direct-tcpip channel to a route: it carries one inner SSH connection."""

    name = b"direct-tcpip"

    def __init__(self, inner: GatewayServerTransport, window: int, max_packet: int,
                 conn: JumpConnection) -> None:
        base: Any = super()
        base.__init__(localWindow=limits.WINDOW, localMaxPacket=limits.MAX_PACKET,
                      remoteWindow=window, remoteMaxPacket=max_packet, conn=conn)
        self.inner = inner
        self.wire: ChannelWire | None = None

    def channelOpen(self, specificData: bytes) -> None:
        wire: Any = self.conn
        self.wire = ChannelWire(self, wire.transport.transport.getPeer())
        inner: Any = self.inner
        inner.makeConnection(self.wire)

    def dataReceived(self, data: bytes) -> None:
        inner: Any = self.inner
        inner.dataReceived(data)

    def eofReceived(self) -> None:
        self.lose()

    def closed(self) -> None:
        if self.wire is not None:
            self.wire.disconnected = True
        self.inner.connectionLost(Failure(ConnectionError("the jump channel closed")))

    def put(self, data: bytes) -> None:
        wire: Any = self
        wire.write(data)

    def lose(self) -> None:
        wire: Any = self
        wire.loseConnection()


class JumpConnection(CheckedConnection):
    """The outer connection of a jump: no shell, only channels to routes."""

    def __init__(self, routes: Callable[[], set[str]],
                 inner: Callable[[str], GatewayServerTransport | None], label: str) -> None:
        base: Any = super()
        base.__init__()
        self.routes = routes
        self.inner = inner
        self.label = label  # "NAME": what the person typed, for refusals

    def abandon(self) -> None:
        """The person left before this service started: nothing to close (a jump's
        inner connections are made only through its channels)."""

    def gotGlobalRequest(self, requestType: bytes, data: bytes) -> int:
        return 0

    def _refuse(self, sender: int, code: int, text: str) -> None:
        refuse_channel(self.transport, sender, code, text)

    def ssh_CHANNEL_OPEN(self, packet: bytes) -> None:
        try:
            kind, rest = getNS(packet)
            sender, window, max_packet = struct.unpack(">3L", rest[:12])
            host = getNS(rest[12:])[0].decode("ascii").lower() if kind == b"direct-tcpip" \
                else ""
        except (struct.error, ValueError, IndexError, UnicodeDecodeError):
            wire: Any = self.transport
            wire.loseConnection()
            return
        if len(self.channels) >= limits.CHANNELS_PER_CONNECTION:
            self._refuse(sender, connection.OPEN_RESOURCE_SHORTAGE, "too many channels")
            return
        if kind != b"direct-tcpip":
            self._refuse(sender, connection.OPEN_ADMINISTRATIVELY_PROHIBITED,
                         f"there is no SSH route {self.label}; name one as LOGIN@ROUTE, or "
                         "use this connection as a jump host (ssh -J)")
            return
        if host not in self.routes():
            self._refuse(sender, connection.OPEN_CONNECT_FAILED,
                         f"there is no SSH route {host[:64]}")
            return
        inner = self.inner(host)
        if inner is None:
            self._refuse(sender, connection.OPEN_RESOURCE_SHORTAGE, "too many connections")
            return
        carrier = JumpChannel(inner, window, max_packet, self)
        local = self.localChannelID
        self.localChannelID += 1
        carrier_any: Any = carrier
        carrier_any.id = local
        self.channels[local] = carrier
        self.channelsToRemoteChannel[carrier] = sender
        self.localToRemoteChannel[local] = sender
        wire = self.transport
        wire_any: Any = wire
        wire_any.sendPacket(connection.MSG_CHANNEL_OPEN_CONFIRMATION,
                            struct.pack(">4L", sender, local, carrier.localWindowSize,
                                        carrier.localMaxPacket))
        carrier.channelOpen(b"")
