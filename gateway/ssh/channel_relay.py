"""The connection service of an admitted person: every channel they open is opened on
the server too, and everything is relayed both ways, in order (data, then an EOF or
exit status behind it), with flow control (a side whose peer cannot take more gets no
more window). ``session`` channels carry shell, exec, pty, window changes, signals and
subsystems (so ``scp`` and ``sftp`` work); ``direct-tcpip`` (``ssh -L``) only when the
route allows it. Agent and X11 forwarding, remote forwarding and any channel the server
would open toward the person are refused.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.conch.ssh import channel, connection
from twisted.conch.ssh.common import getNS
from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from gateway.ssh import limits
from gateway.ssh.asciicast import exec_record
from gateway.ssh.message_checks import CheckedConnection
from gateway.ssh.recorder import RecordFile, Recording
from gateway.ssh.transport import refuse_channel
from gateway.ssh.upstream import UpstreamConnection

log = Logger(namespace="gateway.ssh")

REFUSED_REQUESTS = (b"auth-agent-req@openssh.com", b"x11-req")
RELAYED_REQUESTS = (b"pty-req", b"env", b"shell", b"exec", b"subsystem", b"window-change",
                    b"signal", b"break", b"xon-xoff")
FROM_SERVER = (b"exit-status", b"exit-signal", b"eow@openssh.com")


@dataclass
class Context:
    """What a connection's channels need to know and count."""

    connection_id: str
    route: str
    login: str
    user: str
    client: str
    allow_port_forwarding: bool
    recordings: Callable[[str, int, int, str], Recording | None]  # (title, w, h, term)
    clock: Callable[[], float]  # the service's (recordings' times, durations)
    # an exec or subsystem session without a terminal: the file its command and exit
    # status go to when it ends (None: not recorded)
    exec_records: Callable[[], RecordFile | None] = lambda: None
    # ``ssh_recording_required``: a session starts only once its recording's file is
    # there (a failure later closes the connection: the service's on_failure)
    recording_required: bool = False
    bytes_in: int = 0  # from the person
    bytes_out: int = 0  # to the person
    channels: int = 0
    recording_files: list[str] = field(default_factory=list)
    recording_errors: list[str] = field(default_factory=list)


class Relay(channel.SSHChannel):
    """One side of a relayed channel; ``peer`` is the other side."""

    peer: Relay | None = None
    # this side's window is not reopened while the peer's buffer is full, or while the
    # session's recording waits for the disk (``recorder.HIGH_WATER``)
    peer_full = False
    disk_full = False

    @property
    def held(self) -> bool:
        return self.peer_full or self.disk_full

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        base: Any = super()
        base.__init__(*args, **kwargs)
        self.queued: list[Callable[[], None]] = []

    def in_order(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the data written before it has been sent."""
        if self.buf or self.extBuf:
            self.queued.append(action)
        else:
            action()

    def addWindowBytes(self, data: int) -> None:
        base: Any = super()
        base.addWindowBytes(data)
        if not self.buf and not self.extBuf:
            queued, self.queued = self.queued, []
            for action in queued:
                action()
            if self.peer is not None:
                self.peer.release()

    def stopWriting(self) -> None:
        if self.peer is not None:
            self.peer.peer_full = True

    def startWriting(self) -> None:
        pass  # released once the buffer is empty (``addWindowBytes``)

    def release(self) -> None:
        if self.peer_full:
            self.peer_full = False
            self.reopen()

    def reopen(self) -> None:
        """The window withheld while ``held``, given back."""
        if not self.held and not self.localClosed \
                and self.localWindowLeft < self.localWindowSize // 2:
            wire: Any = self.conn
            wire.adjustWindow(self, self.localWindowSize - self.localWindowLeft)

    def send_request(self, kind: bytes, data: bytes, want_reply: bool) -> Any:
        wire: Any = self.conn
        return wire.sendRequest(self, kind, data, wantReply=1 if want_reply else 0)

    def send_eof(self) -> None:
        wire: Any = self.conn
        wire.sendEOF(self)

    def lose(self) -> None:
        wire: Any = self
        wire.loseConnection()

    def put(self, data: bytes) -> None:
        wire: Any = self
        wire.write(data)

    def put_extended(self, kind: int, data: bytes) -> None:
        wire: Any = self
        wire.writeExtended(kind, data)


class ServerSide(Relay):
    """The channel toward the server (opened by the gateway)."""

    def __init__(self, kind: bytes, person: PersonSide, conn: UpstreamConnection) -> None:
        super().__init__(localWindow=limits.WINDOW, localMaxPacket=limits.MAX_PACKET,
                         conn=conn)
        self.name = kind
        self.peer = person
        self.opened: Deferred[bool] = Deferred()

    def channelOpen(self, specificData: bytes) -> None:
        self.opened.callback(True)

    def openFailed(self, reason: Any) -> None:
        self.opened.callback(False)

    def dataReceived(self, data: bytes) -> None:
        person = self.peer
        assert isinstance(person, PersonSide)
        person.ctx.bytes_out += len(data)
        if person.recording is not None:
            person.recording.output(data, person.ctx.clock())
        person.put(data)

    def extReceived(self, dataType: int, data: bytes) -> None:
        person = self.peer
        assert isinstance(person, PersonSide)
        person.ctx.bytes_out += len(data)
        if person.recording is not None:
            person.recording.output(data, person.ctx.clock())
        person.put_extended(dataType, data)

    def eofReceived(self) -> None:
        person = self.peer
        assert person is not None
        person.in_order(person.send_eof)

    def closeReceived(self) -> None:
        person = self.peer
        assert person is not None
        person.in_order(person.lose)
        self.lose()

    def requestReceived(self, requestType: bytes, data: bytes) -> bool:
        person = self.peer
        assert isinstance(person, PersonSide)
        if requestType not in FROM_SERVER:
            return False  # keepalives are the gateway's to answer: "not understood"
        if requestType == b"exit-status" and len(data) >= 4:
            person.exit_status = struct.unpack(">L", data[:4])[0]
        elif requestType == b"exit-signal":
            with contextlib.suppress(struct.error, ValueError, IndexError):
                person.exit_signal = getNS(data)[0].decode("ascii", "replace")
        person.in_order(lambda: person.send_request(requestType, data, False))
        return True


class PersonSide(Relay):
    """The channel the person opened."""

    def __init__(self, kind: bytes, ctx: Context, window: int, max_packet: int,
                 conn: RelayedConnection) -> None:
        super().__init__(localWindow=limits.WINDOW, localMaxPacket=limits.MAX_PACKET,
                         remoteWindow=window, remoteMaxPacket=max_packet, conn=conn)
        self.name = kind
        self.ctx = ctx
        self.started = ctx.clock()
        self.what = ""  # shell, exec, subsystem NAME, or the forward's target
        self.command = ""
        self.pty: tuple[str, int, int] | None = None  # TERM, columns, rows
        self.recording: Recording | None = None
        self.exec_file: RecordFile | None = None
        self._last_reply: Deferred[Any] | None = None
        self.exit_status: int | None = None
        self.exit_signal = ""
        self.bytes_in = 0

    def dataReceived(self, data: bytes) -> None:
        self.ctx.bytes_in += len(data)
        self.bytes_in += len(data)
        if self.recording is not None:
            self.recording.input(data, self.ctx.clock())
        assert self.peer is not None
        self.peer.put(data)

    def extReceived(self, dataType: int, data: bytes) -> None:
        assert self.peer is not None
        self.ctx.bytes_in += len(data)
        self.peer.put_extended(dataType, data)

    def eofReceived(self) -> None:
        peer = self.peer
        assert peer is not None
        peer.in_order(peer.send_eof)

    def closeReceived(self) -> None:
        peer = self.peer
        assert peer is not None
        peer.in_order(peer.lose)
        self.lose()

    def requestReceived(self, requestType: bytes, data: bytes) -> Any:
        return self._in_order(self._answer(requestType, data))

    def _in_order(self, answer: Any) -> Deferred[Any]:
        """Replies go out in the order of the requests (RFC 4254 5.4: the client pairs
        them up by order), whichever answer is ready first: a refusal, or a request
        waiting for its recording, after the server's reply to an earlier one."""
        answer_d: Deferred[Any] = answer if isinstance(answer, Deferred) else succeed(answer)
        ordered: Deferred[Any] = Deferred()
        previous, self._last_reply = self._last_reply, ordered

        def release(result: object) -> object:
            answer_d.chainDeferred(ordered)
            return result
        if previous is None:
            release(None)
        else:
            # (added now, after Conch's callback that sends the earlier reply)
            previous.addBoth(release)
        return ordered

    def _answer(self, requestType: bytes, data: bytes) -> Any:
        if requestType in REFUSED_REQUESTS or requestType not in RELAYED_REQUESTS \
                or self.name != b"session":
            log.info("ssh: refused {request} on route {route} for {user}",
                     request=requestType.decode("ascii", "replace")[:64],
                     route=self.ctx.route, user=self.ctx.user,
                     connection=self.ctx.connection_id)
            return False
        file = self._note(requestType, data)
        if file is not None and self.ctx.recording_required:
            # relayed once the recording's file is there; refused when it cannot be
            return file.opened.addCallback(
                lambda opened: self._relay(requestType, data) if opened else False)
        return self._relay(requestType, data)

    def _relay(self, kind: bytes, data: bytes) -> Any:
        peer = self.peer
        assert peer is not None
        d = peer.send_request(kind, data, True)
        if d is None:
            return False
        return d.addCallbacks(lambda _: True, lambda _: False)

    def _hold_for_disk(self, holding: bool) -> None:
        """The recording's writes are behind: both directions wait for the disk."""
        for side in (self, self.peer):
            if side is not None:
                side.disk_full = holding
                if not holding:
                    side.reopen()

    def _note(self, kind: bytes, data: bytes) -> RecordFile | None:
        """What the channel is, for its log line and recording; the file a session
        request started recording to."""
        now = self.ctx.clock()
        try:
            if kind == b"pty-req":
                term, rest = getNS(data)
                columns, rows = struct.unpack(">2L", rest[:8])
                self.pty = (term.decode("ascii", "replace")[:64], columns, rows)
            elif kind == b"window-change":
                columns, rows = struct.unpack(">2L", data[:8])
                if self.pty is not None:
                    self.pty = (self.pty[0], columns, rows)
                if self.recording is not None:
                    self.recording.resize(columns, rows, now)
            elif kind in (b"shell", b"exec", b"subsystem"):
                if kind == b"exec":
                    self.command = getNS(data)[0].decode("utf-8", "replace")[:1024]
                    self.what = "exec"
                elif kind == b"subsystem":
                    self.what = "subsystem " + getNS(data)[0].decode("ascii", "replace")[:64]
                else:
                    self.what = "shell"
                if self.recording is not None or self.exec_file is not None:
                    return None  # (a second session request: the server refuses it)
                if self.pty is not None:
                    title = f"{self.ctx.login}@{self.ctx.route} {self.command or self.what}"
                    self.recording = self.ctx.recordings(title, self.pty[1], self.pty[2],
                                                         self.pty[0])
                    if self.recording is not None:
                        self.ctx.recording_files.append(self.recording.path)
                        self.recording.file.on_hold = self._hold_for_disk
                        return self.recording.file
                elif kind != b"shell":
                    self.exec_file = self.ctx.exec_records()
                    if self.exec_file is not None:
                        self.ctx.recording_files.append(self.exec_file.path)
                    return self.exec_file
        except (struct.error, ValueError, IndexError):
            pass  # relayed as sent; the server judges it
        return None

    def closed(self) -> None:
        if self.recording is not None:
            self.recording.close()
        elif self.exec_file is not None:
            self.exec_file.write(exec_record({
                "command": self.command or self.what, "exit_status": self.exit_status,
                "exit_signal": self.exit_signal, "user": self.ctx.user,
                "login": self.ctx.login, "route": self.ctx.route, "client": self.ctx.client,
                "connection": self.ctx.connection_id, "started": round(self.started, 3),
                "duration": round(self.ctx.clock() - self.started, 3)}))
            self.exec_file.close()
        log.info("ssh channel {kind} {what} closed on route {route} for {user}",
                 kind=self.name.decode("ascii", "replace"), what=self.what,
                 command=self.command, route=self.ctx.route, login=self.ctx.login,
                 user=self.ctx.user, client=self.ctx.client,
                 connection=self.ctx.connection_id, exit_status=self.exit_status,
                 exit_signal=self.exit_signal, bytes_in=self.bytes_in,
                 duration=round(self.ctx.clock() - self.started, 3),
                 recording=self.recording.path if self.recording is not None else "")


class RelayedConnection(CheckedConnection):
    """The person's ``ssh-connection`` service, relayed to ``upstream``."""

    def __init__(self, upstream: UpstreamConnection, ctx: Context) -> None:
        base: Any = super()
        base.__init__()
        self.upstream = upstream
        self.ctx = ctx
        self.opening = 0

    def log_fields(self) -> dict[str, Any]:
        return {"route": self.ctx.route, "user": self.ctx.user, "login": self.ctx.login,
                "connection": self.ctx.connection_id}

    def gotGlobalRequest(self, requestType: bytes, data: bytes) -> int:
        return 0  # remote forwarding (tcpip-forward) and the rest: refused

    def adjustWindow(self, channel: Any, bytesToAdd: int) -> None:
        if getattr(channel, "held", False):
            return
        base: Any = super()
        base.adjustWindow(channel, bytesToAdd)

    def _refuse(self, sender: int, code: int, text: str) -> None:
        refuse_channel(self.transport, sender, code, text)

    def ssh_CHANNEL_OPEN(self, packet: bytes) -> None:
        try:
            kind, rest = getNS(packet)
            sender, window, max_packet = struct.unpack(">3L", rest[:12])
        except (struct.error, ValueError, IndexError):
            wire: Any = self.transport
            wire.loseConnection()
            return
        data = rest[12:]
        if len(self.channels) + self.opening >= limits.CHANNELS_PER_CONNECTION:
            self._refuse(sender, connection.OPEN_RESOURCE_SHORTAGE, "too many channels")
            return
        if kind == b"direct-tcpip":
            if not self.ctx.allow_port_forwarding:
                self._refuse(sender, connection.OPEN_ADMINISTRATIVELY_PROHIBITED,
                             f"port forwarding is not allowed on route {self.ctx.route}")
                return
        elif kind != b"session":
            self._refuse(sender, connection.OPEN_UNKNOWN_CHANNEL_TYPE,
                         "only session channels are served")
            return
        person = PersonSide(kind, self.ctx, window, max_packet, self)
        server = ServerSide(kind, person, self.upstream)
        person.peer = server
        if kind == b"direct-tcpip":
            try:
                host, port = getNS(data)[0], struct.unpack(">L", getNS(data)[1][:4])[0]
                person.what = f"{host.decode('ascii', 'replace')[:255]}:{port}"
            except (struct.error, ValueError, IndexError):
                self._refuse(sender, connection.OPEN_CONNECT_FAILED, "bad request")
                return
        self.opening += 1
        self.ctx.channels += 1
        server.opened.addCallback(self._opened, person, server, sender)
        up: Any = self.upstream
        up.openChannel(server, data)

    def _opened(self, ok: bool, person: PersonSide, server: ServerSide, sender: int) -> None:
        self.opening -= 1
        if not ok:
            self._refuse(sender, connection.OPEN_CONNECT_FAILED, "the server refused it")
            return
        local = self.localChannelID
        self.localChannelID += 1
        person_any: Any = person
        person_any.id = local
        self.channels[local] = person
        self.channelsToRemoteChannel[person] = sender
        self.localToRemoteChannel[local] = sender
        wire: Any = self.transport
        wire.sendPacket(connection.MSG_CHANNEL_OPEN_CONFIRMATION,
                        struct.pack(">4L", sender, local, person.localWindowSize,
                                    person.localMaxPacket))
        person_any.channelOpen(b"")

    def close_recordings(self) -> None:
        """The process stops: what each open channel recorded is closed as it is."""
        for open_channel in list(self.channels.values()):
            if isinstance(open_channel, PersonSide):
                if open_channel.recording is not None:
                    open_channel.recording.close()
                if open_channel.exec_file is not None:
                    open_channel.exec_file.close()

    def say(self, text: str) -> None:
        """A line on the person's terminals (their open session channels)."""
        for open_channel in list(self.channels.values()):
            if isinstance(open_channel, PersonSide) and open_channel.name == b"session" \
                    and not open_channel.localClosed:
                open_channel.put_extended(connection.EXTENDED_DATA_STDERR,
                                          f"\r\ngateway: {text}\r\n".encode())

    def abandon(self) -> None:
        """Close the server's side (the person's connection never got this service)."""
        up: Any = self.upstream.transport
        if up is not None:
            up.loseConnection()

    def serviceStopped(self) -> None:
        base: Any = super()
        base.serviceStopped()
        self.abandon()
