"""A raw SSH client for tests: it does the real key exchange (Conch's client transport,
curve25519 and the gateway's ciphers), then sends whatever a test asks, packets OpenSSH
never sends included (a USERAUTH_REQUEST with a hostile user name or oversize fields,
an INFO_RESPONSE out of turn, channel messages for channels that are not open), and
records every packet the server sends after the key exchange.

Two ways to run it:

- ``RawSSH``: over a blocking loopback socket to a real daemon, no reactor (every wait
  bounded by its timeout);
- ``MemoryLink``: in memory against a server protocol (the gateway's
  ``GatewayServerTransport`` in unit tests and the fuzz target), bytes moved by
  ``pump``; whatever the server raises reaches the caller.

Message shapes (``userauth_request``, ``publickey`` ...) are plain functions, shared with
the fuzz target's seed corpus (``tests/fuzz/fuzz_ssh_preauth.py``).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.conch.ssh import keys, transport
from twisted.conch.ssh.common import NS
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed

# message numbers (RFC 4250 4.1.2)
DISCONNECT, IGNORE, UNIMPLEMENTED, SERVICE_REQUEST, SERVICE_ACCEPT = 1, 2, 3, 5, 6
USERAUTH_REQUEST, USERAUTH_FAILURE, USERAUTH_SUCCESS, USERAUTH_BANNER = 50, 51, 52, 53
USERAUTH_PK_OK = USERAUTH_INFO_REQUEST = 60
USERAUTH_INFO_RESPONSE = 61
GLOBAL_REQUEST, REQUEST_SUCCESS, REQUEST_FAILURE = 80, 81, 82
CHANNEL_OPEN, CHANNEL_OPEN_CONFIRMATION, CHANNEL_OPEN_FAILURE = 90, 91, 92
CHANNEL_WINDOW_ADJUST, CHANNEL_DATA, CHANNEL_EXTENDED_DATA = 93, 94, 95
CHANNEL_EOF, CHANNEL_CLOSE, CHANNEL_REQUEST = 96, 97, 98
CHANNEL_SUCCESS, CHANNEL_FAILURE = 99, 100


# -- message shapes

def userauth_request(user: bytes, method: bytes, data: bytes = b"",
                     service: bytes = b"ssh-connection") -> bytes:
    return NS(user) + NS(service) + NS(method) + data


def publickey_query(user: bytes, key: keys.Key) -> bytes:
    """A publickey request without a signature ("would this key do?")."""
    algorithm = signature_algorithm(key)
    return userauth_request(user, b"publickey",
                            b"\x00" + NS(algorithm) + NS(key.public().blob()))


def publickey(user: bytes, key: keys.Key, session_id: bytes) -> bytes:
    """A publickey request signed over ``session_id`` (RFC 4252 7)."""
    algorithm = signature_algorithm(key)
    request = userauth_request(user, b"publickey",
                               b"\x01" + NS(algorithm) + NS(key.public().blob()))
    signed = NS(session_id) + bytes((USERAUTH_REQUEST,)) + request
    return request + NS(key.sign(signed, signatureType=algorithm))


def keyboard_interactive(user: bytes) -> bytes:
    return userauth_request(user, b"keyboard-interactive", NS(b"") + NS(b""))


def info_response(*answers: bytes) -> bytes:
    return struct.pack(">L", len(answers)) + b"".join(NS(a) for a in answers)


def signature_algorithm(key: keys.Key) -> bytes:
    return b"rsa-sha2-512" if key.type() == "RSA" else key.sshType()


def channel_open(kind: bytes, sender: int, window: int = 1 << 20,
                 max_packet: int = 32768, extra: bytes = b"") -> bytes:
    return NS(kind) + struct.pack(">3L", sender, window, max_packet) + extra


# each channel message, for channel ``n``: its number and a well-formed payload
CHANNEL_MESSAGES: dict[str, Callable[[int], tuple[int, bytes]]] = {
    "data": lambda n: (CHANNEL_DATA, struct.pack(">L", n) + NS(b"x")),
    "extended_data": lambda n: (CHANNEL_EXTENDED_DATA, struct.pack(">2L", n, 1) + NS(b"x")),
    "window_adjust": lambda n: (CHANNEL_WINDOW_ADJUST, struct.pack(">2L", n, 1024)),
    "eof": lambda n: (CHANNEL_EOF, struct.pack(">L", n)),
    "close": lambda n: (CHANNEL_CLOSE, struct.pack(">L", n)),
    "request": lambda n: (CHANNEL_REQUEST, struct.pack(">L", n) + NS(b"env") + b"\x01"
                          + NS(b"LANG") + NS(b"C")),
    "open_confirmation": lambda n: (CHANNEL_OPEN_CONFIRMATION,
                                    struct.pack(">4L", n, 7, 1 << 20, 32768)),
    "open_failure": lambda n: (CHANNEL_OPEN_FAILURE,
                               struct.pack(">2L", n, 2) + NS(b"no") + NS(b"")),
    "success": lambda n: (CHANNEL_SUCCESS, struct.pack(">L", n)),
    "failure": lambda n: (CHANNEL_FAILURE, struct.pack(">L", n)),
}


# -- the client


class RawClient(transport.SSHClientTransport):
    """Conch's client transport up to NEWKEYS; afterwards every packet but a
    key exchange's is recorded in ``received`` and nothing is answered."""

    supportedKeyExchanges = [b"curve25519-sha256", b"curve25519-sha256@libssh.org",
                             b"ecdh-sha2-nistp256"]
    supportedCiphers = [b"aes128-ctr", b"aes256-ctr"]
    supportedMACs = [b"hmac-sha2-256", b"hmac-sha2-512"]
    supportedCompressions = [b"none"]
    supportedPublicKeys = [b"ssh-ed25519", b"ecdsa-sha2-nistp256", b"rsa-sha2-512",
                           b"rsa-sha2-256"]

    def __init__(self) -> None:
        self.secure = False
        self.host_key = b""
        self.received: list[tuple[int, bytes]] = []
        self.disconnect: tuple[int, bytes] | None = None

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> Deferred[bool]:
        self.host_key = hostKey
        return succeed(True)

    def connectionSecure(self) -> None:
        self.secure = True

    def dispatchMessage(self, messageNum: int, payload: bytes) -> None:
        if messageNum == DISCONNECT or 20 <= messageNum < 50:
            base: Any = super()
            base.dispatchMessage(messageNum, payload)
        else:
            self.received.append((messageNum, payload))

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        self.disconnect = (reasonCode, description)

    def send(self, kind: int, payload: bytes) -> None:
        wire: Any = self
        wire.sendPacket(kind, payload)

    @property
    def session_id(self) -> bytes:
        wire: Any = self
        return bytes(wire.sessionID)


@dataclass
class Outbox:
    """The Twisted transport of a ``RawClient``: what it writes, kept until sent."""

    peer: Any = field(default_factory=lambda: IPv4Address("TCP", "127.0.0.1", 1))
    data: bytearray = field(default_factory=bytearray)
    disconnecting: bool = False

    def write(self, data: bytes) -> None:
        self.data += data

    def writeSequence(self, data: list[bytes]) -> None:
        self.data += b"".join(data)

    def loseConnection(self) -> None:
        self.disconnecting = True

    def abortConnection(self) -> None:
        self.disconnecting = True

    def getPeer(self) -> Any:
        return self.peer

    def getHost(self) -> Any:
        return self.peer

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


class RawSSH:
    """A ``RawClient`` on a blocking socket to ``127.0.0.1:port``."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client = RawClient()
        self.out = Outbox()
        self.closed = False  # the server closed the TCP connection
        self._answered = 0  # packets ``answer`` has looked at
        self.client.makeConnection(self.out)
        self._flush()
        self.wait(lambda: self.client.secure, "the key exchange")

    def _flush(self) -> None:
        data = self.out.take()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def _read(self, deadline: float) -> None:
        self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self.client.dataReceived(chunk)
        self._flush()

    def wait(self, done: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.timeout)
        while not done():
            if self.closed or time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen (closed={self.closed}, "
                                     f"received={self.client.received[-5:]!r}, "
                                     f"disconnect={self.client.disconnect!r})")
            self._read(deadline)

    def send(self, kind: int, payload: bytes) -> None:
        self.client.send(kind, payload)
        self._flush()

    def expect(self, *kinds: int, timeout: float | None = None) -> tuple[int, bytes]:
        """The first packet received from now on whose kind is among ``kinds``."""
        start = len(self.client.received)
        found: list[tuple[int, bytes]] = []

        def seen() -> bool:
            found[:] = [p for p in self.client.received[start:] if p[0] in kinds]
            return bool(found)

        self.wait(seen, f"a packet of kind {kinds}", timeout)
        return found[0]

    def answer(self, *kinds: int, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next packet (after those already taken by ``answer``) whose kind is among
        ``kinds``, or None once the server has closed the connection without one."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            while self._answered < len(self.client.received):
                packet = self.client.received[self._answered]
                self._answered += 1
                if packet[0] in kinds:
                    return packet
            if self.closed:
                return None
            if time.monotonic() > deadline:
                raise AssertionError(f"a packet of kind {kinds}: not seen in time")
            self._read(deadline)

    def disconnected(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The server's DISCONNECT (code, description), once the connection is closed."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        assert self.closed, "the server did not close the connection"
        assert self.client.disconnect is not None, "closed without SSH_MSG_DISCONNECT"
        return self.client.disconnect

    def authenticate(self, user: bytes, key: keys.Key) -> None:
        """ssh-userauth with ``key`` (bound to a signed-in session already)."""
        self.send(SERVICE_REQUEST, NS(b"ssh-userauth"))
        self.expect(SERVICE_ACCEPT)
        self.send(USERAUTH_REQUEST, publickey(user, key, self.client.session_id))
        kind, payload = self.expect(USERAUTH_SUCCESS, USERAUTH_FAILURE)
        assert kind == USERAUTH_SUCCESS, payload

    def open_session(self, sender: int = 0) -> int:
        """A session channel: the server's id for it."""
        self.send(CHANNEL_OPEN, channel_open(b"session", sender))
        kind, payload = self.expect(CHANNEL_OPEN_CONFIRMATION, CHANNEL_OPEN_FAILURE)
        assert kind == CHANNEL_OPEN_CONFIRMATION, payload
        recipient, server_id = struct.unpack(">2L", payload[:8])
        assert recipient == sender
        return int(server_id)

    def close(self) -> None:
        self.sock.close()


class MemoryLink:
    """A ``RawClient`` and a server protocol joined in memory: ``pump`` moves bytes
    both ways until neither side writes more (bounded by ``rounds``)."""

    def __init__(self, server: Any, server_wire: Any) -> None:
        self.client = RawClient()
        self.out = Outbox()
        self.server = server
        self.server_wire = server_wire  # a StringTransport
        self.client.makeConnection(self.out)
        server.makeConnection(server_wire)
        self.pump()

    def pump(self, rounds: int = 64) -> None:
        for _ in range(rounds):
            to_server = self.out.take()
            to_client = self.server_wire.value()
            self.server_wire.clear()
            if not to_server and not to_client:
                return
            if to_server and not self.server_wire.disconnecting:
                self.server.dataReceived(to_server)
            if to_client and not self.out.disconnecting:
                self.client.dataReceived(to_client)

    def send(self, kind: int, payload: bytes) -> None:
        self.client.send(kind, payload)
        self.pump()
