"""Trace context in request headers: W3C ``traceparent``, B3 single ``b3`` and B3 multi
``X-B3-*``, read from a client's request and written on the upstream's.

Pure functions over ``(name, value)`` byte pairs. A malformed header is ignored (the
request is then a root, as if it had none): never an error for the client. ``find_parent``
runs only for requests whose codec saw one of ``CONTEXT_NAMES`` (flagged while it
checks the headers it must check anyway), so a request without trace headers costs the
tracer no header scan at all.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# version-traceid-parentid-flags; a version after 00 may append "-..." (W3C level 1)
_TRACEPARENT = re.compile(
    rb"[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\r\n]*)?[ \t]*")
TRACEPARENT = b"traceparent"
TRACESTATE = b"tracestate"
B3 = b"b3"
B3_TRACE_ID, B3_SPAN_ID = b"x-b3-traceid", b"x-b3-spanid"
B3_SAMPLED, B3_FLAGS, B3_PARENT = b"x-b3-sampled", b"x-b3-flags", b"x-b3-parentspanid"
# Every header that carries a caller's trace context: replaced on the upstream request
# of a traced exchange (ours names the gateway's span as the parent).
CONTEXT_HEADERS = frozenset({TRACEPARENT, B3, B3_TRACE_ID, B3_SPAN_ID, B3_SAMPLED, B3_FLAGS,
                             B3_PARENT})
_READ = frozenset({TRACEPARENT, B3, B3_TRACE_ID, B3_SPAN_ID, B3_SAMPLED, B3_FLAGS})
_LENGTHS = frozenset(len(name) for name in _READ)
# What the codecs look for (lower case) in the header loop they run anyway: only a
# request flagged ``trace_context`` is searched by ``find_parent``.
CONTEXT_NAMES = _READ


class Parent(NamedTuple):
    """The caller's span, its ids as lower-case hex (the trace id in 32 digits: what logs
    show, with no number made of it unless the request is traced); ``sampled`` is its
    decision (None: left to us). A bare ``b3: 0`` is a decision without ids."""

    trace: str
    span: str
    sampled: bool | None
    b3: bool = False  # the caller spoke B3: the upstream gets B3 too

    @property
    def trace_id(self) -> int:
        return int(self.trace, 16) if self.trace else 0

    @property
    def span_id(self) -> int:
        return int(self.span, 16) if self.span else 0


DENIED = Parent("", "", False, b3=True)
_new = tuple.__new__
_ZEROS = frozenset({b"0" * 16, b"0" * 32})
_ODD = b"13579bdf"  # a flags byte's last hex digit with the sampled bit set
_HEX_DIGITS = b"0123456789abcdef"
_HEX_DASH = _HEX_DIGITS + b"-"


def _hex_id(value: bytes, *sizes: int) -> str:
    """A non-zero lower-case hex id of one of ``sizes`` digits (padded to the largest),
    or "" when malformed."""
    if len(value) not in sizes or value.translate(None, _HEX_DIGITS) or value in _ZEROS:
        return ""
    return value.decode().rjust(max(sizes), "0")


def parse_traceparent(value: bytes) -> Parent | None:
    """``version-traceid-parentid-flags`` (W3C Trace Context level 1). Version ``ff`` and
    all-zero ids are invalid; a later version may append fields after a ``-``."""
    if len(value) == 55 and value[2] == value[35] == value[52] == 45 \
            and value.count(b"-") == 3 and not value.translate(None, _HEX_DASH):
        # the usual form, checked without a regex
        trace, span = value[3:35], value[36:52]
        if value[:2] == b"ff" or trace in _ZEROS or span in _ZEROS:
            return None
        # tuple.__new__: a NamedTuple's own __new__ is a Python call, the slowest step here
        return _new(Parent, (trace.decode(), span.decode(), value[54] in _ODD, False))
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace, span, flags, rest = match.groups()
    if version == b"ff" or (rest is not None and version == b"00") or trace in _ZEROS \
            or span in _ZEROS:
        return None
    return Parent(trace.decode(), span.decode(), flags[1] in _ODD)


def _b3_sampled(value: bytes) -> bool | str | None:
    """``1``/``d``/``true`` sampled, ``0``/``false`` not, empty: deferred; else invalid."""
    low = value.strip().lower()
    if low in (b"1", b"d", b"true"):
        return True
    if low in (b"0", b"false"):
        return False
    return None if not low else "invalid"


def parse_b3_single(value: bytes) -> Parent | None:
    """``b3: {traceid}-{spanid}[-{sampled}[-{parentspanid}]]`` or a bare ``b3: {sampled}``."""
    parts = value.strip().split(b"-")
    if len(parts) == 1:
        decision = _b3_sampled(parts[0])
        return DENIED if decision is False else None
    if len(parts) > 4:
        return None
    trace = _hex_id(parts[0], 16, 32)
    span = _hex_id(parts[1], 16)
    sampled = _b3_sampled(parts[2]) if len(parts) > 2 else None
    if not trace or not span or sampled == "invalid":
        return None
    if len(parts) == 4 and not _hex_id(parts[3], 16):
        return None
    return Parent(trace, span, sampled if isinstance(sampled, bool) else None, b3=True)


def parse_b3_multi(found: dict[bytes, bytes]) -> Parent | None:
    """``X-B3-TraceId``, ``X-B3-SpanId``, ``X-B3-Sampled`` and ``X-B3-Flags: 1`` (debug,
    which means sampled)."""
    sampled = _b3_sampled(found.get(B3_SAMPLED, b""))
    if found.get(B3_FLAGS, b"").strip() == b"1":
        sampled = True
    if sampled == "invalid":
        return None
    trace = found.get(B3_TRACE_ID)
    span = found.get(B3_SPAN_ID)
    if trace is None or span is None:
        return DENIED if sampled is False else None
    trace_hex = _hex_id(trace.strip(), 16, 32)
    span_hex = _hex_id(span.strip(), 16)
    if not trace_hex or not span_hex:
        return None
    return Parent(trace_hex, span_hex, sampled if isinstance(sampled, bool) else None, b3=True)


ALL_FORMATS = frozenset({"tracecontext", "b3", "b3multi"})


def find_parent(headers: list[tuple[bytes, bytes]],
                formats: frozenset[str] = ALL_FORMATS) -> Parent | None:
    """The caller's context: ``traceparent`` first, then ``b3``, then ``X-B3-*``; the
    first valid one wins, the rest are ignored. ``formats`` (``otel_propagators``: of
    ``tracecontext``, ``b3``, ``b3multi``) are the ones read."""
    found: dict[bytes, bytes] | None = None
    for name, value in headers:
        if len(name) in _LENGTHS:
            low = name.lower()
            if low in _READ:
                if found is None:
                    found = {}
                found.setdefault(low, value)
    if found is None:
        return None
    parent = None
    if TRACEPARENT in found and "tracecontext" in formats:
        parent = parse_traceparent(found[TRACEPARENT])
    if parent is None and B3 in found and "b3" in formats:
        parent = parse_b3_single(found[B3])
    if parent is None and "b3multi" in formats and (
            B3_TRACE_ID in found or B3_SAMPLED in found or B3_FLAGS in found):
        parent = parse_b3_multi(found)
    return parent


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> bytes:
    return b"00-%032x-%016x-%s" % (trace_id, span_id, b"01" if sampled else b"00")


def context_headers(trace_id: int, span_id: int, b3: bool) -> tuple[tuple[bytes, bytes], ...]:
    """What the upstream request carries: ``traceparent`` always, and ``b3`` (single
    header) as well when the caller spoke B3."""
    out: tuple[tuple[bytes, bytes], ...] = ((TRACEPARENT, traceparent(trace_id, span_id)),)
    if b3:
        out += ((B3, b"%032x-%016x-1" % (trace_id, span_id)),)
    return out
