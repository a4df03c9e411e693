"""Messages the gateway's SSH code reads are checked before Conch's handlers see them,
on every connection the gateway runs: the person's, a jump's outer and inner ones, and
the gateway's own toward a server. Conch reads fields with ``struct.unpack`` and looks a
channel up with ``self.channels[id]``, so a short packet, a message for an unknown or
already closed channel or an unsolicited confirmation raised out of its handler: a
critical log line with a traceback for each such packet, which anyone (before
authentication: the transport's messages) or any signed-in person (the channel
messages), or a server, could send at will. Such a message is a protocol error: the
peer is disconnected with ``SSH_DISCONNECT_PROTOCOL_ERROR`` and one info line says why.

- ``fault``: the ``ssh-connection`` check, pure: the fixed fields are all there and the
  channel named is in the state the message needs (RFC 4254 5.1-5.3);
  ``CheckedConnection`` reads the channel's state from Conch's documented attributes
  (``channels``, ``channelsToRemoteChannel``, ``deferreds``; a channel's
  ``remoteClosed``) and acts on the answer;
- ``CheckedTransport``: a transport message (below 50: disconnect, debug, key
  exchange...) that Conch cannot parse ends the same way.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any

from twisted.conch.ssh import connection
from twisted.conch.ssh.common import NS
from twisted.conch.ssh.transport import (
    DISCONNECT_PROTOCOL_ERROR,
    MSG_DISCONNECT,
    MSG_KEXINIT,
    MSG_NEWKEYS,
    messages,
)
from twisted.logger import Logger

log = Logger(namespace="gateway.ssh")


class State(enum.Enum):
    UNKNOWN = "unknown"  # no such channel (never opened, or closed both ways)
    PENDING = "pending"  # opened by this side, not yet confirmed
    OPEN = "open"
    CLOSED = "closed"  # the peer closed it; nothing more may come for it


# message number -> (name, fields before any string, strings after them, trailing
# bytes, the state the channel must be in; None: no channel)
_LAYOUT: dict[int, tuple[str, int, int, int, State | None]] = {
    connection.MSG_GLOBAL_REQUEST: ("GLOBAL_REQUEST", 0, 1, 1, None),
    connection.MSG_CHANNEL_OPEN: ("CHANNEL_OPEN", 0, 1, 12, None),
    connection.MSG_CHANNEL_OPEN_CONFIRMATION: ("CHANNEL_OPEN_CONFIRMATION", 16, 0, 0,
                                               State.PENDING),
    connection.MSG_CHANNEL_OPEN_FAILURE: ("CHANNEL_OPEN_FAILURE", 8, 1, 0, State.PENDING),
    connection.MSG_CHANNEL_WINDOW_ADJUST: ("CHANNEL_WINDOW_ADJUST", 8, 0, 0, State.OPEN),
    connection.MSG_CHANNEL_DATA: ("CHANNEL_DATA", 4, 1, 0, State.OPEN),
    connection.MSG_CHANNEL_EXTENDED_DATA: ("CHANNEL_EXTENDED_DATA", 8, 1, 0, State.OPEN),
    connection.MSG_CHANNEL_EOF: ("CHANNEL_EOF", 4, 0, 0, State.OPEN),
    connection.MSG_CHANNEL_CLOSE: ("CHANNEL_CLOSE", 4, 0, 0, State.OPEN),
    connection.MSG_CHANNEL_REQUEST: ("CHANNEL_REQUEST", 4, 1, 1, State.OPEN),
    connection.MSG_CHANNEL_SUCCESS: ("CHANNEL_SUCCESS", 4, 0, 0, State.OPEN),
    connection.MSG_CHANNEL_FAILURE: ("CHANNEL_FAILURE", 4, 0, 0, State.OPEN),
}
_CHANNEL_DATA = connection.MSG_CHANNEL_DATA
_TWO_IDS = struct.Struct(">2L").unpack_from  # a CHANNEL_DATA's channel and string length
_GLOBAL_REPLIES = {connection.MSG_REQUEST_SUCCESS: "REQUEST_SUCCESS",
                   connection.MSG_REQUEST_FAILURE: "REQUEST_FAILURE"}
_WHY = {State.UNKNOWN: "which is not open", State.PENDING: "which is still being opened",
        State.OPEN: "which is already open", State.CLOSED: "which is already closed"}


def message_name(number: int) -> str:
    known = _LAYOUT.get(number)
    return known[0] if known else _GLOBAL_REPLIES.get(number, str(number))


def fault(number: int, packet: bytes, state: Callable[[int], State],
          global_requests: int) -> str | None:
    """Why ``packet`` (an ``ssh-connection`` message ``number``) may not be handled, or
    None. ``state``: a channel id's state on this side; ``global_requests``: how many
    global requests this side sent that await a reply."""
    if number in _GLOBAL_REPLIES:
        return None if global_requests > 0 else "a reply to no global request"
    layout = _LAYOUT.get(number)
    if layout is None:
        return None  # not a connection message: Conch answers it "unimplemented"
    name, fixed, strings, trailing, needed = layout
    offset = fixed
    if len(packet) < offset:
        return f"a {name} cut short"
    for _ in range(strings):
        if len(packet) < offset + 4:
            return f"a {name} cut short"
        offset += 4 + struct.unpack(">L", packet[offset:offset + 4])[0]
        if len(packet) < offset:
            return f"a {name} cut short"
    if len(packet) < offset + trailing:
        return f"a {name} cut short"
    if needed is None:
        return None
    channel = struct.unpack(">L", packet[:4])[0]
    found = state(channel)
    if found is needed:
        return None
    return f"a {name} for channel {channel}, {_WHY[found]}"


class CheckedConnection(connection.SSHConnection):
    """Conch's connection service with ``fault`` asked first. ``peer_role`` names the
    other side in the log line ("client" or "server"); ``log_fields`` adds what a
    subclass knows (the route, the person)."""

    peer_role = "client"

    def log_fields(self) -> dict[str, Any]:
        return {}

    def channel_state(self, channel_id: int) -> State:
        open_channel = self.channels.get(channel_id)
        if open_channel is None:
            return State.UNKNOWN
        if open_channel not in self.channelsToRemoteChannel:
            return State.PENDING
        return State.CLOSED if open_channel.remoteClosed else State.OPEN

    def packetReceived(self, messageNum: int, packet: bytes) -> Any:
        wire: Any = self.transport
        if wire is None or closing(wire):
            return None  # disconnected already: what was read after it is dropped
        if messageNum == _CHANNEL_DATA and len(packet) >= 8:
            # every relayed byte comes this way: what ``fault`` asks of a CHANNEL_DATA,
            # inline; anything it does not pass goes the long way, which says why
            channel_id, size = _TWO_IDS(packet, 0)
            open_channel = self.channels.get(channel_id)
            if open_channel is not None and 8 + size <= len(packet) and \
                    not open_channel.remoteClosed and \
                    open_channel in self.channelsToRemoteChannel:
                base_: Any = super()
                return base_.packetReceived(messageNum, packet)
        why = fault(messageNum, packet, self.channel_state,
                    len(self.deferreds.get("global", [])))
        if why is None:
            base: Any = super()
            return base.packetReceived(messageNum, packet)
        protocol_error(wire, self.peer_role, why, message_name(messageNum),
                       self.log_fields())
        return None


# what Conch's parsing raises on a packet shorter than its fields, or a bad value
MALFORMED = (struct.error, IndexError, ValueError, TypeError)


class CheckedTransport:
    """A mixin before Conch's ``SSHServerTransport`` or ``SSHClientTransport``; the
    class sets ``peer_role`` and may add ``log_fields``."""

    peer_role = "client"
    # between the peer's KEXINIT and its NEWKEYS: only then may key exchange messages
    # (30-49) come (RFC 4253 7); Conch's handlers read state that exists only then
    exchanging_keys = False

    def log_fields(self) -> dict[str, Any]:
        return {}

    def dispatchMessage(self, messageNum: int, payload: bytes) -> None:
        if closing(self):
            return  # disconnecting: the rest of what was read is dropped, unanswered
        base: Any = super()
        if messageNum >= 50:  # a service's: checked there
            base.dispatchMessage(messageNum, payload)
            return
        name = messages.get(messageNum, f"MSG_{messageNum}")[4:]
        if messageNum == MSG_KEXINIT:
            self.exchanging_keys = True
        elif messageNum >= 30 and not self.exchanging_keys:
            protocol_error(self, self.peer_role, f"a {name} outside a key exchange", name,
                           self.log_fields())
            return
        try:
            base.dispatchMessage(messageNum, payload)
        except MALFORMED as error:
            protocol_error(self, self.peer_role,
                           f"a malformed {name} ({type(error).__name__})", name,
                           self.log_fields())
            return
        if messageNum == MSG_NEWKEYS:
            self.exchanging_keys = False


def closing(wire: Any) -> bool:
    """Whether the SSH transport ``wire`` is disconnecting (or gone)."""
    return wire.transport is None or bool(getattr(wire.transport, "disconnecting", False))


def protocol_error(wire: Any, role: str, why: str, message: str,
                   fields: dict[str, Any]) -> None:
    """One info line; SSH_DISCONNECT_PROTOCOL_ERROR to the peer of the SSH transport
    ``wire`` (its text says which message was refused: the peer sent it) and close."""
    peer = getattr(wire.transport.getPeer(), "host", "")
    log.info("ssh: the {role} {peer} sent {why}; disconnected (protocol error)",
             role=role, peer=peer, why=why, message=message, **fields)
    # the packet itself, not ``sendDisconnect``: that logs a second line of its own
    wire.sendPacket(MSG_DISCONNECT, struct.pack(">L", DISCONNECT_PROTOCOL_ERROR)
                    + NS(b"protocol error: " + why.encode()) + NS(b""))
    wire.transport.loseConnection()
    # no honest client sends what the checks refuse: before authentication, a strike
    # against its address, as for the server's other rules (a signed-in person is
    # known by name instead; a server the gateway dials has no strikes)
    strike = getattr(wire, "strike", None)
    if strike is not None and not getattr(wire, "authenticated", True):
        strike("protocol_error")
