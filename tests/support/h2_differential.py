"""The same client bytes through ``http2.engine`` and through ``h2`` (server side), each
turned into one comparable ``Outcome``: the requests handed up (stream id, headers, body,
whether the client ended it), the RST_STREAMs the server sent (stream id, code), the
client's resets and GOAWAY as reported up, whether the server could answer a stream, and
the connection error (the GOAWAY code, or None).

Both get the input cut the same way: the preface, then one frame at a time, so a
connection error is pinned to the frame that caused it. Between frames a script may ask
the server to answer a stream (``Respond``): HEADERS with END_STREAM from both, so
streams reach the "closed" state too.

``h2`` runs with its inbound header validation off: the driver calls ``h2``'s own
validator on each request head and trailer block instead, so a malformed request is a
stream error (as the engine, and RFC 9113 8.1.1, have it) and ``h2`` keeps reading,
instead of the connection error ``h2`` raises. Every place where the two legitimately
differ is one rule in ``h2_differential_rules`` (frames, errors, resets) or
``h2_differential_fields`` (header fields), each with the RFC sentence that allows it;
nothing else is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame

from gateway.dataplane.http2.engine import H2Engine
from gateway.dataplane.http2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    StreamEnded,
    StreamReset,
)
from gateway.dataplane.http2.protocol import (
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    PREFACE,
    STREAMS_HARD_CAP,
    ErrorCode,
    H2Error,
)
from tests.support import h2_differential_fields as fields
from tests.support import h2_differential_rules as rules

Header = tuple[bytes, bytes]
RESPONSE = [(b":status", b"204")]


@dataclass(frozen=True)
class Respond:
    """Between two client frames: the server answers ``stream_id`` (ending its side)."""

    stream_id: int


Step = bytes | Respond


@dataclass
class Request:
    stream_id: int
    headers: tuple[Header, ...]
    body: bytes = b""
    ended: bool = False


@dataclass
class Outcome:
    requests: dict[int, Request] = field(default_factory=dict)
    resets: list[tuple[int, int]] = field(default_factory=list)  # RST_STREAM we sent
    client_resets: list[tuple[int, int]] = field(default_factory=list)  # reported up
    answered: list[tuple[int, bool]] = field(default_factory=list)  # Respond: accepted?
    client_goaway: bool = False  # the client's GOAWAY was reported up
    goaway: int | None = None  # the connection error's code
    stopped: int | None = None  # the step after which h2 could not go on (see rules)

    def summary(self) -> tuple[object, ...]:
        return (sorted((r.stream_id, r.headers, r.body, r.ended)
                       for r in self.requests.values()),
                self.resets, self.client_resets, self.answered, self.client_goaway,
                self.goaway)


def split(data: bytes) -> Iterator[bytes]:
    """``data`` as the peers read it: the preface (or what stands in its place), then
    one frame per chunk; an incomplete last frame is a chunk of its own."""
    yield data[:len(PREFACE)]
    position = len(PREFACE)
    while position < len(data):
        length = int.from_bytes(data[position:position + 3], "big")
        yield data[position:position + 9 + length]
        position += 9 + length


def chunks(steps: Iterable[Step]) -> list[bytes | Respond]:
    """Steps with client bytes cut as ``split`` cuts them (the preface first)."""
    out: list[bytes | Respond] = []
    pending = b""
    for step in steps:
        if isinstance(step, Respond):
            out += _frames(pending, first=not out)
            pending = b""
            out.append(step)
        else:
            pending += step
    out += _frames(pending, first=not out)
    return out


def _frames(data: bytes, first: bool) -> list[bytes]:
    if not data:
        return []
    if first:
        return [c for c in split(data) if c]
    return [c for c in split(PREFACE + data)][1:]


def _sent_frames(data: bytes) -> list[Frame]:
    frames = []
    position = 0
    while position + 9 <= len(data):
        frame, length = Frame.parse_frame_header(memoryview(data[position:position + 9]))
        frame.parse_body(memoryview(data[position + 9:position + 9 + length]))
        frames.append(frame)
        position += 9 + length
    assert position == len(data), "a server wrote a partial frame"
    return frames


def run_engine(steps: Sequence[bytes | Respond], stop: int | None = None) -> Outcome:
    """``steps`` through ``H2Engine`` configured as the codec configures it; steps after
    ``stop`` (h2 could not read them) are not fed."""
    engine = H2Engine()
    engine.initiate()
    engine.data_to_send()
    out = Outcome()
    for index, step in enumerate(steps):
        if stop is not None and index > stop:
            break
        if isinstance(step, Respond):
            out.answered.append((step.stream_id, engine.send_headers(
                step.stream_id, RESPONSE, end_stream=True)))
            _record_sent(out, engine.data_to_send())
            continue
        try:
            events = engine.receive(step)
        except H2Error as exc:
            _record_sent(out, engine.data_to_send())
            assert out.goaway == exc.code, f"H2Error {exc.code!r}, GOAWAY {out.goaway!r}"
            return out
        for event in events:
            match event:
                case RequestReceived(stream_id, headers, ended):
                    out.requests[stream_id] = Request(stream_id, tuple(headers), ended=ended)
                case DataReceived(stream_id, data):
                    out.requests[stream_id].body += data
                case StreamEnded(stream_id):
                    out.requests[stream_id].ended = True
                case StreamReset(stream_id, code):
                    out.client_resets.append((stream_id, code))
                case ConnectionTerminated():
                    out.client_goaway = True
        _record_sent(out, engine.data_to_send())
        assert out.goaway is None, "GOAWAY queued without an H2Error"
    return out


def _record_sent(out: Outcome, data: bytes) -> None:
    for frame in _sent_frames(data):
        if isinstance(frame, RstStreamFrame):
            out.resets.append((frame.stream_id, frame.error_code))
        elif isinstance(frame, GoAwayFrame):
            out.goaway = frame.error_code


def h2_connection() -> h2.connection.H2Connection:
    """A server ``H2Connection`` with the engine's limits, validation left to the driver."""
    config = h2.config.H2Configuration(
        client_side=False, header_encoding=None,
        # the driver validates (fields.request_verdict), as a stream error
        validate_inbound_headers=False,
        # the engine hands cookie crumbs up as they came (the codec joins them)
        normalize_inbound_headers=False)
    conn = h2.connection.H2Connection(config=config)
    codes = h2.settings.SettingCodes
    conn.local_settings = h2.settings.Settings(client=False, initial_values={
        # The engine advertises 128 but refuses nothing itself below its hard cap (the
        # codec answers streams 129..256 REFUSED_STREAM, one of the two codes RFC 9113
        # 5.1.2 names) and closes the connection past it (PROTOCOL_ERROR, as 5.4 allows
        # for a stream error): h2 gets the hard cap, where it does the same.
        codes.MAX_CONCURRENT_STREAMS: STREAMS_HARD_CAP,
        codes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        codes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
    })
    conn.max_inbound_frame_size = MAX_FRAME_SIZE
    conn.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE
    conn.initiate_connection()
    conn.data_to_send()
    return conn


def run_h2(steps: Sequence[bytes | Respond]) -> Outcome:
    """``steps`` through ``h2``, normalised by ``rules`` to what the engine should do."""
    conn = h2_connection()
    out = Outcome()
    state = rules.State()
    for index, step in enumerate(steps):
        if isinstance(step, Respond):
            known = state.streams.get(step.stream_id)
            try:
                if known is None or known.answered:
                    # No request there (h2 would open a stream of its own, as for a
                    # push), or answered already (h2 would refuse, but only after
                    # moving the stream to "closed"): the engine refuses, h2 is not asked
                    raise h2.exceptions.StreamClosedError(step.stream_id)
                conn.send_headers(step.stream_id, RESPONSE, end_stream=True)
                answered = True
            except h2.exceptions.ProtocolError:
                answered = False
            if answered and step.stream_id in state.streams:
                state.streams[step.stream_id].answered = True
            out.answered.append((step.stream_id, answered))
            _record_h2_sent(out, conn.data_to_send(), state, -1)
            continue
        frame = rules.before(step, state) if index else step
        if isinstance(frame, rules.Verdict):
            _conclude(out, frame, index)
            return out
        if frame[3:4] == b"\x04":
            # RFC 9113 6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE changes "all stream
            # flow-control windows that it maintains"; a closed stream has none (the
            # engine forgets it), but h2 keeps closed streams (and would find their
            # windows past 2**31-1) until it next counts its open ones, which purges them.
            conn.open_inbound_streams  # noqa: B018 (read for that side effect)
        try:
            events = conn.receive_data(frame)
        except h2.exceptions.ProtocolError as exc:
            _conclude(out, rules.after_error(exc, frame, state), index)
            return out
        for event in events:
            _h2_event(conn, event, out, state)
        for stream_id in state.reset_if_open:
            stream = state.streams.get(stream_id)
            if stream is not None and stream_id not in state.reset_by_us \
                    and not stream.reset_by_client and not (stream.ended and stream.answered):
                _refuse(conn, stream_id, out, state)
        state.reset_if_open.clear()
        state.highest = conn.highest_inbound_stream_id
        kind = frame[3] if len(frame) >= 9 else -1
        if _record_h2_sent(out, conn.data_to_send(), state, kind):
            return out
        out.resets += state.extra_resets
        state.extra_resets.clear()
        if out.client_goaway:
            # h2 treats every frame after the client's GOAWAY as a connection error (its
            # state machine is closed); RFC 9113 6.8 limits what the GOAWAY's receiver
            # may start, not its sender. The engine hands the GOAWAY up (the codec then
            # closes gracefully): compare up to here.
            out.stopped = index
            return out
    out.goaway = rules.unread_frame(bytes(conn.incoming_buffer._data))  # (no public view)
    return out


def _conclude(out: Outcome, verdict: rules.Verdict, index: int) -> None:
    if verdict.accepted:
        out.stopped = index - 1
    elif verdict.stream_error is not None:
        out.resets.append(verdict.stream_error)
        out.stopped = index
    else:
        out.goaway = verdict.code


def _refuse(conn: h2.connection.H2Connection, stream_id: int, out: Outcome,
            state: rules.State) -> None:
    """Reset a stream the rules call malformed, as the engine does."""
    state.reset_by_us.add(stream_id)
    try:
        conn.reset_stream(stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
    except h2.exceptions.StreamClosedError:
        # h2 took the block that made it malformed as the stream's end (a rule gave it
        # END_STREAM, and the server had already answered): it has no stream left to
        # reset, the engine does.
        out.resets.append((stream_id, ErrorCode.PROTOCOL_ERROR))


def _h2_event(conn: h2.connection.H2Connection, event: h2.events.Event, out: Outcome,
              state: rules.State) -> None:
    sid = getattr(event, "stream_id", 0) or 0
    if isinstance(event, h2.events.RequestReceived):
        headers = [(bytes(n), bytes(v)) for n, v in event.headers or []]
        ended = event.stream_ended is not None
        why = fields.request_verdict(headers, ended, state, sid)
        if why is not None:
            _refuse(conn, sid, out, state)
            return
        out.requests[sid] = Request(sid, tuple(headers))
        state.streams[sid] = rules.Stream(headers)
    elif sid in state.reset_by_us:
        return  # a stream we reset: its frames are ignored
    elif isinstance(event, h2.events.TrailersReceived):
        headers = [(bytes(n), bytes(v)) for n, v in event.headers or []]
        why = fields.trailers_verdict(headers, state.streams[sid], state, sid)
        if why is not None:
            _refuse(conn, sid, out, state)
    elif isinstance(event, h2.events.DataReceived):
        out.requests[sid].body += event.data or b""
        state.streams[sid].body += len(event.data or b"")
    elif isinstance(event, h2.events.StreamEnded):
        out.requests[sid].ended = True
        state.streams[sid].ended = True
    elif isinstance(event, h2.events.StreamReset) and event.remote_reset:
        out.client_resets.append((sid, int(event.error_code or 0)))
        if sid in state.streams:
            state.streams[sid].reset_by_client = True
    elif isinstance(event, h2.events.ConnectionTerminated):
        out.client_goaway = True


def _record_h2_sent(out: Outcome, data: bytes, state: rules.State, kind: int) -> bool:
    """Record what h2 sent; True when a rule turned it into a connection error."""
    for frame in _sent_frames(data):
        if isinstance(frame, RstStreamFrame):
            fate = rules.h2_reset(kind, frame.stream_id, frame.error_code, state)
            if fate == "escalate":
                out.goaway = frame.error_code
                return True
            if fate == "keep":
                out.resets.append((frame.stream_id, frame.error_code))
                state.reset_by_us.add(frame.stream_id)
        elif isinstance(frame, GoAwayFrame):
            out.goaway = frame.error_code
    return False
