"""Fuzz target: the SSH server before authentication, whole: the gateway's server
transport (``gateway.ssh.transport``) after a real key exchange with the raw test client
(``tests/support/ssh_raw.py``, in memory), its ``ssh-userauth`` (``gateway.ssh.auth``)
and, once a bound key proved itself, the person's connection service
(``gateway.ssh.channel_relay`` with ``message_checks``) over a server side that never answers,
or for a user name without a login the jump's outer connection (``gateway.ssh.jump``).

Input: a first byte choosing the gate (bit 0: the proven key is bound to a session, so
a valid signature is admitted; else it is not, and a sign-in never completes), then
operations, each a selector byte, a two-byte length and a body (``OPS`` names them):
a raw packet of any kind, a service request, a USERAUTH_REQUEST of a method chosen by
the body, a publickey query or a publickey request validly signed by the client's key
(the only proof the fuzzer can give), keyboard-interactive, an INFO_RESPONSE, each
channel message for a channel the body names, a channel open, a global request, time
passing (the login grace), and a body repeated to an oversize packet. The seed corpus
(``corpus/ssh_preauth``, written by ``seed_corpus``) is the raw client's message shapes:
hostile user names, oversize fields, answers out of turn, channel messages before and
after authentication.

Contract:

- nothing raises out of the server (a real reactor would log it with a traceback),
  and nothing is logged as a failure: a hostile packet ends, at worst, in a disconnect;
- nobody is admitted without proof: USERAUTH_SUCCESS and the gate's admit happen only
  with a bound key after a valid signature, never when the key is not bound;
- bounded: the server answers at most two packets per packet it gets (a banner and a
  failure), asks the gate for a sign-in at most once per connection (issue 39: asking
  again shows the same ticket), and only after a keyboard-interactive request,
  and buffers at most ``limits.PREAUTH_BUFFER`` bytes before authentication.
"""

from __future__ import annotations

import struct
from typing import Any

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway.ssh"):
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from twisted.conch.ssh import keys
    from twisted.conch.ssh.common import NS
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import MemoryReactorClock, StringTransport
    from twisted.logger import globalLogPublisher

    from gateway.ssh import limits
    from gateway.ssh.auth import GatewayUserAuth
    from gateway.ssh.channel_relay import Context, RelayedConnection
    from gateway.ssh.jump import JumpConnection
    from gateway.ssh.transport import GatewayFactory
    from gateway.ssh.upstream import UpstreamConnection
    from tests.support import ssh_raw as raw
    from tests.support.ssh_fakes import FakeGate

# fixed keys: a seed's behaviour does not depend on the run (the session id does, so a
# signature is made at each run by the ``signed`` operation, never stored)
HOST_KEY = keys.Key(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
CLIENT_KEY = keys.Key(ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))
METHODS = (b"publickey", b"keyboard-interactive", b"none", b"password", b"hostbased",
           b"gssapi-with-mic", b"")
CHANNEL_KINDS = tuple(raw.CHANNEL_MESSAGES)
OPS = ("packet", "service", "userauth", "query", "signed", "keyboard", "info", "channel",
       "open", "global", "time", "oversize")
MAX_OPS = 48


class SilentUpstream(UpstreamConnection):
    """A server that never confirms a channel: what the person's channels reach."""

    def __init__(self) -> None:
        from twisted.internet.defer import Deferred

        super().__init__(Deferred())
        self.opened: list[Any] = []

    def openChannel(self, channel: Any, extra: bytes = b"") -> None:
        self.opened.append(channel)


class Gate(FakeGate):
    async def admit(self, ssh: Any, target: Any, session: Any, key_fingerprint: str
                    ) -> Any:
        await super().admit(ssh, target, session, key_fingerprint)
        if not target.login:  # as the service does for a name that is no route: a jump
            return JumpConnection(lambda: {"db"}, lambda route: None, target.route)
        return RelayedConnection(SilentUpstream(), Context(
            connection_id="fuzz", route=target.route, login=target.login, user="fuzz",
            client="127.0.0.1", allow_port_forwarding=True, recordings=lambda *a: None,
            clock=lambda: 0.0))


def operations(data: bytes) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    position = 0
    while position + 3 <= len(data) and len(out) < MAX_OPS:
        selector, size = data[position], int.from_bytes(data[position + 1:position + 3], "big")
        out.append((OPS[selector % len(OPS)], data[position + 3:position + 3 + size]))
        position += 3 + size
    return out


def packet_of(op: str, body: bytes, session_id: bytes) -> tuple[int, bytes] | None:
    """The packet an operation sends (None: not a packet)."""
    head, rest = body[:1], body[1:]
    if op == "packet":
        return (head[0] if head else 0), rest
    if op == "service":
        return raw.SERVICE_REQUEST, NS(body)
    if op == "userauth":
        method = METHODS[head[0] % len(METHODS)] if head else b"none"
        user, _, data = rest.partition(b"\x00")
        return raw.USERAUTH_REQUEST, raw.userauth_request(user, method, data)
    if op == "query":
        return raw.USERAUTH_REQUEST, raw.publickey_query(body, CLIENT_KEY)
    if op == "signed":
        return raw.USERAUTH_REQUEST, raw.publickey(body, CLIENT_KEY, session_id)
    if op == "keyboard":
        return raw.USERAUTH_REQUEST, raw.keyboard_interactive(body)
    if op == "info":
        return raw.USERAUTH_INFO_RESPONSE, body
    if op == "channel":
        kind = CHANNEL_KINDS[head[0] % len(CHANNEL_KINDS)] if head else "data"
        channel = int.from_bytes(rest[:4].rjust(4, b"\x00"), "big") if rest else 0
        return raw.CHANNEL_MESSAGES[kind](channel)
    if op == "open":
        return raw.CHANNEL_OPEN, raw.channel_open(b"session" if not head or head[0] & 1
                                                  else b"direct-tcpip", 0, extra=rest)
    if op == "global":
        return raw.GLOBAL_REQUEST, NS(rest) + (head or b"\x01")
    if op == "oversize":
        size = (head[0] if head else 0) * 256
        return raw.IGNORE, NS((rest or b"A") * (size // max(len(rest), 1) + 1))[:size + 4]
    return None


def TestOneInput(data: bytes) -> None:
    bound = bool(data[:1] and data[0] & 1)
    failures: list[Any] = []

    def observe(event: Any) -> None:
        if event.get("log_failure") is not None:
            failures.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        run(data, bound, failures)
    finally:
        globalLogPublisher.removeObserver(observe)


def run(data: bytes, bound: bool, failures: list[Any]) -> None:
    gate = Gate(bound="session" if bound else None, confirmed=None)
    clock = MemoryReactorClock()
    factory = GatewayFactory(clock, [HOST_KEY], lambda ssh: GatewayUserAuth(ssh, gate))
    address = IPv4Address("TCP", "127.0.0.1", 40000)
    server: Any = factory.buildProtocol(address)
    link = raw.MemoryLink(server, StringTransport(peerAddress=address))
    assert link.client.secure, describe(data)
    sent = signed = keyboard = 0
    for op, body in operations(data[1:]):
        if link.out.disconnecting or link.server_wire.disconnecting:
            break
        if op == "time":
            clock.advance(body[0] if body else limits.LOGIN_GRACE)
            link.pump()
            continue
        packet = packet_of(op, body, link.client.session_id)
        assert packet is not None
        kind, payload = packet
        signed += op == "signed"
        keyboard += op == "keyboard" or (op == "userauth" and body[:1] != b"" and
                                         METHODS[body[0] % len(METHODS)] ==
                                         b"keyboard-interactive")
        sent += 1
        link.send(kind, payload)
        if not server.authenticated:
            assert len(server.buf) <= limits.PREAUTH_BUFFER, describe(data)
    assert not failures, (describe(data), failures[0].get("log_format"))
    answers = [k for k, _ in link.client.received if k not in (7, raw.SERVICE_ACCEPT)]
    assert len(answers) <= 2 * sent + 1, (describe(data), len(answers), sent)
    assert len(gate.asked) <= min(keyboard, 1), describe(data)
    success = raw.USERAUTH_SUCCESS in [k for k, _ in link.client.received]
    if not bound or not signed:
        assert gate.admitted == [] and not success, describe(data)
    assert success == bool(gate.admitted) or link.server_wire.disconnecting, describe(data)


def op(name: str, body: bytes = b"") -> bytes:
    return bytes((OPS.index(name),)) + struct.pack(">H", len(body)) + body


HOSTILE_USERS = (b"", b"root", b"root@db", b"@", b"@@", b"root@", b"@db", b"root@db@x",
                 b"a" * 300 + b"@db", b"root@" + b"d" * 300, b"root@db\x00evil",
                 b"root@db\r\nInjected: 1", b"\xff\xfe@db", "r\u00f6\u00f6t@db".encode(),
                 b"root@DB", b"root@db.", b"root@../db", b"root@db/x", b"root@%64b",
                 b"$(id)@db", b"root@db;ls", b"-oProxyCommand=x@db", b"root@*",
                 b"root@db:22", b"root@[::1]", b"a@b@c@d@e@f@g")


def seed_corpus() -> dict[str, bytes]:
    """The seeds, by file name (``corpus/ssh_preauth``)."""
    service = op("service", b"ssh-userauth")
    seeds: dict[str, bytes] = {
        "nothing": b"\x00",
        "service-only": b"\x00" + service,
        "service-unknown": b"\x00" + op("service", b"ssh-connection"),
        "service-twice": b"\x00" + service + service,
        "userauth-before-service": b"\x00" + op("keyboard", b"root@db"),
        "channel-before-auth": b"\x01" + service + op("open", b"\x01")
        + op("channel", b"\x00\x00\x00\x00\x00"),
        "info-out-of-turn": b"\x00" + service + op("info", raw.info_response(b"x")),
        "info-after-query": b"\x00" + service + op("query", b"root@db")
        + op("info", raw.info_response()),
        "signed-unbound-keyboard": b"\x00" + service + op("signed", b"root@db")
        + op("keyboard", b"root@db") + op("info", raw.info_response()),
        "keyboard-flood": b"\x00" + service + op("signed", b"root@db")
        + op("keyboard", b"root@db") * 40,
        "keyboard-other-user": b"\x00" + service + op("signed", b"root@db")
        + op("keyboard", b"admin@db"),
        "queries-40": b"\x00" + service + op("query", b"root@db") * 40,
        "grace-passes": b"\x00" + service + op("time", b"\x3d"),
        "bound-signed": b"\x01" + service + op("signed", b"root@db"),
        "oversize-ignore": b"\x00" + op("oversize", b"\xff" + b"Z"),
        "oversize-user": b"\x00" + service + op("userauth", b"\x00" + b"u" * 16000),
        "raw-garbage": b"\x00" + service + op("packet", b"\x32") + op("packet", b"\x3d\x00")
        + op("packet", b"\xff" + b"\x00" * 8),
    }
    for index, user in enumerate(HOSTILE_USERS):
        seeds[f"user-{index:02d}"] = b"\x00" + service + op("query", user) + \
            op("signed", user) + op("keyboard", user)
    for index in range(len(METHODS)):
        seeds[f"method-{index}"] = b"\x00" + service + \
            op("userauth", bytes((index,)) + b"root@db\x00" + b"\x01" + NS(b"x") * 3)
    for index, kind in enumerate(CHANNEL_KINDS):
        seeds[f"bound-{kind}-unknown"] = b"\x01" + service + op("signed", b"root@db") + \
            op("channel", bytes((index,)) + b"\x00\x00\x00\x07")
        seeds[f"bound-{kind}-pending"] = b"\x01" + service + op("signed", b"root@db") + \
            op("open", b"\x01") + op("channel", bytes((index,)) + b"\x00\x00\x00\x00")
        seeds[f"short-{kind}"] = b"\x01" + service + op("signed", b"root@db") + \
            op("packet", bytes((raw.CHANNEL_MESSAGES[kind](0)[0],)) + b"\x00\x00")
    for index, kind in enumerate(CHANNEL_KINDS):
        seeds[f"jump-{kind}-unknown"] = b"\x01" + service + op("signed", b"me") + \
            op("open", b"\x00" + NS(b"db") + struct.pack(">L", 22)) + \
            op("channel", bytes((index,)) + b"\x00\x00\x00\x00")
    seeds["bound-global-reply"] = b"\x01" + service + op("signed", b"root@db") + \
        op("packet", bytes((raw.REQUEST_SUCCESS,)))
    seeds["bound-global-short"] = b"\x01" + service + op("signed", b"root@db") + \
        op("global", b"")
    return seeds


if __name__ == "__main__":
    fuzz(TestOneInput)
