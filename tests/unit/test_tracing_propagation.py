"""Reading a caller's trace context: W3C traceparent, B3 single and multi. Malformed
values are ignored (the request becomes a root), whatever they hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.tracing.propagation import (
    DENIED,
    Parent,
    context_headers,
    find_parent,
    parse_b3_single,
    parse_traceparent,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


class TraceparentTests(SynchronousTestCase):
    def test_valid(self) -> None:
        self.assertEqual(parse_traceparent(f"00-{TRACE}-{SPAN}-01".encode()),
                         Parent(TRACE, SPAN, True))
        self.assertEqual(parse_traceparent(f"00-{TRACE}-{SPAN}-00".encode()),
                         Parent(TRACE, SPAN, False))
        # only the sampled bit counts; a later version may add fields
        self.assertTrue(parse_traceparent(f"00-{TRACE}-{SPAN}-03".encode()).sampled)  # type: ignore[union-attr]
        self.assertIsNotNone(parse_traceparent(f"01-{TRACE}-{SPAN}-01-extra".encode()))

    def test_malformed_is_ignored(self) -> None:
        for value in (
            "", "garbage", f"00-{TRACE}-{SPAN}", f"00-{TRACE}-{SPAN}-0",
            f"ff-{TRACE}-{SPAN}-01",                      # version ff is invalid
            f"00-{'0' * 32}-{SPAN}-01",                   # all-zero trace id
            f"00-{TRACE}-{'0' * 16}-01",                  # all-zero span id
            f"00-{TRACE.upper()}-{SPAN}-01",              # upper case hex
            f"00-{TRACE}-{SPAN}-01-extra",                # version 00 has no more fields
            f"01-{TRACE}-{SPAN}-01extra",                 # a later version: '-' first
            f"00-{TRACE[:-1]}g-{SPAN}-01", f"00-{TRACE}-{SPAN}-zz",
            f"0x-{TRACE}-{SPAN}-01", f"00_{TRACE}_{SPAN}_01", f"00-{TRACE}-{SPAN}--1",
            f"-0-{TRACE}-{SPAN}-01", f"00-{TRACE[:-1]}--{SPAN}-01", f" 00-{TRACE}-{SPAN}-0",
        ):
            self.assertIsNone(parse_traceparent(value.encode()), value)


class B3Tests(SynchronousTestCase):
    def test_single(self) -> None:
        self.assertEqual(parse_b3_single(f"{TRACE}-{SPAN}-1".encode()),
                         Parent(TRACE, SPAN, True, b3=True))
        self.assertEqual(parse_b3_single(f"{TRACE[16:]}-{SPAN}".encode()),
                         Parent("0" * 16 + TRACE[16:], SPAN, None, b3=True))
        self.assertTrue(parse_b3_single(f"{TRACE}-{SPAN}-d-{SPAN}".encode()).sampled)  # type: ignore[union-attr]
        self.assertEqual(parse_b3_single(b"0"), DENIED)
        for value in ("1", "", f"{TRACE}-{SPAN}-x", f"{TRACE}-{SPAN}-1-bad",
                      f"{TRACE}-{SPAN}-1-{SPAN}-more", f"{TRACE}", f"abc-{SPAN}-1",
                      f"{TRACE}-{SPAN[:-1]}-1"):
            self.assertIsNone(parse_b3_single(value.encode()), value)

    def test_multi(self) -> None:
        headers = [(b"X-B3-TraceId", TRACE.encode()), (b"X-B3-SpanId", SPAN.encode()),
                   (b"X-B3-Sampled", b"1")]
        self.assertEqual(find_parent(headers),
                         Parent(TRACE, SPAN, True, b3=True))
        debug = [(b"x-b3-traceid", TRACE.encode()), (b"x-b3-spanid", SPAN.encode()),
                 (b"x-b3-flags", b"1")]
        self.assertTrue(find_parent(debug).sampled)  # type: ignore[union-attr]
        self.assertEqual(find_parent([(b"X-B3-Sampled", b"0")]), DENIED)
        for broken in ([(b"X-B3-TraceId", b"xyz"), (b"X-B3-SpanId", SPAN.encode())],
                       [(b"X-B3-TraceId", TRACE.encode())],
                       [(b"X-B3-TraceId", TRACE.encode()), (b"X-B3-SpanId", SPAN.encode()),
                        (b"X-B3-Sampled", b"maybe")]):
            self.assertIsNone(find_parent(broken), broken)


class FindParentTests(SynchronousTestCase):
    def test_order_and_fallback(self) -> None:
        """traceparent wins over b3; a malformed traceparent falls back to b3."""
        other = "a" * 32
        both = [(b"b3", f"{other}-{SPAN}-1".encode()),
                (b"TraceParent", f"00-{TRACE}-{SPAN}-01".encode())]
        self.assertEqual(find_parent(both).trace_id, int(TRACE, 16))  # type: ignore[union-attr]
        broken = [(b"traceparent", b"00-nonsense"), (b"b3", f"{other}-{SPAN}-1".encode())]
        self.assertEqual(find_parent(broken).trace_id, int(other, 16))  # type: ignore[union-attr]
        self.assertIsNone(find_parent([(b"host", b"x"), (b"accept", b"*/*")]))

    @given(st.lists(st.tuples(st.sampled_from([b"traceparent", b"b3", b"x-b3-traceid",
                                               b"x-b3-spanid", b"x-b3-sampled", b"x-b3-flags"]),
                              st.binary(max_size=80)), max_size=6))
    def test_never_raises(self, headers: list[tuple[bytes, bytes]]) -> None:
        parent = find_parent(headers)
        assert parent is None or isinstance(parent, Parent)

    def test_headers_written(self) -> None:
        self.assertEqual(context_headers(int(TRACE, 16), int(SPAN, 16), False),
                         ((b"traceparent", f"00-{TRACE}-{SPAN}-01".encode()),))
        self.assertEqual(context_headers(1, 2, True)[1],
                         (b"b3", b"%032x-%016x-1" % (1, 2)))


def _reference(value: bytes) -> tuple[str, str, bool] | None:
    """The W3C rules, written plainly (no shared code): four fields; a version other
    than 00 (ff excepted) is read as 00 is."""
    text = value.decode("latin-1").strip(" \t")
    parts = text.split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return None
    if any(c not in "0123456789abcdef" for c in "".join(parts)) or parts[0] == "ff":
        return None
    if set(parts[1]) == {"0"} or set(parts[2]) == {"0"}:
        return None
    return parts[1], parts[2], bool(int(parts[3], 16) & 1)


class TraceparentAgainstReferenceTests(SynchronousTestCase):
    @given(st.lists(st.tuples(st.integers(min_value=0, max_value=54),
                              st.sampled_from(b"0123456789abcdefABX- _")), max_size=3))
    def test_mutations(self, changes: list[tuple[int, int]]) -> None:
        """A valid version-00 header with a few bytes changed: the fast path and the
        regex agree with a plain reading of the rules."""
        value = bytearray(f"00-{TRACE}-{SPAN}-01".encode())
        for where, byte in changes:
            value[where] = byte
        parent = parse_traceparent(bytes(value))
        got = None if parent is None else (parent.trace, parent.span, parent.sampled)
        self.assertEqual(got, _reference(bytes(value)), bytes(value))
