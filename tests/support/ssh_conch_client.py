"""An SSH client that sends what OpenSSH's ``ssh`` never does by itself: a ``signal``
channel request (RFC 4254 6.9). Run as ``python -m tests.support.ssh_conch_client``:
it logs in with a key by publickey only (a key the gateway already bound), opens one
session channel (with a pty when asked), runs ``--command``, waits for ``--ready`` in
its output, sends ``signal --signal`` and prints one JSON object when the channel
closes: the output, exit-status, exit-signal and whether it finished in time.

Twisted Conch's client, in a process of its own so that tests keep their own (no)
reactor; every wait is bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from typing import Any

from twisted.conch.ssh import channel, common, connection, keys, transport, userauth
from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint


class Session(channel.SSHChannel):
    name = b"session"

    def __init__(self, args: argparse.Namespace, result: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.args = args
        self.result = result
        self.output = b""
        self.signalled = False

    def channelOpen(self, specificData: bytes) -> None:
        conn: Any = self.conn
        if self.args.pty:
            conn.sendRequest(self, b"pty-req", common.NS(b"xterm") +
                             struct.pack(">4L", 80, 24, 0, 0) + common.NS(b""), wantReply=1)
        conn.sendRequest(self, b"exec", common.NS(self.args.command.encode()), wantReply=1)

    def dataReceived(self, data: bytes) -> None:
        self.output += data
        if not self.signalled and self.args.ready.encode() in self.output:
            self.signalled = True
            conn: Any = self.conn
            # (want_reply false, as RFC 4254 6.9 sends it)
            conn.sendRequest(self, b"signal", common.NS(self.args.signal.encode()))
            self.result["signal_sent"] = True

    def request_exit_status(self, data: bytes) -> int:
        self.result["exit_status"] = struct.unpack(">L", data[:4])[0]
        return 1

    def request_exit_signal(self, data: bytes) -> int:
        self.result["exit_signal"] = common.getNS(data)[0].decode()
        return 1

    def eofReceived(self) -> None:
        conn: Any = self.conn
        conn.sendEOF(self)

    def closed(self) -> None:
        self.result["output"] = self.output.decode("utf-8", "replace")
        self.result["closed"] = True
        conn: Any = self.conn
        conn.transport.loseConnection()


class Connection(connection.SSHConnection):
    def __init__(self, args: argparse.Namespace, result: dict[str, Any]) -> None:
        base: Any = super()
        base.__init__()
        self.args = args
        self.result = result

    def serviceStarted(self) -> None:
        self.result["authenticated"] = True
        wire: Any = self
        wire.openChannel(Session(self.args, self.result, conn=self))


class UserAuth(userauth.SSHUserAuthClient):
    preferredOrder = [b"publickey"]

    def __init__(self, user: bytes, instance: Connection, key: keys.Key) -> None:
        super().__init__(user, instance)
        self.key = key

    def getPublicKey(self) -> Any:
        if getattr(self, "_offered", False):
            return None
        self._offered = True
        return self.key.public()

    def getPrivateKey(self) -> defer.Deferred[keys.Key]:
        return defer.succeed(self.key)


class Client(transport.SSHClientTransport):
    def __init__(self, args: argparse.Namespace, result: dict[str, Any]) -> None:
        self.args = args
        self.result = result

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> defer.Deferred[bool]:
        return defer.succeed(True)  # loopback, in a test: the gateway's key is not pinned

    def connectionSecure(self) -> None:
        key = keys.Key.fromFile(self.args.key)
        self.requestService(UserAuth(self.args.user.encode(),
                                     Connection(self.args, self.result), key))

    def connectionLost(self, reason: Any = None) -> None:
        super().connectionLost(reason)
        if reactor.running:
            reactor.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--user", "--key", "--command", "--ready", "--signal"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pty", action="store_true")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    result: dict[str, Any] = {"authenticated": False, "signal_sent": False,
                              "exit_status": None, "exit_signal": None, "closed": False,
                              "timed_out": False}

    def connected(client: Client) -> None:
        pass

    def failed(failure: Any) -> None:
        result["error"] = str(failure.value)
        reactor.stop()

    def too_late() -> None:
        result["timed_out"] = True
        reactor.stop()

    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", args.port, timeout=10)
    factory = protocol.Factory.forProtocol(lambda: Client(args, result))
    endpoint.connect(factory).addCallbacks(connected, failed)
    reactor.callLater(args.timeout, too_late)
    reactor.run()
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
