"""An SSH client that does what OpenSSH's ``ssh`` never does: it proves a key of its own
(publickey with a signature), and when the gateway answers "partial success,
keyboard-interactive" it asks keyboard-interactive, and on every sign-in link it is
shown asks again instead of answering (issue 39, part 1: each ask used to make a new
sign-in ticket). Run as ``python -m tests.support.ssh_raw_flood``; it prints one JSON
object: the asks sent, the links shown (and how many distinct), the disconnect the
gateway sent, and the seconds it took.

Twisted Conch's client transport, with the userauth messages written by hand; in a
process of its own so that tests keep their own (no) reactor. Bounded by ``--asks``
and ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.ssh import keys, service, transport
from twisted.conch.ssh.common import NS, getNS
from twisted.internet import defer, protocol, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint

MSG_USERAUTH_REQUEST = 50
ASK = NS(b"keyboard-interactive") + NS(b"") + NS(b"")


class Flood(service.SSHService):
    name = b"ssh-userauth"
    protocolMessages = {51: "MSG_USERAUTH_FAILURE", 52: "MSG_USERAUTH_SUCCESS",
                        53: "MSG_USERAUTH_BANNER", 60: "MSG_USERAUTH_INFO_REQUEST"}

    def __init__(self, args: argparse.Namespace, result: dict[str, Any]) -> None:
        self.args = args
        self.result = result
        self.key = keys.Key(ed25519.Ed25519PrivateKey.generate())  # made up on the spot
        self.links: set[bytes] = set()

    def request(self, rest: bytes) -> None:
        conch: Any = self.transport
        conch.sendPacket(MSG_USERAUTH_REQUEST,
                         NS(self.args.user.encode()) + NS(b"ssh-connection") + rest)

    def serviceStarted(self) -> None:
        conch: Any = self.transport
        blob = self.key.public().blob()
        head = NS(b"publickey") + b"\x01" + NS(b"ssh-ed25519") + NS(blob)
        signed = (NS(conch.sessionID) + bytes((MSG_USERAUTH_REQUEST,))
                  + NS(self.args.user.encode()) + NS(b"ssh-connection") + head)
        self.request(head + NS(self.key.sign(signed)))

    def ask(self) -> None:
        if self.result["asks"] >= self.args.asks or \
                time.monotonic() - self.result["started"] >= self.args.seconds:
            self.result["stopped"] = "bound"
            conch: Any = self.transport
            conch.loseConnection()
            return
        self.result["asks"] += 1
        self.request(ASK)

    def ssh_USERAUTH_FAILURE(self, packet: bytes) -> None:
        methods, rest = getNS(packet)
        self.result["failures"] += 1
        if b"keyboard-interactive" in methods.split(b",") and rest[:1] == b"\x01":
            self.ask()
        else:
            conch: Any = self.transport
            conch.loseConnection()

    def ssh_USERAUTH_BANNER(self, packet: bytes) -> None:
        pass

    def ssh_USERAUTH_SUCCESS(self, packet: bytes) -> None:
        self.result["authenticated"] = True
        conch: Any = self.transport
        conch.loseConnection()

    def ssh_USERAUTH_INFO_REQUEST(self, packet: bytes) -> None:
        _name, instruction, _rest = getNS(packet, 2)
        self.result["links"] += 1
        self.links.add(instruction)
        self.result["distinct_links"] = len(self.links)
        self.ask()


class Client(transport.SSHClientTransport):
    def __init__(self, args: argparse.Namespace, result: dict[str, Any]) -> None:
        self.args = args
        self.result = result

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> defer.Deferred[bool]:
        return defer.succeed(True)  # loopback, in a test

    def connectionSecure(self) -> None:
        self.requestService(Flood(self.args, self.result))

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        self.result["disconnect"] = [reasonCode, description.decode("utf-8", "replace")]

    def connectionLost(self, reason: Any = None) -> None:
        super().connectionLost(reason)
        if reactor.running:
            reactor.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", default="alice@db")
    parser.add_argument("--asks", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    result: dict[str, Any] = {"asks": 0, "links": 0, "distinct_links": 0, "failures": 0,
                              "authenticated": False, "disconnect": None, "stopped": "",
                              "started": time.monotonic()}

    def failed(failure: Any) -> None:
        result["error"] = str(failure.value)
        reactor.stop()

    def too_late() -> None:
        result["stopped"] = "timeout"
        reactor.stop()

    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", args.port, timeout=10)
    factory = protocol.Factory.forProtocol(lambda: Client(args, result))
    endpoint.connect(factory).addErrback(failed)
    reactor.callLater(args.seconds + 10, too_late)
    reactor.run()
    result["seconds"] = round(time.monotonic() - result.pop("started"), 3)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
