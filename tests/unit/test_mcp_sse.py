"""The incremental SSE reader and writer (``gateway.mcp.sse``): the same blocks whatever
the pieces the stream arrives in, every line end the standard allows, and blocks written
back that read as they were."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp.sse import EventTooLarge, SseEvent, SseReader, write_event


def read_all(pieces: list[bytes], bound: int = 1 << 20) -> tuple[list[SseEvent], bytes]:
    reader = SseReader(bound)
    events: list[SseEvent] = []
    for piece in pieces:
        events.extend(reader.feed(piece))
    return events, reader.close()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for point in points:
        out.append(data[last:point])
        last = point
    out.append(data[last:])
    return out


STREAM = (b"\xef\xbb\xbf: keep-alive\r\n\r\n"
          b"event: message\r\nid: 7\r\nretry: 3000\r\ndata: {\"a\":\r\ndata:  1}\r\n\r\n"
          b"data\rdata: x\r\r"
          b"id\n:c\ndata:y\n\n"
          b"data: unfinished")


class ReaderTests(SynchronousTestCase):
    def test_fields_of_each_block(self) -> None:
        events, rest = read_all([STREAM])
        self.assertEqual([e.comments for e in events], [(" keep-alive",), (), (), ("c",)])
        self.assertEqual([e.data for e in events], [None, '{"a":\n 1}', "\nx", "y"])
        second = events[1]
        self.assertEqual((second.event, second.id, second.retry), ("message", "7", 3000))
        self.assertEqual(events[3].id, "")
        self.assertEqual(rest, b"data: unfinished")

    def test_raw_bytes_are_the_stream_as_it_came(self) -> None:
        events, rest = read_all([STREAM])
        self.assertEqual(b"".join(e.raw for e in events) + rest, STREAM)

    def test_a_crlf_split_across_pieces_is_one_line_end(self) -> None:
        events, rest = read_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\ndata: c"])
        self.assertEqual([e.data for e in events], ["a\nb"])
        self.assertEqual(events[0].raw, b"data: a\r\ndata: b\r\n\r")
        self.assertEqual(rest, b"data: c")
        events, _ = read_all([b"data: a\r", b"\r"])
        self.assertEqual([e.data for e in events], ["a"])

    def test_a_byte_order_mark_only_at_the_start(self) -> None:
        events, _ = read_all([b"\xef", b"\xbb", b"\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n"])
        self.assertEqual(events[0].data, "a")
        self.assertEqual(events[1].fields, (("\ufeffdata", "b"),))

    def test_id_with_nul_and_retry_not_digits_are_ignored(self) -> None:
        events, _ = read_all([b"id: 1\nid: a\x00b\nretry: 10x\nretry: 5\nretry: -1\n\n"])
        self.assertEqual((events[0].id, events[0].retry), ("1", 5))

    def test_an_event_past_the_bound_is_refused(self) -> None:
        reader = SseReader(max_event_bytes=32)
        self.assertEqual(reader.feed(b"data: 0123456789\n\n"), [SseEvent(
            b"data: 0123456789\n\n", (("data", "0123456789"),))])
        reader.feed(b"data: 0123456789\n")
        with self.assertRaises(EventTooLarge):
            reader.feed(b"data: 0123456789")
        with self.assertRaises(EventTooLarge):
            SseReader(max_event_bytes=8).feed(b"data: without a line end")
        with self.assertRaises(EventTooLarge):  # (whole in one piece, too)
            SseReader(max_event_bytes=8).feed(b"data: complete but large\n\n")

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
    def test_any_split_reads_the_same_blocks(self, cuts: list[int]) -> None:
        whole, whole_rest = read_all([STREAM])
        pieces, rest = read_all(split(STREAM, cuts))
        self.assertEqual([e.fields for e in pieces], [e.fields for e in whole])
        self.assertEqual(rest, whole_rest)
        # byte for byte, but for the LF of a CRLF cut after the CR that ended a block
        self.assertEqual(b"".join(e.raw for e in pieces).replace(b"\r\n", b"\r"),
                         b"".join(e.raw for e in whole).replace(b"\r\n", b"\r"))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(
        st.one_of(st.none(), st.text(st.characters(exclude_categories=("Cs",)), max_size=20)),
        st.one_of(st.none(), st.text(st.characters(exclude_characters="\r\n\x00",
                                                   exclude_categories=("Cs",)), max_size=8)),
        st.lists(st.text(st.characters(exclude_characters="\r\n",
                                       exclude_categories=("Cs",)), max_size=8), max_size=2),
    ), max_size=5), st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
        st.sampled_from([b"\n", b"\r\n", b"\r"]))
    def test_written_blocks_read_back_in_any_pieces(
            self, blocks: list[tuple[str | None, str | None, list[str]]], cuts: list[int],
            newline: bytes) -> None:
        stream = b"".join(write_event(data, id=ident, comments=tuple(comments))
                          for data, ident, comments in blocks).replace(b"\n", newline)
        events, rest = read_all(split(stream, cuts))
        self.assertEqual(rest, b"")
        expected = [(data.replace("\r\n", "\n").replace("\r", "\n") if data is not None
                     else None, ident, tuple(comments)) for data, ident, comments in blocks]
        self.assertEqual([(e.data, e.id, e.comments) for e in events], expected)


class WriterTests(SynchronousTestCase):
    def test_with_data_keeps_every_other_field_in_place(self) -> None:
        event = read_all([b": c\nid: 4\ndata: a\nevent: message\ndata: b\nretry: 9\n\n"])[0][0]
        self.assertEqual(event.with_data("x\ny"),
                         b": c\nid: 4\ndata: x\ndata: y\nevent: message\nretry: 9\n\n")

    def test_a_block_without_data_gets_it_at_the_end(self) -> None:
        event = read_all([b"id: 4\n\n"])[0][0]
        self.assertEqual(event.with_data("{}"), b"id: 4\ndata: {}\n\n")

    def test_write_event(self) -> None:
        self.assertEqual(write_event("a\r\nb", event="message", id="1", retry=5,
                                     comments=("hi",)),
                         b":hi\nevent: message\nid: 1\nretry: 5\ndata: a\ndata: b\n\n")
        self.assertEqual(write_event(""), b"data\n\n")
        with self.assertRaises(ValueError):
            write_event("x", id="a\nb")
