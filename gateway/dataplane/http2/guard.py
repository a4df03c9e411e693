"""Per-connection limits against HTTP/2 abuse, as plain bookkeeping (no I/O).

The codec feeds every received byte to ``H2Guard.feed`` before the engine parses it: the
guard walks the frame headers only (9 bytes a frame, bodies skipped) and counts what
costs the gateway work without being a request: client RST_STREAMs (rapid reset,
CVE-2023-44487), control frames (SETTINGS, PING, WINDOW_UPDATE, PRIORITY, empty DATA,
unknown types: the 2019 flood family), header blocks split over endless CONTINUATIONs,
frames longer than the size we advertise. A spent limit is a ``Cut``: the codec sends
GOAWAY with its code, logs its name and closes. What the engine enforces
itself (header lists past ``MAX_HEADER_LIST_SIZE``, HPACK table size updates past ours,
flow control, streams past ``STREAMS_HARD_CAP``) arrives as its ``H2Error``, which names
the limit the same way.

Budgets are token buckets: a burst, refilled with time, and for control frames also
with what the gateway sends (a client reading a big download at a high rate answers it
with WINDOW_UPDATEs; that work is paid for by real traffic).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.budget import Budget
from gateway.dataplane.http2.protocol import (
    CONTINUATION,
    DATA,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    HEADER_BLOCK_MAX_BYTES,
    HEADER_BLOCK_MAX_FRAMES,
    HEADERS,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    ErrorCode,
)

# The bursts are what one connection may cost before it is cut (tens of us of parsing
# per reset stream, a few us per control frame): a client that reconnects after
# each cut keeps the gateway busy, so each read of an abusive connection must stay short.
# Client RST_STREAMs: a browser cancels at most its open streams at once.
RESET_BURST = MAX_CONCURRENT_STREAMS
RESET_RATE = 32.0  # per second
# RST_STREAM frames of any kind (most answer frames that reached a closed stream).
RST_FRAME_BURST = 1024
RST_FRAME_RATE = 256.0
# Control frames: burst, refill per second, and one more per CONTROL_CREDIT_BYTES sent
# (a client giving the window back every 4 KiB it reads, as Go's does, sends 2 per 4 KiB).
CONTROL_BURST = 128
CONTROL_RATE = 64.0
CONTROL_CREDIT_BYTES = 1024
# Streams refused for exceeding MAX_CONCURRENT_STREAMS (a client that ignores it).
REFUSED_BURST = 32
REFUSED_RATE = 1.0
# Bytes the gateway wrote while the client's socket was full (the client stopped
# reading): control answers and response heads pile up in the transport's buffer.
BLOCKED_OUTPUT_MAX = 512 * 1024
# Requests started per turn of the reactor on one connection: a read holding more
# HEADERS (a browser's page load, or one client opening 128 streams at once) is handled
# a turn at a time, the connection's reading paused meanwhile, so every other connection
# is served between two turns (a single-threaded reactor is fair between connections
# only if no connection's read is long).
STREAMS_PER_TURN = 8
# ... and once a connection already has this many requests under way, it starts fewer
# a turn: a connection with few requests (a person) is not kept waiting by one with
# many (a crawler, or a client holding 128 streams open and reconnecting when cut).
BUSY_STREAMS = 32
STREAMS_PER_BUSY_TURN = 2
# Requests opened and reset within one read: a client cancelling what it just asked
# for sends RST_STREAM later, after a reply or a user's action; a read holding many
# such pairs is rapid reset, cut before the engine parses any of it.
RESETS_PER_READ = 16
# Requests of a connection start only while fewer than this many of its responses wait
# for a window that stays shut: a client that reads none of what it asked for (zero
# windows, 128 large downloads at once) gets no more upstream work started until it
# reads; the rest wait, their frames still read, and start as those drain or end.
STALLED_STREAMS = 8
# A stream whose response bytes wait for a window that does not open (and a connection
# whose socket stays full) for this long is reset, unless ``timeout_write`` is set.
STALL_TIMEOUT = 60.0



@dataclass(frozen=True)
class Cut:
    """Why a connection is closed: a stable limit name for the log, the GOAWAY code."""

    limit: str
    code: ErrorCode
    detail: str
    abort: bool = False  # the client does not read: no orderly close


class H2Guard:
    """The limits of one connection. ``feed`` before the engine parses; ``wrote`` after writes."""

    def __init__(self, now: float) -> None:
        self._preface = len(PREFACE)
        self._head = b""  # a frame header split across reads
        self._head_at = 0.0  # ... and when its first byte came
        self._skip = 0  # payload bytes of the current frame still to pass
        self._block_frames = 0  # frames of an unfinished header block
        self._block_bytes = 0
        self._ends_block = False  # the current frame's payload completes a header block
        # When the unfinished header block began (``timeout_read`` runs from there, as
        # for an HTTP/1.1 head): None when no block is being received.
        self.head_since: float | None = None
        self.resets = Budget(RESET_BURST, RESET_RATE, now)
        self.rst_frames = Budget(RST_FRAME_BURST, RST_FRAME_RATE, now)
        self._opened_now: set[int] = set()  # streams whose HEADERS came in this read
        # ... and of those, the ones the client reset in the same read: never started,
        # and already counted (the codec clears it once it has handled the read)
        self.reset_in_read: set[int] = set()
        self._resets_now = 0
        # Where in the last chunk fed the request past STREAMS_PER_TURN begins (a
        # frame boundary), or None: the codec hands the engine only what comes before it.
        self.turn_end: int | None = None
        self.control = Budget(CONTROL_BURST, CONTROL_RATE, now)
        self.refusals = Budget(REFUSED_BURST, REFUSED_RATE, now)
        self.sent = 0  # bytes written, credited to the control budget
        self._credited = 0
        self.blocked_bytes = 0

    def feed(self, data: bytes, now: float, turn: int = STREAMS_PER_TURN) -> Cut | None:
        """Count what ``data`` (one read) costs; ``turn``: the requests a turn starts."""
        size = len(data)
        pos = 0
        self._opened_now.clear()
        self._resets_now = 0
        self.turn_end = None
        if size > 9 and data[3] == HEADERS and data[4] & FLAG_END_HEADERS and not (
                self._preface or self._skip or self._head or self._block_frames) and \
                ((data[0] << 16) | (data[1] << 8) | data[2]) + 9 == size <= MAX_FRAME_SIZE + 9:
            return None  # the common read: one request, one whole HEADERS frame
        started = 0
        if self._preface:
            pos = min(self._preface, size)
            self._preface -= pos
        while pos < size:
            if self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
                if not self._skip and self._ends_block:
                    self._ends_block, self.head_since = False, None
                continue
            began = now
            if self._head:
                need = 9 - len(self._head)
                self._head += data[pos:pos + need]
                pos += need
                if len(self._head) < 9:
                    return None
                head, self._head, began = self._head, b"", self._head_at
            elif size - pos < 9:
                self._head, self._head_at = data[pos:], now
                return None
            else:
                head = data[pos:pos + 9]
                if head[3] == HEADERS:
                    started += 1
                    if started > turn and self.turn_end is None:
                        self.turn_end = pos
                pos += 9
            length = int.from_bytes(head[:3], "big")
            self._skip = length
            stream_id = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            cut = self._frame(length, head[3], head[4], stream_id, now, began)
            if cut is not None:
                return cut
            if not self._skip and self._ends_block:
                self._ends_block, self.head_since = False, None
        return None

    def _frame(self, length: int, kind: int, flags: int, stream_id: int, now: float,
               began: float) -> Cut | None:
        if length > MAX_FRAME_SIZE:
            return Cut("max_frame_size", ErrorCode.FRAME_SIZE_ERROR,
                       f"a {length}-byte frame (type {kind}), {MAX_FRAME_SIZE} advertised")
        if kind == DATA:
            if length or flags & FLAG_END_STREAM:
                return None
        elif kind in (HEADERS, PUSH_PROMISE):
            self._opened_now.add(stream_id)
            if self.head_since is None:
                self.head_since = began  # a header trickled in counts from its first byte
            if not flags & FLAG_END_HEADERS:
                self._block_frames, self._block_bytes = 1, length
            else:
                self._ends_block = True
            return None
        elif kind == CONTINUATION:
            if not self._block_frames:
                return None  # a naked CONTINUATION: the engine refuses it
            self._block_frames += 1
            self._block_bytes += length
            if self._block_bytes > HEADER_BLOCK_MAX_BYTES:
                return Cut("header_block_bytes", ErrorCode.ENHANCE_YOUR_CALM,
                           f"a header block over {HEADER_BLOCK_MAX_BYTES} bytes")
            if self._block_frames > HEADER_BLOCK_MAX_FRAMES:
                return Cut("header_block_frames", ErrorCode.ENHANCE_YOUR_CALM,
                           f"a header block in over {HEADER_BLOCK_MAX_FRAMES} frames")
            if flags & FLAG_END_HEADERS:
                self._block_frames = self._block_bytes = 0
                self._ends_block = True
            return None
        elif kind == RST_STREAM:
            # A request opened and reset in the same read is the rapid-reset pattern;
            # resets of requests opened earlier are counted by the codec when the stream
            # is still being served (``premature_reset``). Any other RST_STREAM (an h2
            # client answers each frame reaching a stream it closed with one) only
            # counts against a generous frame budget.
            if stream_id in self._opened_now:
                self.reset_in_read.add(stream_id)
                self._resets_now += 1
                if self._resets_now > RESETS_PER_READ:
                    return Cut("rapid_reset", ErrorCode.ENHANCE_YOUR_CALM,
                               f"over {RESETS_PER_READ} requests opened and reset in one read")
                return self.premature_reset(now)
            if self.rst_frames.take(now):
                return None
            return Cut("reset_flood", ErrorCode.ENHANCE_YOUR_CALM,
                       f"over {RST_FRAME_BURST} RST_STREAM frames at over "
                       f"{RST_FRAME_RATE:g}/s")
        credit = (self.sent - self._credited) / CONTROL_CREDIT_BYTES
        self._credited = self.sent
        if self.control.take(now, credit):
            return None
        return Cut("control_flood", ErrorCode.ENHANCE_YOUR_CALM,
                   f"over {CONTROL_BURST} control frames at over {CONTROL_RATE:g}/s "
                   f"(last: type {kind})")

    def premature_reset(self, now: float) -> Cut | None:
        """The client reset a request before its response was complete (a stream being
        served, or one opened in the same read). Resets of streams the gateway had
        already ended (an h2 client answers frames on a closed stream with one) are not
        counted: a reading client must never be cut for them."""
        if self.resets.take(now):
            return None
        return Cut("rapid_reset", ErrorCode.ENHANCE_YOUR_CALM,
                   f"over {RESET_BURST} requests reset by the client at over "
                   f"{RESET_RATE:g}/s")

    def refused(self, now: float) -> Cut | None:
        """A stream past MAX_CONCURRENT_STREAMS was refused (REFUSED_STREAM)."""
        if self.refusals.take(now):
            return None
        return Cut("max_concurrent_streams", ErrorCode.PROTOCOL_ERROR,
                   f"streams past the advertised {MAX_CONCURRENT_STREAMS}, "
                   f"{REFUSED_BURST} refusals ignored")

    def wrote(self, size: int, blocked: bool) -> Cut | None:
        self.sent += size
        if not blocked:
            return None
        self.blocked_bytes += size
        if self.blocked_bytes <= BLOCKED_OUTPUT_MAX:
            return None
        return Cut("blocked_output", ErrorCode.ENHANCE_YOUR_CALM,
                   f"over {BLOCKED_OUTPUT_MAX} bytes queued for a client that does not read",
                   abort=True)


def next_turn_end(data: bytes, streams: int = STREAMS_PER_TURN) -> int | None:
    """Where the request past ``streams`` begins in ``data`` (which starts at a frame
    boundary: the rest of a read cut at ``H2Guard.turn_end``), or None."""
    pos = started = 0
    size = len(data)
    while pos + 9 <= size:
        if data[pos + 3] == HEADERS:
            started += 1
            if started > streams:
                return pos
        pos += 9 + int.from_bytes(data[pos:pos + 3], "big")
    return None


def head_timeout(head_since: float | None, now: float, timeout_read: float) -> Cut | None:
    """A header block still unfinished ``timeout_read`` after it began (slowloris)."""
    if head_since is None or not timeout_read or now - head_since <= timeout_read:
        return None
    return Cut("timeout_read", ErrorCode.ENHANCE_YOUR_CALM,
               f"a request head unfinished after {timeout_read:g} s")


def stall_timeout(timeout_write: float) -> float:
    """How long a stream's (or the socket's) output may wait without progress."""
    return timeout_write or STALL_TIMEOUT
