"""Pending SSH sign-ins are bounded (issue 39, part 1: a client that asked
keyboard-interactive again and again, never answering, made ~4,300 tickets a second on
one connection): one per connection, per client address and in all; unanswered asks
count as failures; the ticket's 5 minutes and the login timer run from the first ask;
and a client address that keeps breaking the rules is refused for a while.

The ssh-userauth service runs on a recording transport with the real ``SignInDesk`` and
an in-memory databroker on a ``MemoryReactorClock``; the penalty on the real factory."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.ssh import keys
from twisted.conch.ssh.common import NS
from twisted.internet.address import IPv4Address
from twisted.internet.defer import ensureDeferred
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.known_hosts import fingerprint
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SSH_SIGN_IN
from gateway.databroker.ssh_records import SIGN_IN_SECONDS, confirm_sign_in, read_sign_in
from gateway.dataplane import penalty
from gateway.ssh import limits
from gateway.ssh.auth import GatewayUserAuth
from gateway.ssh.metrics import PENDING_SIGN_INS, REFUSED, SIGN_INS_REFUSED
from gateway.ssh.sign_ins import SignInDesk
from gateway.ssh.transport import GatewayFactory, GatewayServerTransport
from gateway.ssh.user_names import LoginTarget
from tests.support.ssh_fakes import FakeGate, FakeSSH
from tests.unit.test_ssh_auth import request, signed

INFO_REQUEST, FAILURE = 60, 51
ASK = request(b"alice@db", b"keyboard-interactive", NS(b"") + NS(b""))


class DeskGate(FakeGate):
    """The fake gate with the real sign-in desk."""

    def __init__(self, desk: SignInDesk) -> None:
        super().__init__()
        self.desk = desk

    async def start_sign_in(self, ssh: Any, target: LoginTarget, key_fingerprint: str
                            ) -> tuple[str, str]:
        return await self.desk.start(ssh.client_ip, target.route, target.login,
                                     key_fingerprint)

    def end_sign_in(self, ssh: Any, ticket: str, confirmed: bool) -> None:
        self.desk.end(ssh, ticket, confirmed)

    async def wait_sign_in(self, ssh: Any, ticket: str) -> Any:
        return await self.desk.wait(ssh, ticket) or None


def value(metric: Any, *labels: str) -> float:
    child = metric.labels(*labels) if labels else metric
    return float(child._value.get())


class Desk:
    def __init__(self, per_address: int = 5, total: int = 250) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_000_000.0)
        self.records = MemoryRecordStore(self.reactor.seconds)
        self.follower = ChangeFollower(self.reactor, self.records)
        self.follower.start()
        self.records.watch(self.follower.kick)
        self.desk = SignInDesk(self.records, self.reactor, self.follower,
                               lambda: "https://auth.example",
                               "/.gateway/ssh/", per_address, total)
        self.gate = DeskGate(self.desk)

    def connect(self, ip: str = "192.0.2.7", key: Any = None, user: bytes = b"alice@db"
                ) -> tuple[FakeSSH, GatewayUserAuth]:
        """A connection that proved ``key`` (a new one unless given) as ``user``."""
        ssh = FakeSSH(client_ip=ip)
        auth = GatewayUserAuth(ssh, self.gate)  # type: ignore[arg-type]
        auth.packetReceived(50, signed(ssh, key or ed25519.Ed25519PrivateKey.generate(),
                                       user))
        return ssh, auth

    def ask(self, ip: str = "192.0.2.7", key: Any = None, user: bytes = b"alice@db"
            ) -> FakeSSH:
        ssh, auth = self.connect(ip, key, user)
        auth.packetReceived(50, request(user, b"keyboard-interactive", NS(b"") + NS(b"")))
        return ssh

    def tickets(self) -> list[str]:
        return [r.id for r in self.successResult(self.records.query(SSH_SIGN_IN))]

    @staticmethod
    def successResult(d: Any) -> Any:
        out: list[Any] = []
        ensureDeferred(d).addCallback(out.append)
        assert out, "not synchronous"
        return out[0]


class OnePerConnectionTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def started(self) -> int:
        return sum(1 for e in self.logged
                   if "sign-in started" in str(e.get("log_format", "")))

    def test_asking_again_shows_the_same_ticket(self) -> None:
        """The second and later asks get the first ask's INFO_REQUEST, byte for byte:
        no new record, no new log line, the login timer extended once."""
        d = Desk()
        ssh, auth = d.connect()
        auth.packetReceived(50, ASK)
        first = ssh.sent[-1]
        self.assertEqual(first[0], INFO_REQUEST)
        self.assertEqual(len(d.tickets()), 1)
        self.assertIn(d.tickets()[0].encode(), first[1])
        for _ in range(5):
            auth.packetReceived(50, ASK)
            self.assertEqual(ssh.sent[-1], first)
        self.assertEqual(len(d.tickets()), 1)
        self.assertEqual(self.started(), 1)
        self.assertEqual(ssh.graces, 1)

    def test_unanswered_asks_are_failures(self) -> None:
        """Each ask after the first is a failed attempt: past AUTH_ATTEMPTS (the partial
        success counted one) the connection is cut, a strike against its address,
        and its ticket is deleted."""
        d = Desk()
        ssh, auth = d.connect()  # failure 1: partial success
        auth.packetReceived(50, ASK)  # the sign-in starts
        for _ in range(limits.AUTH_ATTEMPTS - 1):  # failures 2..10
            auth.packetReceived(50, ASK)
        self.assertIsNone(ssh.disconnected)
        auth.packetReceived(50, ASK)
        assert ssh.disconnected is not None
        self.assertIn(b"too many authentication failures", ssh.disconnected[1])
        self.assertEqual(ssh.strikes, ["auth_attempts"])
        self.assertEqual(len(d.tickets()), 1)

    def test_five_minutes_from_the_first_ask(self) -> None:
        """A ticket asked for at t, shown again at t+200, expires at t+300; a client
        that answers at t+250 waits until t+300 and no longer."""
        d = Desk()
        start = d.reactor.seconds()
        ssh, auth = d.connect()
        auth.packetReceived(50, ASK)
        ticket = d.tickets()[0]
        d.reactor.advance(200)
        auth.packetReceived(50, ASK)
        self.assertEqual(d.tickets(), [ticket])
        pending = d.successResult(read_sign_in(d.records, ticket, d.reactor.seconds()))
        self.assertEqual(pending.expires_at, start + SIGN_IN_SECONDS)
        self.assertEqual(ssh.graces, 1)
        d.reactor.advance(50)
        auth.packetReceived(61, b"\x00\x00\x00\x00")
        d.reactor.pump([limits.SIGN_IN_WAIT / 600] * 99)  # to t+299.5: still waiting
        self.assertIsNone(ssh.disconnected)
        d.reactor.pump([limits.SIGN_IN_WAIT / 600] * 2)
        assert ssh.disconnected is not None
        self.assertIn(b"not completed in time", ssh.disconnected[1])
        self.assertEqual(ssh.strikes, [])  # a person too slow breaks no rule

    def test_login_timer_is_extended_once(self) -> None:
        """The transport's login timer: the first extension moves it, a second one
        (however late) does not."""
        reactor = MemoryReactorClock()
        factory = GatewayFactory(reactor, [], lambda t: None)
        proto = factory.buildProtocol(IPv4Address("TCP", "192.0.2.9", 1))
        assert isinstance(proto, GatewayServerTransport)
        wire = StringTransport()
        proto.makeConnection(wire)
        reactor.advance(10)
        proto.extend_grace(100)  # due at 110
        reactor.advance(90)
        proto.extend_grace(100)  # would be 200
        reactor.advance(11)
        self.assertTrue(wire.disconnecting)


class BoundTests(SynchronousTestCase):
    def test_per_address_and_total(self) -> None:
        """The sixth pending sign-in of an address is refused (disconnect, a strike);
        others' go on until the total (refused without a strike: not their doing).
        A connection that ends leaves its ticket pending (its person may still confirm
        it); tickets free their place when they expire, 5 minutes after they started."""
        d = Desk(per_address=5, total=7)
        gauge = value(PENDING_SIGN_INS)
        refused_address = value(SIGN_INS_REFUSED, "address")
        refused_total = value(SIGN_INS_REFUSED, "total")
        for _ in range(5):
            self.assertEqual(d.ask("192.0.2.7").kinds()[-1], INFO_REQUEST)
        ssh = d.ask("192.0.2.7")
        assert ssh.disconnected is not None
        self.assertEqual(ssh.disconnected[0], 12)
        self.assertIn(b"too many sign-ins are pending from your address",
                      ssh.disconnected[1])
        self.assertEqual(ssh.strikes, ["sign_in_bound"])
        self.assertEqual(value(SIGN_INS_REFUSED, "address"), refused_address + 1)
        d.reactor.advance(100)
        for ip in ("192.0.2.8", "192.0.2.9"):
            self.assertEqual(d.ask(ip).kinds()[-1], INFO_REQUEST)
        self.assertEqual(value(PENDING_SIGN_INS), gauge + 7)
        ssh = d.ask("192.0.2.10")
        assert ssh.disconnected is not None
        self.assertIn(b"too many sign-ins are pending at the gateway", ssh.disconnected[1])
        self.assertEqual(ssh.strikes, [])
        self.assertEqual(value(SIGN_INS_REFUSED, "total"), refused_total + 1)
        self.assertEqual(len(d.tickets()), 7)
        d.reactor.advance(SIGN_IN_SECONDS - 100)  # the first five expire
        self.assertEqual(d.ask("192.0.2.7").kinds()[-1], INFO_REQUEST)
        self.assertEqual(value(PENDING_SIGN_INS), gauge + 3)
        d.reactor.advance(SIGN_IN_SECONDS)
        d.ask("192.0.2.11")
        self.assertEqual(value(PENDING_SIGN_INS), gauge + 1)

    def test_the_same_key_connecting_again_is_shown_the_same_ticket(self) -> None:
        """Ctrl-C and ssh again: the same link (no new record, no new place taken),
        unless it has less than a minute left; another route or login, another ticket."""
        d = Desk(per_address=2)
        key = ed25519.Ed25519PrivateKey.generate()
        first = d.ask(key=key).sent[-1]
        d.reactor.advance(SIGN_IN_SECONDS - 61)
        for _ in range(3):
            self.assertEqual(d.ask(key=key).sent[-1], first)
        self.assertEqual(len(d.tickets()), 1)
        other = d.ask(key=key, user=b"root@db").sent[-1]
        self.assertNotEqual(other, first)
        self.assertEqual(len(d.tickets()), 2)
        d.reactor.advance(2)  # under a minute left: a new one (the old one still counts)
        ssh = d.ask(key=key)
        assert ssh.disconnected is not None
        self.assertIn(b"from your address", ssh.disconnected[1])

    def test_an_ipv6_client_is_its_64(self) -> None:
        d = Desk(per_address=2)
        for ip in ("2001:db8::1", "2001:db8::2", "2001:db8:0:1::1"):
            self.assertEqual(d.ask(ip).kinds()[-1], INFO_REQUEST, ip)
        ssh = d.ask("2001:db8::3")
        assert ssh.disconnected is not None
        self.assertIn(b"from your address", ssh.disconnected[1])

    def test_a_record_that_cannot_be_written_takes_no_place(self) -> None:
        d = Desk(per_address=1)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("storage down")

        d.records.put = broken  # type: ignore[method-assign]
        self.assertIsNotNone(d.ask().disconnected)
        self.assertEqual(len(self.flushLoggedErrors(ConnectionError)), 1)
        self.assertEqual(len(d.desk.pending), 0)
        del d.records.put
        self.assertEqual(d.ask().kinds()[-1], INFO_REQUEST)

    def test_a_fingerprint_is_what_the_record_names(self) -> None:
        d = Desk()
        key = ed25519.Ed25519PrivateKey.generate()
        d.ask(key=key)
        pending = d.successResult(read_sign_in(d.records, d.tickets()[0],
                                               d.reactor.seconds()))
        self.assertEqual(pending.fingerprint,
                         fingerprint(keys.Key(key).public().blob()))


class PenaltyTests(SynchronousTestCase):
    def make(self) -> tuple[GatewayFactory, MemoryReactorClock]:
        reactor = MemoryReactorClock()
        reactor.advance(1000)
        factory = GatewayFactory(reactor, [], lambda t: None)
        self.assertFalse(factory.penalties.off, "GATEWAY_TEST_ONLY_NO_PENALTY is set")
        return factory, reactor

    def test_strikes_refuse_new_connections_for_a_while(self) -> None:
        """Three connections cut for breaking rules within the window: new connections
        of the address are held unread (tarpit), others' are served; after the penalty
        the address is served again."""
        factory, reactor = self.make()
        addr = IPv4Address("TCP", "192.0.2.9", 1)
        refused = value(REFUSED, "penalty")
        for _ in range(penalty.STRIKES):
            proto = factory.buildProtocol(addr)
            assert isinstance(proto, GatewayServerTransport)
            wire = StringTransport(peerAddress=addr)
            proto.makeConnection(wire)
            proto.dataReceived(b"SSH-2.0-x\r\n")
            proto.dataReceived(b"\x00" * (limits.PREAUTH_BUFFER + 1))  # a strike
            self.assertTrue(wire.disconnecting)
            proto.connectionLost(None)
            reactor.advance(1)
        held = factory.buildProtocol(addr)
        self.assertIsNotNone(held)
        self.assertNotIsInstance(held, GatewayServerTransport)
        self.assertEqual(value(REFUSED, "penalty"), refused + 1)
        self.assertIsInstance(factory.buildProtocol(IPv4Address("TCP", "192.0.2.10", 1)),
                              GatewayServerTransport)
        reactor.advance(penalty.PENALTY + 0.1)
        self.assertIsInstance(factory.buildProtocol(addr), GatewayServerTransport)

    def test_the_login_grace_is_no_strike(self) -> None:
        factory, reactor = self.make()
        addr = IPv4Address("TCP", "192.0.2.9", 1)
        for _ in range(penalty.STRIKES + 1):
            proto = factory.buildProtocol(addr)
            assert isinstance(proto, GatewayServerTransport)
            wire = StringTransport(peerAddress=addr)
            proto.makeConnection(wire)
            reactor.advance(limits.LOGIN_GRACE + 1)
            self.assertTrue(wire.disconnecting)
            proto.connectionLost(None)
        self.assertIsInstance(factory.buildProtocol(addr), GatewayServerTransport)

    def test_auth_cuts_strike_through_the_transport(self) -> None:
        """The userauth service's cuts reach the factory's penalties."""
        factory, _ = self.make()
        addr = IPv4Address("TCP", "192.0.2.9", 1)
        for _ in range(penalty.STRIKES):
            proto = factory.buildProtocol(addr)
            assert isinstance(proto, GatewayServerTransport)
            proto.makeConnection(StringTransport(peerAddress=addr))
            proto.strike("auth_attempts")
        self.assertNotIsInstance(factory.buildProtocol(addr), GatewayServerTransport)


class EndTests(SynchronousTestCase):
    def test_a_confirmed_sign_in_is_no_longer_pending(self) -> None:
        """Confirmed and let in: its place is free at once (its record, with the
        session id, lives on so that the confirmation page can be reloaded)."""
        d = Desk()
        d.gate.confirmed = "session"
        ssh, auth = d.connect()
        auth.packetReceived(50, ASK)
        ticket = d.tickets()[0]
        pending = d.successResult(read_sign_in(d.records, ticket, d.reactor.seconds()))
        d.successResult(confirm_sign_in(d.records, pending, "session", 2e9))
        auth.packetReceived(61, b"\x00\x00\x00\x00")
        d.reactor.advance(1)
        self.assertTrue(ssh.authenticated)
        auth.serviceStopped()  # (Conch stops it when the connection service starts)
        self.assertEqual(d.tickets(), [ticket])
        self.assertEqual(len(d.desk.pending), 0)
