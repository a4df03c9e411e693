"""Trust on first use decided before connecting, once among processes sharing the
databroker (``gateway.ssh.pins``): of two connections to an unpinned route at once, one
may pin the key it meets and the other waits for that pin; a pin already made is the
one compared; a lease holder that never met a key gives the lease up."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock, deferLater
from twisted.trial.unittest import SynchronousTestCase

from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.ssh_records import pin_host_key, pinned_host_key
from gateway.ssh import pins

KEY_A = b"\x00\x00\x00\x0bssh-ed25519A"


class HeldReads:
    """A store whose reads wait until the test lets them go (two processes' reads,
    both before either writes)."""

    def __init__(self, clock: Clock) -> None:
        self.inner = MemoryRecordStore(clock.seconds)
        self.waiting: list[tuple[Deferred[Any], tuple[str, str]]] = []

    def get(self, type: str, id: str) -> Deferred[Any]:
        held: Deferred[Any] = Deferred()
        self.waiting.append((held, (type, id)))
        return held

    def release_reads(self) -> None:
        waiting, self.waiting = self.waiting, []
        for held, (type, id) in waiting:
            held.callback(self.inner.get_now(type, id))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ClaimTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = HeldReads(self.clock)

    def claim(self, holder: str) -> Deferred[pins.Claim]:
        return ensureDeferred(pins.claim(self.store, "db", holder,  # type: ignore[arg-type]
                                         lambda s: deferLater(self.clock, s)))

    def advance(self, steps: int = 200) -> None:
        for _ in range(steps):
            self.store.release_reads()
            self.clock.advance(pins.POLL_SECONDS)

    def test_of_two_at_once_one_may_pin_and_the_other_compares_with_its_pin(self) -> None:
        first, second = self.claim("one"), self.claim("two")
        self.store.release_reads()  # both read "no pin yet"
        self.store.release_reads()  # (the lease holder reads again)
        mine = self.successResultOf(first)
        self.assertTrue(mine.may_pin)
        self.assertNoResult(second)  # waiting for the pin
        self.successResultOf(ensureDeferred(pins.pin(self.store.inner, mine, KEY_A)))
        self.advance()
        other = self.successResultOf(second)
        self.assertEqual((other.pinned, other.may_pin), (KEY_A, False))
        # the lease was given up with the pin
        self.assertTrue(self.successResultOf(self.store.inner.lease(
            pins.lease_name("db"), "three", 1.0)))

    def test_a_pin_already_made_is_the_one_compared(self) -> None:
        ensureDeferred(pin_host_key(self.store.inner, "db", KEY_A))
        held = self.claim("one")
        self.advance(1)
        self.assertEqual(self.successResultOf(held).pinned, KEY_A)

    def test_a_pin_that_never_appears_is_neither_pinned_nor_pinnable(self) -> None:
        first, second = self.claim("one"), self.claim("two")
        self.advance()
        self.assertTrue(self.successResultOf(first).may_pin)
        other = self.successResultOf(second)
        self.assertEqual((other.pinned, other.may_pin), (None, False))

    def test_giving_up_frees_the_route_for_the_next_connection(self) -> None:
        first = self.claim("one")
        self.advance(2)
        self.successResultOf(ensureDeferred(pins.give_up(self.store.inner,
                                                         self.successResultOf(first))))
        later = self.claim("two")
        self.advance(2)
        self.assertTrue(self.successResultOf(later).may_pin)
        self.assertIsNone(self.successResultOf(pinned_host_key(self.store.inner, "db")))
