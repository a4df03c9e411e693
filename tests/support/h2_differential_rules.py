"""Where ``http2.engine`` and ``h2`` legitimately differ, one rule each: what ``h2`` did
turned into what the engine must do, with the RFC sentence that allows the difference.

No rule is a blanket ignore: each matches one cause (a frame, a header field, an ``h2``
exception type) and says exactly what the engine does instead. Three kinds:

- ``before``: a frame ``h2`` would misjudge is rewritten into the frame ``h2`` judges
  as RFC 9113 judges the original (so ``h2`` keeps reading), or answered at once with
  the engine's verdict;
- ``after_error``: an ``h2`` exception mapped to the engine's error;
- ``h2_reset``: an RST_STREAM of ``h2``'s, kept, dropped or made a connection error;
- in ``h2_differential_fields``: a request's or trailer block's fields judged again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import h2.exceptions
import hpack.exceptions

from gateway.dataplane.http2.protocol import MAX_FRAME_SIZE, ErrorCode

Header = tuple[bytes, bytes]
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0x0, 0x1, 0x2, 0x3, 0x4, 0x5
PING, WINDOW_UPDATE, CONTINUATION, ALTSVC = 0x6, 0x8, 0x9, 0xA
UNKNOWN = 0xF0  # a frame type nobody defines
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20


@dataclass
class Stream:
    """What the driver knows of a stream ``h2`` opened."""

    headers: list[Header]
    body: int = 0  # DATA bytes received
    ended: bool = False  # END_STREAM received
    answered: bool = False  # END_STREAM sent
    reset_by_client: bool = False


@dataclass
class State:
    """The driver's view of the connection, for the rules."""

    streams: dict[int, Stream] = field(default_factory=dict)
    reset_by_us: set[int] = field(default_factory=set)  # RST_STREAM sent (or due)
    refuse: set[int] = field(default_factory=set)  # next header block: malformed
    reset_if_open: set[int] = field(default_factory=set)  # after this frame: a stream error
    frames_seen: int = 0
    highest: int = 0  # the highest stream id the client opened
    in_block: bool = False  # a header block has begun and not ended
    extra_resets: list[tuple[int, int]] = field(default_factory=list)  # the engine's alone


@dataclass(frozen=True)
class Verdict:
    """The engine's answer where ``h2`` cannot be followed: a connection error (``code``)
    or a stream error (``stream_error``) after which ``h2`` has closed the connection, or
    ``accepted`` (no error; ``h2`` cannot go on: compare up to the frame before)."""

    code: int | None = None
    stream_error: tuple[int, int] | None = None
    accepted: bool = False


def parse(frame: bytes) -> tuple[int, int, int, bytes]:
    """(type, flags, stream id, payload) of one whole frame."""
    return frame[3], frame[4], int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF, frame[9:]


def build(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes((kind, flags))
            + stream_id.to_bytes(4, "big") + payload)


def before(frame: bytes, state: State) -> bytes | Verdict:
    """The frame ``h2`` reads instead of ``frame``, or the engine's verdict on it."""
    if len(frame) < 9 or len(frame) - 9 != int.from_bytes(frame[:3], "big"):
        return frame  # incomplete: h2 waits, as the engine does (see unread_frame)
    kind, flags, stream_id, payload = parse(frame)
    state.frames_seen += 1
    # RFC 9113 3.4: "This sequence MUST be followed by a SETTINGS frame" and "Clients
    # and servers MUST treat an invalid connection preface as a connection error
    # (Section 5.4.1) of type PROTOCOL_ERROR." h2 does not check what follows the
    # preface's 24 octets.
    if state.frames_seen == 1 and (kind != SETTINGS or flags & ACK):
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    # RFC 9113 6.5: "Receipt of a SETTINGS frame with the ACK flag set and a length field
    # value other than 0 MUST be treated as a connection error (Section 5.4.1) of type
    # FRAME_SIZE_ERROR." (hyperframe calls it PROTOCOL_ERROR.)
    if kind == SETTINGS and flags & ACK and payload and not stream_id:
        return Verdict(code=ErrorCode.FRAME_SIZE_ERROR)
    in_block, state.in_block = state.in_block, \
        kind in (HEADERS, CONTINUATION) and not flags & END_HEADERS
    if kind == CONTINUATION and not in_block:
        # RFC 9113 6.10: "A CONTINUATION frame MUST be preceded by a HEADERS,
        # PUSH_PROMISE or CONTINUATION frame without the END_HEADERS flag set. A
        # recipient that observes violation of this rule MUST respond with a connection
        # error (Section 5.4.1) of type PROTOCOL_ERROR." h2 takes a stray CONTINUATION
        # on a stream it reset for a frame on that closed stream, and ignores it.
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    if kind == PUSH_PROMISE:
        # RFC 9113 8.4: "A client cannot push. Thus, servers MUST treat the receipt of a
        # PUSH_PROMISE frame as a connection error (Section 5.4.1) of type
        # PROTOCOL_ERROR." The engine says so whatever the frame holds; hyperframe
        # first refuses one too short for its fields (FRAME_SIZE_ERROR).
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    if kind in (RST_STREAM, WINDOW_UPDATE) and len(payload) == 4 \
            and stream_id > state.highest:
        # RFC 9113 6.4: "If a RST_STREAM frame identifying an idle stream is received, the
        # recipient MUST treat this as a connection error (Section 5.4.1) of type
        # PROTOCOL_ERROR", and 5.1 ("idle"): "Receiving any frame other than HEADERS or
        # PRIORITY on a stream in this state MUST be treated as a connection error". h2
        # ignores both once any stream is open.
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    if stream_id % 2 == 0 and 0 < stream_id < state.highest \
            and kind in (DATA, HEADERS, RST_STREAM, WINDOW_UPDATE):
        # An even stream id is the server's, and idle (5.1.1, as above), also below the
        # client's highest; h2 takes it for a closed stream of the client's.
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    if kind == HEADERS:
        return _headers(flags, stream_id, payload, state)
    if kind == ALTSVC:
        # RFC 7838 4: the ALTSVC frame "is intended for receipt by clients. A device
        # acting as a server MUST ignore it." The engine ignores it as any extension
        # frame (RFC 9113 5.5); hyperframe parses it first and refuses a malformed one.
        # h2 reads it as a frame of an unknown type (which still interrupts a header
        # block, as it must).
        return build(UNKNOWN, flags, stream_id, payload)
    if kind == DATA and flags & PADDED and not payload:
        # A PADDED DATA frame without its Pad Length octet: RFC 9113 4.2 ("An endpoint
        # MUST send an error code of FRAME_SIZE_ERROR if a frame ... is too small to
        # contain mandatory frame data") gives h2's code; the engine says PROTOCOL_ERROR,
        # which 5.4 allows: "a generic error code (such as PROTOCOL_ERROR or
        # INTERNAL_ERROR) can always be used in place of more specific error codes".
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    sizes = {PING: 8, RST_STREAM: 4, PRIORITY: 5}
    if kind in sizes and len(payload) != sizes[kind] and bool(stream_id) == (kind == PING):
        # A frame both of the wrong size and on the wrong stream: RFC 9113 5.4 "If an
        # endpoint detects multiple different errors, it MAY choose to report any one of
        # those errors." hyperframe reports the stream (PROTOCOL_ERROR), the engine the
        # size (FRAME_SIZE_ERROR).
        return Verdict(code=ErrorCode.FRAME_SIZE_ERROR)
    if kind == WINDOW_UPDATE and len(payload) == 4 and payload[0] & 0x80:
        # RFC 9113 6.9: the Reserved bit before the increment "MUST be ignored when
        # receiving"; hyperframe reads it as part of the increment (and refuses it). h2
        # reads the frame with the bit cleared.
        payload = bytes((payload[0] & 0x7F,)) + payload[1:]
        frame = build(kind, flags, stream_id, payload)
    if kind == WINDOW_UPDATE and stream_id and len(payload) == 4 \
            and not int.from_bytes(payload, "big") & 0x7FFFFFFF:
        # RFC 9113 6.9: "A receiver MUST treat the receipt of a WINDOW_UPDATE frame with a
        # flow-control window increment of 0 as a stream error (Section 5.4.2) of type
        # PROTOCOL_ERROR". hyperframe refuses 0 while parsing, a connection error, before
        # the stream is looked at. h2 reads an increment of 1 instead (so it judges the
        # stream: idle is still a connection error, closed is ignored), and a stream it
        # has open is then reset.
        state.reset_if_open.add(stream_id)
        return build(kind, flags, stream_id, b"\0\0\0\x01")
    if kind == PRIORITY and len(payload) == 5 and stream_id \
            and int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:
        # RFC 9113 5.3.1: "A stream cannot depend on itself. An endpoint MUST treat this
        # as a stream error (Section 5.4.2) of type PROTOCOL_ERROR." h2 makes it a
        # connection error, so h2 does not read it; the engine resets an open stream,
        # sends RST_STREAM for an idle one without remembering it (as Go's server does;
        # RFC 9113 6.4's "RST_STREAM frames MUST NOT be sent for a stream in the 'idle'
        # state" yields to 5.3.1 here) and ignores a closed one (5.1: only PRIORITY may
        # be sent on a closed stream).
        if stream_id > state.highest:
            state.extra_resets.append((stream_id, ErrorCode.PROTOCOL_ERROR))
        else:
            state.reset_if_open.add(stream_id)
        return b""
    return frame


def _headers(flags: int, stream_id: int, payload: bytes, state: State) -> bytes | Verdict:
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            return build(HEADERS, flags, stream_id, payload)  # both: FRAME_SIZE_ERROR
        start, end = 1, end - payload[0]
    priority = None
    if flags & PRIORITY_FLAG:
        if len(payload) < start + 5:
            # Too short for its priority fields: FRAME_SIZE_ERROR for h2 (RFC 9113 4.2),
            # PROTOCOL_ERROR for the engine (5.4's generic code; see DATA above).
            return Verdict(code=ErrorCode.PROTOCOL_ERROR)
        priority = payload[start:start + 5]
        start += 5
    if start > end:
        # RFC 9113 6.2: "Padding that exceeds the size remaining for the field block
        # fragment MUST be treated as a PROTOCOL_ERROR." hyperframe lets the padding
        # overlap the priority fields (the engine refuses it), and raises it for h2
        # otherwise (as the engine).
        return Verdict(code=ErrorCode.PROTOCOL_ERROR) if priority is not None else \
            build(HEADERS, flags, stream_id, payload)
    # Padding means nothing in a HEADERS frame (it is not flow-controlled): whenever a
    # rule below rewrites the frame for h2, h2 reads it unpadded.
    rewrite = False
    if flags & PADDED and start == end:
        # The same sentence allows padding that fills the frame exactly (an empty
        # fragment); hyperframe refuses it.
        rewrite = True
    if priority is not None and int.from_bytes(priority[:4], "big") & 0x7FFFFFFF == stream_id:
        # RFC 9113 5.3.1: "A stream cannot depend on itself. An endpoint MUST treat this
        # as a stream error (Section 5.4.2) of type PROTOCOL_ERROR." h2 makes it a
        # connection error: it reads the block without the priority, and the driver
        # refuses the request (or trailers) it opens.
        state.refuse.add(stream_id)
        priority, rewrite = None, True
    stream = state.streams.get(stream_id)
    if stream is not None and not stream.ended and stream_id not in state.reset_by_us \
            and not stream.reset_by_client and not flags & END_STREAM:
        # RFC 9113 8.1: "An endpoint that receives a HEADERS frame without the END_STREAM
        # flag set after receiving the HEADERS frame that opens a request ... MUST treat
        # the corresponding request or response as malformed (Section 8.1.1)". h2 raises
        # a connection error; it reads the trailers ended instead, and they are refused.
        state.refuse.add(stream_id)
        flags |= END_STREAM
        rewrite = True
    if not rewrite:
        return build(HEADERS, flags, stream_id, payload)
    flags &= ~(PADDED | PRIORITY_FLAG)
    if priority is not None:
        flags |= PRIORITY_FLAG
    return build(HEADERS, flags, stream_id, (priority or b"") + payload[start:end])


def after_error(exc: h2.exceptions.ProtocolError, frame: bytes, state: State) -> Verdict:
    """The engine's answer to the frame ``h2`` raised ``exc`` on."""
    cause = exc.__cause__
    stream_id = parse(frame)[2] if len(frame) >= 9 else 0
    if isinstance(exc, h2.exceptions.StreamClosedError | h2.exceptions.StreamIDTooLowError) \
            and stream_id in state.reset_by_us:
        # A frame on a stream that was closed (both sides ended, or never opened below a
        # newer one) and that the server has since reset (it answered a DATA frame with
        # RST_STREAM): h2 closes the connection, as 5.1 allows for a closed stream; the
        # engine ignores it, as 5.1 requires once it has reset it: "An endpoint MUST
        # ignore frames that it receives on closed streams after it has sent a
        # RST_STREAM frame." h2 cannot go on.
        return Verdict(accepted=True)
    if isinstance(exc, h2.exceptions.DenialOfServiceError):
        return Verdict(code=ErrorCode.ENHANCE_YOUR_CALM)  # the list size: as the engine
    # RFC 9113 4.3: "A decoding error in a field block MUST be treated as a connection
    # error (Section 5.4.1) of type COMPRESSION_ERROR." h2 says PROTOCOL_ERROR for every
    # HPACK error; the engine says COMPRESSION_ERROR, but for a table size update past the
    # 4096 it advertises, which both answer PROTOCOL_ERROR (docs/reference/http.md,
    # "HTTP/2 limits", header_table_size).
    if isinstance(cause, hpack.exceptions.InvalidTableSizeError):
        return Verdict(code=ErrorCode.PROTOCOL_ERROR)
    if isinstance(cause, hpack.exceptions.HPACKDecodingError):
        return Verdict(code=ErrorCode.COMPRESSION_ERROR)
    # RFC 9113 8.1.1: "A request or response is also malformed if the value of a
    # content-length header field does not equal the sum of the DATA frame payload
    # lengths that form the content" and "Malformed requests or responses that are
    # detected MUST be treated as a stream error (Section 5.4.2) of type
    # PROTOCOL_ERROR." h2 raises a connection error for an invalid, conflicting or
    # unmet content-length; h2 cannot go on, so the comparison stops at this frame.
    if isinstance(exc, h2.exceptions.InvalidBodyLengthError) or \
            str(exc).startswith(("Invalid content-length", "Conflicting content-length")):
        return Verdict(stream_error=(stream_id, ErrorCode.PROTOCOL_ERROR))
    # A HEADERS frame on a lower stream id than one the client opened: RFC 9113 5.1.1
    # calls it "an unexpected stream identifier" (PROTOCOL_ERROR, as h2 says); the
    # stream is also "closed" (5.1.1: "The first use of a new stream identifier
    # implicitly closes all streams in the 'idle' state ... with a lower-valued stream
    # identifier") and 5.1 allows "a connection error (Section 5.4.1) of type
    # STREAM_CLOSED" for frames on closed streams, the engine's answer.
    if isinstance(exc, h2.exceptions.StreamIDTooLowError):
        return Verdict(code=ErrorCode.STREAM_CLOSED)
    # RFC 9113 5.1.1: "Streams initiated by a client MUST use odd-numbered stream
    # identifiers" ... "An endpoint that receives an unexpected stream identifier MUST
    # respond with a connection error (Section 5.4.1) of type PROTOCOL_ERROR", as h2 and
    # the engine do for an even id above the highest (below it: ``before``).
    return Verdict(code=int(exc.error_code))


def h2_reset(kind: int, stream_id: int, code: int, state: State) -> str:
    """What becomes of an RST_STREAM ``h2`` sent on reading a frame of ``kind`` (a
    header block: the frame that ended it):
    ``keep`` it, ``drop`` it (the engine sends none) or ``escalate`` (the engine closes
    the connection with that code)."""
    stream = state.streams.get(stream_id)
    if code == ErrorCode.STREAM_CLOSED and stream_id in state.reset_by_us:
        # RFC 9113 5.1 ("closed"): "An endpoint MUST ignore frames that it receives on
        # closed streams after it has sent a RST_STREAM frame." h2 answers each with
        # another RST_STREAM.
        return "drop"
    if code == ErrorCode.STREAM_CLOSED and kind in (HEADERS, CONTINUATION) \
            and stream is not None:
        # HEADERS on a stream the client ended or reset: RFC 9113 5.1 makes it a stream
        # error STREAM_CLOSED ("half-closed (remote)": "it MUST respond with a stream
        # error (Section 5.4.2) of type STREAM_CLOSED"), as h2 does; the engine closes
        # the connection, as 5.4 allows: "An endpoint MAY choose to treat a stream error
        # as a connection error under certain circumstances".
        return "escalate"
    return "keep"


def unread_frame(waiting: bytes) -> int | None:
    """The engine's connection error for the bytes ``h2`` is still waiting on."""
    # h2 judges a frame's length once the whole frame is there; the engine from its
    # header. RFC 9113 4.2: "An endpoint MUST send an error code of FRAME_SIZE_ERROR if a
    # frame exceeds the size defined in SETTINGS_MAX_FRAME_SIZE".
    if len(waiting) >= 3 and int.from_bytes(waiting[:3], "big") > MAX_FRAME_SIZE:
        return int(ErrorCode.FRAME_SIZE_ERROR)
    return None
