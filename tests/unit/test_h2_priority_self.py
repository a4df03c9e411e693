"""A PRIORITY frame that makes a stream depend on itself is a stream error PROTOCOL_ERROR
(RFC 9113 5.3.1), in whatever state the stream is (6.3: PRIORITY may name idle and
closed streams too).

Regression (issue 28, h2spec ``http2/5.3.1/2``): the engine parsed PRIORITY frames and
ignored them all, this one included, so h2spec waited for a RST_STREAM that never came.
The HEADERS frame with the same priority was refused already (``test_h2_engine``)."""

from __future__ import annotations

from hyperframe.frame import GoAwayFrame, PriorityFrame, RstStreamFrame
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.http2.engine import H2Engine
from gateway.dataplane.http2.events import RequestReceived, StreamMalformed
from gateway.dataplane.http2.protocol import ErrorCode
from tests.support import h2frames as f

REQUEST = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"a.test"),
           (b":path", b"/x")]


def priority(stream_id: int, depends_on: int, exclusive: bool = False) -> bytes:
    return bytes(PriorityFrame(stream_id, depends_on=depends_on, stream_weight=255,
                               exclusive=exclusive).serialize())


class SelfDependencyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.engine = H2Engine(128, 256, 65536)
        self.engine.initiate()
        self.frames = f.Frames()
        self.engine.receive(f.hello())
        self.inbox = bytearray()
        self.sent()  # our SETTINGS and the ACK of theirs

    def sent(self) -> list[object]:
        self.inbox += self.engine.data_to_send()
        frames = f.parse(self.inbox)
        self.inbox.clear()
        return frames

    def resets(self, frames: list[object]) -> list[tuple[int, int]]:
        self.assertFalse([x for x in frames if isinstance(x, GoAwayFrame)])  # stream errors
        return [(x.stream_id, x.error_code) for x in frames if isinstance(x, RstStreamFrame)]

    def test_idle_stream_is_reset(self) -> None:
        """h2spec's case: PRIORITY on stream 1 before any request, depending on 1."""
        self.assertEqual(self.engine.receive(priority(1, 1)), [])
        self.assertEqual(self.resets(self.sent()), [(1, ErrorCode.PROTOCOL_ERROR)])
        # a stream error only: the connection goes on
        events = self.engine.receive(self.frames.headers(3, REQUEST, end_stream=True))
        self.assertEqual([(type(ev), ev.stream_id) for ev in events], [(RequestReceived, 3)])

    def test_exclusive_flag_does_not_hide_it(self) -> None:
        self.engine.receive(priority(5, 5, exclusive=True))
        self.assertEqual(self.resets(self.sent()), [(5, ErrorCode.PROTOCOL_ERROR)])

    def test_open_stream_is_reset_and_its_request_dropped(self) -> None:
        """A request in flight: reset, and the codec is told (EV_MALFORMED) so the
        upstream request is released; its late DATA is then ignored."""
        self.engine.receive(self.frames.headers(1, REQUEST, end_stream=False))
        self.sent()
        events = self.engine.receive(priority(1, 1))
        self.assertEqual([(type(ev), getattr(ev, "stream_id", 0)) for ev in events],
                         [(StreamMalformed, 1)])
        self.assertEqual(self.resets(self.sent()), [(1, ErrorCode.PROTOCOL_ERROR)])
        self.assertNotIn(1, self.engine.streams)
        self.assertEqual(self.engine.receive(f.data(1, b"late", end_stream=True)), [])

    def test_closed_stream_gets_nothing(self) -> None:
        """Closed (answered both ways): nothing is left to end, and no frame but
        PRIORITY may be sent on a closed stream (RFC 9113 5.1)."""
        self.engine.receive(self.frames.headers(1, REQUEST, end_stream=True))
        self.engine.send_headers(1, [(b":status", b"204")], end_stream=True)
        self.sent()
        self.assertEqual(self.engine.receive(priority(1, 1)), [])
        self.assertEqual(self.sent(), [])

    def test_other_dependencies_are_still_ignored(self) -> None:
        self.engine.receive(self.frames.headers(1, REQUEST, end_stream=False))
        self.sent()
        for frame in (priority(1, 0), priority(1, 3), priority(3, 1), priority(7, 1)):
            self.assertEqual(self.engine.receive(frame), [])
        self.assertEqual(self.sent(), [])
        self.assertIn(1, self.engine.streams)
