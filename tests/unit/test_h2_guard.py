"""The HTTP/2 abuse guard as plain bookkeeping: frame headers split across reads, the
budgets' refill, and what counts against which limit."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.budget import Budget
from gateway.dataplane.http2 import guard as h2_guard
from gateway.dataplane.http2.guard import H2Guard
from tests.support import h2frames as f


class BudgetTests(SynchronousTestCase):
    def test_burst_then_rate(self) -> None:
        budget = Budget(3, 2.0, now=0.0)
        self.assertEqual([budget.take(0.0) for _ in range(4)], [True, True, True, False])
        self.assertTrue(budget.take(0.5))  # one token back after half a second
        self.assertFalse(budget.take(0.5))

    def test_credit(self) -> None:
        budget = Budget(1, 0.0, now=0.0)
        self.assertTrue(budget.take(0.0))
        self.assertFalse(budget.take(0.0, credit=0.5))
        self.assertTrue(budget.take(0.0, credit=0.5))


class FeedTests(SynchronousTestCase):
    def test_split_reads_count_the_same_frames(self) -> None:
        """Preface and frame headers cut at every byte: the same RST_STREAMs counted."""
        stream = f.PREFACE + f.data(1, b"x" * 100) + f.rst(1) * 5 + f.ping()
        whole, split = H2Guard(0.0), H2Guard(0.0)
        self.assertIsNone(whole.feed(stream, 0.0))
        for i in range(len(stream)):
            self.assertIsNone(split.feed(stream[i:i + 1], 0.0))
        self.assertEqual(whole.rst_frames.tokens, split.rst_frames.tokens)
        self.assertEqual(whole.rst_frames.tokens, h2_guard.RST_FRAME_BURST - 5)
        self.assertEqual(split.control.tokens, h2_guard.CONTROL_BURST - 1)
        # premature resets (of requests being served) are counted by the codec
        self.assertEqual(whole.resets.tokens, h2_guard.RESET_BURST)

    def test_rapid_reset_named_whatever_the_read_size(self) -> None:
        """Thousands of open-and-reset pairs in one read (a client writing faster than
        the gateway reads) are rapid reset, not a flood of stray RST_STREAMs."""
        frames = f.Frames()
        pairs = b"".join(frames.headers(sid, f.request_headers(b"/r", b"a.test")) + f.rst(sid)
                         for sid in range(1, 3001, 2))
        cut = H2Guard(0.0).feed(f.PREFACE + pairs, 0.0)
        assert cut is not None
        self.assertEqual(cut.limit, "rapid_reset")

    def test_a_read_past_a_turn_of_requests_is_cut_at_a_frame_boundary(self) -> None:
        """The request past STREAMS_PER_TURN begins where ``turn_end`` says; the rest
        (frame-aligned) is cut the same way by ``next_turn_end``, until nothing is left."""
        frames = f.Frames()
        turn = h2_guard.STREAMS_PER_TURN
        requests = [frames.headers(2 * i + 1, f.request_headers(b"/t", b"a.test"))
                    for i in range(2 * turn + 3)]
        read = f.PREFACE + f.settings() + b"".join(requests) + f.ping()
        guard = H2Guard(0.0)
        self.assertIsNone(guard.feed(read, 0.0))
        assert guard.turn_end is not None
        first = read[:guard.turn_end]
        self.assertTrue(first.endswith(requests[turn - 1]))
        rest = read[guard.turn_end:]
        second = h2_guard.next_turn_end(rest)
        self.assertEqual(rest[:second], b"".join(requests[turn:2 * turn]))
        self.assertIsNone(h2_guard.next_turn_end(rest[second:]))
        self.assertEqual(rest[second:], b"".join(requests[2 * turn:]) + f.ping())
        # a turn's worth of requests (or fewer) in a read: nothing deferred
        self.assertIsNone(guard.feed(b"".join(requests[:turn]), 0.0))
        self.assertIsNone(guard.turn_end)

    def test_resets_in_the_same_read_are_remembered_for_the_codec(self) -> None:
        """Those requests are never started, in whichever turn their HEADERS come."""
        frames = f.Frames()
        guard = H2Guard(0.0)
        guard.feed(f.PREFACE + frames.headers(1, f.request_headers(b"/", b"a.test"))
                   + f.rst(1) + f.rst(3), 0.0)
        self.assertEqual(guard.reset_in_read, {1})
        self.assertEqual(guard.resets.tokens, h2_guard.RESET_BURST - 1)

    def test_stray_resets_have_a_budget_of_their_own(self) -> None:
        cut = H2Guard(0.0).feed(f.PREFACE + f.rst(1) * (h2_guard.RST_FRAME_BURST + 1), 0.0)
        assert cut is not None
        self.assertEqual(cut.limit, "reset_flood")

    def test_data_and_ended_empty_data_are_not_control_frames(self) -> None:
        guard = H2Guard(0.0)
        guard.feed(f.PREFACE + f.data(1, b"x") + f.data(1, b"", end_stream=True), 0.0)
        self.assertEqual(guard.control.tokens, h2_guard.CONTROL_BURST)
        guard.feed(f.data(3, b""), 0.0)
        self.assertEqual(guard.control.tokens, h2_guard.CONTROL_BURST - 1)

    def test_bytes_sent_pay_for_control_frames(self) -> None:
        guard = H2Guard(0.0)
        guard.feed(f.PREFACE, 0.0)
        for _ in range(h2_guard.CONTROL_BURST):
            self.assertIsNone(guard.feed(f.ping(), 0.0))
        self.assertIsNotNone(H2Guard(0.0).feed(f.PREFACE + f.ping() * 2000, 0.0))
        guard.wrote(h2_guard.CONTROL_CREDIT_BYTES * 10, blocked=False)
        for _ in range(10):
            self.assertIsNone(guard.feed(f.ping(), 0.0))
        cut = guard.feed(f.ping(), 0.0)
        assert cut is not None
        self.assertEqual(cut.limit, "control_flood")

    def test_blocked_output(self) -> None:
        guard = H2Guard(0.0)
        self.assertIsNone(guard.wrote(h2_guard.BLOCKED_OUTPUT_MAX, blocked=True))
        self.assertIsNone(guard.wrote(10 << 20, blocked=False))
        cut = guard.wrote(1, blocked=True)
        assert cut is not None
        self.assertEqual((cut.limit, cut.abort), ("blocked_output", True))
