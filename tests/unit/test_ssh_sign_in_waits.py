"""A pending SSH sign-in is waited on through the databroker's change stream (issue 40,
item 4), not by reading the store every 0.5 s for 5 minutes: one read when the wait
starts, then the confirmation (here or in another process) fires the connection's
Deferred; the ticket's expiry, the connection's end and a deleted record end the wait,
and nothing is left behind.

The real ``ChangeFollower`` over a memory store, on a ``MemoryReactorClock``."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SSH_SIGN_IN, Record
from gateway.databroker.ssh_records import (
    SIGN_IN_SECONDS,
    PendingSignIn,
    confirm_sign_in,
    read_sign_in,
    start_sign_in,
)
from gateway.ssh.sign_in_waits import SignInWaits


class CountingStore(MemoryRecordStore):
    """Counts the reads of sign-in records (the change stream's syncs are not reads)."""

    reads = 0

    def get(self, type: str, id: str) -> Deferred[Record | None]:
        if type == SSH_SIGN_IN:
            self.reads += 1
        return super().get(type, id)


class Connection:
    """A waiting connection (only its identity matters)."""


class Env:
    def __init__(self, kick: bool = True) -> None:
        self.reactor = MemoryReactorClock()
        self.reactor.advance(1_000_000.0)
        self.records = CountingStore(self.reactor.seconds)
        self.follower = ChangeFollower(self.reactor, self.records)
        self.waits = SignInWaits(self.records, self.reactor, self.follower)
        self.follower.start()
        if kick:  # as ``Databroker.startService`` does for every store with a watch
            self.records.watch(self.follower.kick)
        self.reactor.advance(0)  # the first sync

    def start(self) -> PendingSignIn:
        return self.done(start_sign_in(self.records, "SHA256:k", "192.0.2.7", "db",
                                       "alice", self.reactor.seconds()))

    def wait(self, pending: PendingSignIn, connection: object | None = None
             ) -> list[str]:
        out: list[str] = []
        ensureDeferred(self.waits.wait(pending.ticket, connection or Connection())
                       ).addCallback(out.append)
        return out

    def confirm(self, pending: PendingSignIn, session_id: str = "sid") -> None:
        self.done(confirm_sign_in(self.records, pending, session_id, 2e9))

    @staticmethod
    def done(d: Any) -> Any:
        out: list[Any] = []
        ensureDeferred(d).addCallback(out.append)
        assert out, "not synchronous"
        return out[0]

    def timers(self) -> int:
        """Delayed calls besides the follower's own."""
        return len(self.reactor.getDelayedCalls()) - 1


class WaitTests(SynchronousTestCase):
    def test_a_confirmation_fires_the_wait_at_once(self) -> None:
        """A memory store's write kicks the follower: the waiting connection learns of
        its confirmation in the same turn of the reactor, not up to 0.5 s later."""
        env = Env()
        pending = env.start()
        got = env.wait(pending)
        env.reactor.advance(3.0)
        self.assertEqual(got, [])
        env.confirm(pending)
        env.reactor.advance(0)
        self.assertEqual(got, ["sid"])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))

    def test_a_confirmation_from_elsewhere_arrives_with_the_change_stream(self) -> None:
        """Written where this process's follower is not kicked (another process, on the
        shared store): the next sync brings it, within the follower's interval."""
        env = Env(kick=False)
        pending = env.start()
        got = env.wait(pending)
        env.confirm(pending)
        env.reactor.advance(0)
        self.assertEqual(got, [])
        env.reactor.advance(env.follower.interval)
        self.assertEqual(got, ["sid"])

    def test_one_read_per_wait_however_long_it_lasts(self) -> None:
        env = Env()
        tickets = [env.start() for _ in range(20)]
        waits = [env.wait(pending) for pending in tickets]
        env.reactor.pump([1.0] * 240)
        self.assertEqual(env.records.reads, 20)  # the polling made 20 * 480
        for pending in tickets:
            env.confirm(pending)
        env.reactor.advance(0)
        self.assertEqual(waits, [["sid"]] * 20)
        self.assertEqual(env.records.reads, 20)

    def test_a_confirmation_before_the_wait_is_read(self) -> None:
        env = Env()
        pending = env.start()
        env.confirm(pending, "early")
        env.reactor.advance(5)
        got = env.wait(pending)
        self.assertEqual(got, ["early"])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))

    def test_the_ticket_expiry_ends_the_wait(self) -> None:
        """Asked at t, waited on from t+250: "" at t+300 (the 5 minutes run from the
        first ask), and not before."""
        env = Env()
        start = env.reactor.seconds()
        pending = env.start()
        env.reactor.advance(250)
        got = env.wait(pending)
        env.reactor.advance(start + SIGN_IN_SECONDS - env.reactor.seconds() - 0.01)
        self.assertEqual(got, [])
        env.reactor.advance(0.02)
        self.assertEqual(got, [""])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))

    def test_the_connection_ending_ends_the_wait_and_leaves_nothing(self) -> None:
        env = Env()
        pending = env.start()
        connection = Connection()
        got = env.wait(pending, connection)
        self.assertEqual((len(env.waits), env.timers()), (1, 1))
        env.waits.stop(pending.ticket, connection)
        self.assertEqual(got, [""])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))
        env.confirm(pending)  # too late: nobody waits
        env.reactor.advance(1)
        self.assertEqual(got, [""])

    def test_a_deleted_ticket_ends_the_wait(self) -> None:
        env = Env()
        pending = env.start()
        got = env.wait(pending)
        env.done(env.records.delete(SSH_SIGN_IN, pending.ticket))
        env.reactor.advance(0)
        self.assertEqual(got, [""])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))

    def test_two_connections_on_one_ticket_both_go_on(self) -> None:
        """A ticket shown again to the same key on a new connection, the first still
        open: one confirmation lets both in; stopping one leaves the other waiting."""
        env = Env()
        pending = env.start()
        first, second, third = Connection(), Connection(), Connection()
        got = [env.wait(pending, first), env.wait(pending, second),
               env.wait(pending, third)]
        env.waits.stop(pending.ticket, third)
        env.confirm(pending)
        env.reactor.advance(0)
        self.assertEqual(got, [["sid"], ["sid"], [""]])
        self.assertEqual((len(env.waits), env.timers()), (0, 0))

    def test_a_restarted_change_stream_reads_the_waits_again(self) -> None:
        """The follower fell behind (or the store was emptied): a confirmation it may
        have skipped is read once again."""
        env = Env(kick=False)
        pending = env.start()
        got = env.wait(pending)
        env.confirm(pending)
        env.follower.version = -1  # the next sync is a reset
        env.reactor.advance(env.follower.interval)
        self.assertEqual(got, ["sid"])
        self.assertEqual(env.records.reads, 2)

    def test_a_still_pending_change_changes_nothing(self) -> None:
        env = Env()
        pending = env.start()
        got = env.wait(pending)
        env.done(env.records.put(SSH_SIGN_IN, pending.ticket, env.records.get_now(
            SSH_SIGN_IN, pending.ticket).data, expires_at=pending.expires_at))  # type: ignore[union-attr]
        env.reactor.advance(1)
        self.assertEqual(got, [])
        self.assertEqual(len(env.waits), 1)


class ConnectionTests(SynchronousTestCase):
    """Through ssh-userauth and the service's sign-in desk."""

    def answered(self) -> tuple[Any, Any, Any, str]:
        from tests.unit.test_ssh_sign_in_bounds import ASK, Desk

        d = Desk()
        d.reactor.advance(0)  # the follower's first sync
        ssh, auth = d.connect()
        auth.packetReceived(50, ASK)
        (ticket,) = d.tickets()
        auth.packetReceived(61, b"\x00\x00\x00\x00")  # answered: waiting
        return d, ssh, auth, ticket

    def test_a_confirmation_lets_the_connection_in_at_once(self) -> None:
        d, ssh, _auth, ticket = self.answered()
        pending = Env.done(read_sign_in(d.records, ticket, d.reactor.seconds()))
        Env.done(confirm_sign_in(d.records, pending, "session", 2e9))
        d.reactor.advance(0)
        self.assertTrue(ssh.authenticated)
        self.assertEqual(len(d.desk.waits), 0)

    def test_the_connection_ending_removes_its_wait(self) -> None:
        """Conch stops the auth service when the connection is lost: the wait ends
        then, its timer with it, and nothing is sent on the gone connection."""
        d, ssh, auth, ticket = self.answered()
        self.assertEqual(len(d.desk.waits), 1)
        calls = len(d.reactor.getDelayedCalls())
        auth.serviceStopped()
        self.assertEqual(len(d.desk.waits), 0)
        self.assertEqual(len(d.reactor.getDelayedCalls()), calls - 1)  # its expiry timer
        self.assertIsNone(ssh.disconnected)
        self.assertEqual(d.tickets(), [ticket])  # still pending: it may be confirmed
