"""``Tally``: the exported, failed and dropped counts of a queue that reloads replace
(the audit stream's OTLP queue, the metrics push) never go down when one is replaced,
and the replaced queue is stopped."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.bounded_queue import BoundedQueue, Tally


class _Sent(BoundedQueue[bytes]):
    """A queue whose counts the test sets (its worker thread never started)."""

    def __init__(self, counts: tuple[int, int, int]) -> None:
        self.fixed = counts
        self.stopped = False

    def counts(self) -> tuple[int, int, int]:
        return self.fixed

    def stop(self, timeout: float) -> None:
        self.stopped = True



class TallyTests(SynchronousTestCase):
    def test_replaced_queues_counts_are_carried(self) -> None:
        tally = Tally()
        self.assertEqual(tally.total(None), (0, 0, 0))
        first = _Sent((3, 1, 2))
        self.assertEqual(tally.total(first), (3, 1, 2))
        tally.retire(first)  # a reload replaces the queue
        self.assertTrue(first.stopped)
        self.assertEqual(tally.total(None), (3, 1, 2))
        second = _Sent((1, 0, 5))
        self.assertEqual(tally.total(second), (4, 1, 7))
        tally.retire(second)
        tally.retire(None)  # nothing was running
        self.assertEqual(tally.total(_Sent((0, 0, 0))), (4, 1, 7))
