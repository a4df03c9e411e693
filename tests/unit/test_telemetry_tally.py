"""``Tally``: the exported, failed and dropped counts of a sender that reloads replace
(the audit stream's OTLP queue, the metrics push) never go down when one is replaced."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.bounded_queue import Tally


class TallyTests(SynchronousTestCase):
    def test_replaced_senders_counts_are_carried(self) -> None:
        tally = Tally()
        self.assertEqual(tally.total(None), (0, 0, 0))
        self.assertEqual(tally.total((3, 1, 2)), (3, 1, 2))
        tally.retire((3, 1, 2))  # a reload replaces the sender
        self.assertEqual(tally.total(None), (3, 1, 2))
        self.assertEqual(tally.total((1, 0, 5)), (4, 1, 7))
        tally.retire((1, 0, 5))
        self.assertEqual(tally.total((0, 0, 0)), (4, 1, 7))
