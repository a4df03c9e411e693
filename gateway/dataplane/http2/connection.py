"""The downstream HTTP/2 codec, sharing ``Exchange`` with HTTP/1.1.

The protocol itself (frames, stream states, HPACK, flow-control arithmetic) is
``engine``; this module ties its events to exchanges, one per stream, each writing
through its ``stream.StreamSink``. Upstreams are still spoken to in HTTP/1.1. Flow
control both ways: request DATA is acknowledged (window reopened) only while the
upstream accepts it, and response bytes wait for the stream's window
(``StreamSink``), pausing the upstream read when more than a bounded amount is
waiting. The connection's own limits are ``guard``'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.exchange import Exchange
from gateway.dataplane.exchange.head import ConnectionFacts
from gateway.dataplane.http2.engine import H2Engine
from gateway.dataplane.http2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    RequestRefused,
    StreamEnded,
    StreamMalformed,
    StreamReset,
    WindowOpened,
)
from gateway.dataplane.http2.guard import (
    BUSY_STREAMS,
    STALLED_STREAMS,
    STREAMS_PER_BUSY_TURN,
    STREAMS_PER_TURN,
    Cut,
    H2Guard,
    head_timeout,
    next_turn_end,
    stall_timeout,
)
from gateway.dataplane.http2.head import read_head
from gateway.dataplane.http2.protocol import (
    GOAWAY,
    MAX_CONCURRENT_STREAMS,
    ErrorCode,
    H2Error,
    frame,
)
from gateway.dataplane.http2.stream import CONNECTION_HIGH_WATER, HIGH_WATER, StreamSink
from gateway.net.pipe import CLOSE_GRACE
from gateway.twisted_ext.fastio import direct_writer, write_now

log = Logger()

# Streams of a closed connection whose exchanges are let go (upstream aborted, logged)
# in one turn of the reactor.
RELEASES_PER_TURN = 16


@implementer(IPushProducer)
class H2Connection(Protocol):
    """One HTTP/2 client connection (after ALPN ``h2`` or the h2c preface)."""

    transport: Any

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        # Streams between the advertised limit and the hard cap reach the codec, which
        # refuses them with REFUSED_STREAM; past the cap the engine closes the connection.
        self.h2 = H2Engine()
        self.streams: dict[int, StreamSink] = {}
        self.client_ip = ""
        self.facts = ConnectionFacts("")  # (connectionMade: the peer's)
        self.last_activity = 0.0
        self.write_blocked_since = 0.0
        self.close_started: float | None = None
        self.producing = False  # registered as the transport's producer (connectionMade)
        self.send_paused = False  # the client's socket buffer is full
        self.guard = H2Guard(core.reactor.seconds())
        self.buffered = 0  # response bytes waiting in all streams
        self.unflushed = 0  # DATA framed since the last flush
        self.dirty: list[StreamSink] = []  # streams with small body bytes not yet framed
        # Requests not started yet because STALLED_STREAMS of the connection's responses
        # wait for a window: started as those drain or end (``_start_waiting``).
        self.waiting: list[StreamSink] = []
        self.squeezed = False  # a stream's upstream was paused on them
        # The rest of a read holding more requests than a turn starts (reading paused
        # until it is handled, a turn at a time) and the call that handles the next turn.
        self.backlog: bytes | None = None
        self._turn: Any = None
        # The gateway is stopping (``drain``): the last stream id the GOAWAY named.
        self.drain_last: int | None = None

    def connectionMade(self) -> None:
        transport: Any = self.transport
        if hasattr(transport, "setTcpNoDelay"):
            transport.setTcpNoDelay(True)
        if direct_writer(transport):
            self._write = partial(write_now, transport)  # type: ignore[method-assign]
        now = self.last_activity = self.core.reactor.seconds()
        # the client (after any PROXY header: this codec starts on the first bytes)
        self.client_ip = getattr(transport.getPeer(), "host", "")
        self.facts = ConnectionFacts(self.client_ip, transport)
        if self.core.penalties.refuses(self.client_ip, now):
            # its connections keep being cut (refused at the accept, unless behind a
            # PROXY-protocol balancer): told why, and closed without a byte more read
            self.h2.close(ErrorCode.ENHANCE_YOUR_CALM)
            self._write(self.h2.data_to_send())
            self.close_started = now
            transport.abortConnection()
            return
        self.core.connections.add(self)
        self.h2.initiate()  # our SETTINGS
        self.flush()
        # The connection's own producer: when the client stops reading and the socket's
        # buffer fills, streams stop sending DATA and keep it pending, and past their
        # high-water mark they pause their upstreams (a client advertising a huge window
        # cannot make the gateway buffer without bound).
        transport.registerProducer(self, True)
        self.producing = True

    def pauseProducing(self) -> None:
        self.send_paused = True
        self.write_blocked_since = self.core.reactor.seconds()

    def resumeProducing(self) -> None:
        self.send_paused = False
        self.write_blocked_since = 0.0
        self.guard.blocked_bytes = 0
        for stream in list(self.streams.values()):
            if stream.pending or stream.end_pending:
                stream._drain()
        self.flush()

    def stopProducing(self) -> None:
        self.send_paused = True

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.core.connections.discard(self)
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self.backlog = None
        streams = list(self.streams.values())
        self.streams.clear()
        self._release(streams, "", reason.check(ConnectionDone) is not None)

    def _release(self, streams: list[StreamSink], why: str, clean: bool) -> None:
        """Let go of the streams of a connection that is gone (or cut, ``why``): each
        exchange's upstream request aborted and the exchange logged, a turn's worth at
        a time (128 at once held the reactor for over 10 ms)."""
        self.h2.drop_all()  # nothing more is written for them
        for stream in streams[:RELEASES_PER_TURN]:
            if stream.pipe is not None:
                stream.pipe.lost(why or "client connection lost", clean=clean)
            elif stream.exchange is not None:
                exchange, stream.exchange = stream.exchange, None  # see forget_stream
                if why:
                    exchange.abandon(why)
                else:
                    exchange.downstream_lost()
        if len(streams) > RELEASES_PER_TURN:
            self.core.reactor.callLater(0, self._release, streams[RELEASES_PER_TURN:], why,
                                        clean)

    def flush(self) -> None:
        if self.dirty:
            dirty, self.dirty = self.dirty, []
            for stream in dirty:
                if stream.pending:
                    stream._drain()
        self.unflushed = 0
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            # Blocked output is what is written once the socket is already full: the
            # write that fills it (many streams' DATA queued in one turn) pauses us
            # while it runs, and is not the client's refusal to read.
            blocked = self.send_paused
            self._write(data)
            cut = self.guard.wrote(len(data), blocked)
            if cut is not None:
                self.cut(cut)

    def _write(self, data: bytes) -> None:
        self.transport.write(data)

    def reset(self, stream_id: int, code: int) -> None:
        self.h2.reset_stream(stream_id, code)
        self.flush()

    def acknowledge(self, stream_id: int, size: int) -> None:
        self.h2.acknowledge(stream_id, size)
        self.flush()

    def forget_stream(self, stream: StreamSink) -> None:
        """The stream is over: drop it, and give the connection window back the bytes
        it held unacknowledged (a paused upload, DATA before a refused CONNECT), or
        every other stream's uploads would stall on a window that never reopens.

        The stream lets go of its exchange (whose sink it is): that cycle kept every
        request, and its connection, until the next full garbage collection."""
        self.streams.pop(stream.stream_id, None)
        stream.exchange = None
        if stream.pending:
            self.unbuffer(len(stream.pending))
            stream.pending.clear()
        if stream.unacked:
            size, stream.unacked = stream.unacked, 0
            self.acknowledge(stream.stream_id, size)  # credits the connection only
        if self.waiting:
            self._start_waiting()

    def unbuffer(self, size: int) -> None:
        """``size`` waiting bytes were sent or dropped; once the connection is below
        half its high-water mark, streams paused on it read their upstreams again."""
        self.buffered -= size
        if self.squeezed and self.buffered < CONNECTION_HIGH_WATER // 2:
            self.squeezed = False
            for stream in list(self.streams.values()):
                if stream.producer_paused and len(stream.pending) < HIGH_WATER // 2:
                    stream.producer_paused = False
                    stream.producer.resumeProducing()

    def stream_done(self, stream: StreamSink) -> None:
        if stream.state.local_ended or not (stream.pending or stream.end_pending):
            self.forget_stream(stream)
        # else: the body still waits for the client's window; _drain removes the
        # stream once END_STREAM is out.
        self.last_activity = self.core.reactor.seconds()
        self.flush()

    def dataReceived(self, data: bytes) -> None:
        if self.close_started is not None:
            return
        now = self.last_activity = self.core.reactor.seconds()
        guard = self.guard
        cut = guard.feed(data, now, self._turn_size())
        if cut is not None:
            self.cut(cut)
            return
        if self.backlog is not None:  # (a TLS transport may deliver what it had decrypted)
            self.backlog += data
            return
        guard.reset_in_read.clear()
        split = guard.turn_end
        if split is not None:
            self._defer_rest(data[split:])
            data = data[:split]
        self._receive(data, now)

    def _turn_size(self) -> int:
        return STREAMS_PER_TURN if len(self.streams) < BUSY_STREAMS else STREAMS_PER_BUSY_TURN

    def _defer_rest(self, rest: bytes) -> None:
        """Hand ``rest`` to h2 on the next turn of the reactor, reading paused till then."""
        if self.backlog is None:
            self.transport.pauseProducing()
        self.backlog = rest
        self._turn = self.core.reactor.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        self._turn = None
        rest, self.backlog = self.backlog, None
        if rest is None or self.close_started is not None or self.transport is None:
            return
        split = next_turn_end(rest, self._turn_size())
        if split is None:
            self.transport.resumeProducing()
        else:
            self._defer_rest(rest[split:])
            rest = rest[:split]
        self._receive(rest, self.core.reactor.seconds())

    def _receive(self, data: bytes, now: float) -> None:
        """Give ``data`` (a read, or a turn of one) to the engine and act on its events."""
        try:
            events = self.h2.receive(data)
        except H2Error as exc:
            self.cut(Cut(exc.limit, exc.code, exc.detail[:200]))  # GOAWAY is queued
            return
        # A stream opened and reset in the same read (rapid reset) is never started
        # (counted by the guard, which saw the whole read: its reset may be a turn later).
        # A stream the client made the engine reset (malformed: a bad body, trailers, a
        # self-dependency) counts as a reset by the client: otherwise a cheap frame after
        # each request would cancel upstream work past the rapid-reset budget
        # (MadeYouReset, CVE-2025-8671).
        if len(events) == 1:
            event = events[0]
            if type(event) is RequestReceived:  # the common read: one whole request
                if event.stream_id not in self.guard.reset_in_read:
                    self._request(event.stream_id, event.headers, event.ended)
                self.flush()
                return
        reset = {e.stream_id for e in events if isinstance(e, StreamReset)}
        malformed = {e.stream_id for e in events if isinstance(e, StreamMalformed)}
        served = sum(1 for e in events if isinstance(e, StreamReset)
                     and not e.answered and e.stream_id in self.streams)
        for _ in range(served + len(malformed)):
            cut = self.guard.premature_reset(now)
            if cut is not None:
                self.cut(cut)
                return
        reset_in_read = self.guard.reset_in_read
        for event in events:
            match event:
                case RequestReceived(stream_id, headers, ended):
                    if stream_id not in reset and stream_id not in reset_in_read \
                            and stream_id not in malformed:
                        self._request(stream_id, headers, ended)
                case DataReceived(stream_id, data, flow):
                    self._data(stream_id, data, flow)
                case StreamEnded(stream_id):
                    self._ended(stream_id)
                case StreamReset(stream_id):
                    if (stream := self.streams.get(stream_id)) is not None:
                        self._drop(stream, "client reset the stream", by_client=True)
                case WindowOpened(stream_id):
                    self._window(stream_id)
                case StreamMalformed(stream_id, why):  # the engine has reset it
                    if (stream := self.streams.get(stream_id)) is not None:
                        self._drop(stream, f"malformed HTTP/2 stream: {why}")
                case RequestRefused(stream_id, why):
                    log.debug("HTTP/2 request from {client} refused: {why}",
                              client=self.client_ip, why=why)
                case ConnectionTerminated():
                    self.close_connection()
        self.flush()

    def _ended(self, stream_id: int) -> None:
        """The request body is complete: the exchange's, or the tunnel's half-close."""
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if stream.pipe is not None:
            stream.pipe.eof_from(stream.pipe.a)
        elif stream.exchange is None:
            return
        elif stream.exchange.connect:
            stream.early_end = True  # before the 200: handed on when the tunnel opens
        else:
            stream.exchange.request_complete()

    def _window(self, stream_id: int) -> None:
        targets = self.streams.values() if stream_id == 0 else (
            [self.streams[stream_id]] if stream_id in self.streams else [])
        for stream in list(targets):
            if stream.pending or stream.end_pending:
                stream._drain()
        if self.waiting:
            self._start_waiting()

    def _data(self, stream_id: int, data: bytes, flow: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None or stream.exchange is None:
            self.acknowledge(stream_id, flow)
            return
        stream.last_read = self.last_activity
        if stream.pipe is not None:
            stream.pipe.from_a(data)
        elif stream.exchange.connect:
            stream.early.append(data)  # before the 200: kept, and not acknowledged
        else:
            stream.exchange.request_body(data)
        if stream.pauses:
            stream.unacked += flow
        else:
            self.acknowledge(stream_id, flow)

    def _request(self, stream_id: int, fields: list[tuple[bytes, bytes]],
                 ended: bool) -> None:
        if self.drain_last is not None and self._refused_after_goaway(stream_id):
            return  # (the test inline: a call on every request costs 1 %)
        if len(self.streams) >= MAX_CONCURRENT_STREAMS:  # the engine allows up to the cap
            self.reset(stream_id, ErrorCode.REFUSED_STREAM)
            cut = self.guard.refused(self.core.reactor.seconds())
            if cut is not None:
                self.cut(cut)
            return
        head, problem = read_head(fields, ended, self.core.reject_parameters)
        stream = StreamSink(self, stream_id, self.h2.stream_state(stream_id))
        self.streams[stream_id] = stream
        exchange = Exchange(stream, self.core, self.facts, head)
        stream.exchange = exchange
        if problem:
            exchange.fail(400, problem)
            return
        if head.connect:
            # RFC 9113 8.5: the stream's DATA frames are the tunnel's bytes; they wait
            # (unacknowledged) for the tunnel
            stream.early_end = ended
            stream.pause_reading("connect")
            exchange.begin()
            return
        if self.buffered and self._stalled() >= STALLED_STREAMS:
            # the client reads none of what it asked for: no more upstream work for it
            # until it does (its frames are still read: WINDOW_UPDATEs and bodies)
            exchange.head_complete()
            self.waiting.append(stream)
            return
        exchange.begin()

    def _stalled(self) -> int:
        """Streams whose response bytes wait for a window that stays shut."""
        return sum(1 for s in self.streams.values() if s.pending and s.blocked_since is not None)

    def _start_waiting(self) -> None:
        while self.waiting and (not self.buffered or self._stalled() < STALLED_STREAMS):
            stream = self.waiting.pop(0)
            exchange = stream.exchange
            if stream.stream_id in self.streams and exchange is not None \
                    and not exchange.finished and not stream.closed:
                exchange.begin()

    def _drop(self, stream: StreamSink, why: str, by_client: bool = False) -> None:
        """The stream is over (the client reset it, or we give up on it): drop it and
        its waiting bytes, and release its upstream work."""
        exchange = stream.exchange
        self.forget_stream(stream)
        if stream.pipe is not None:
            stream.pipe.lost(why, clean=False)
        elif exchange is not None and by_client:
            exchange.downstream_lost()
        elif exchange is not None:
            exchange.abandon(why)

    def _body_timed_out(self, stream: StreamSink, exchange: Exchange) -> None:
        """408 (or the response cut off if it began: the stream is reset and forgotten
        then), the upstream request dropped. A 408 that waits for a window the client
        does not open is given up at once: the stream is reset and forgotten too."""
        exchange.request_timed_out()
        if stream.pending or stream.end_pending:
            self.reset(stream.stream_id, ErrorCode.CANCEL)
            self.forget_stream(stream)

    def cut(self, cut: Cut) -> None:
        """A limit is spent: GOAWAY with its code, one log line, every stream's upstream
        released, and the connection closed (aborted when the client does not read)."""
        if self.close_started is not None:
            return
        self.close_started = self.core.reactor.seconds()
        client = self.client_ip
        log.info("HTTP/2 connection from {client} cut: {limit} ({detail})",
                 client=client, limit=cut.limit, code=cut.code.name, detail=cut.detail)
        penalty = self.core.penalties.strike(client, cut.limit, self.close_started)
        if penalty is not None:
            log.warn("HTTP/2 client {client} refused for {seconds:g} s: its connections "
                     "keep being cut (last: {limit})", client=client, seconds=penalty,
                     limit=cut.limit, penalty=penalty)
        self.h2.close(cut.code)
        data = self.h2.data_to_send()
        if data:
            self._write(data)
        streams = list(self.streams.values())
        self.streams.clear()
        self._release(streams, f"HTTP/2 connection cut: {cut.limit}", False)
        if cut.abort:
            self.transport.abortConnection()
        else:
            self._lose()

    def _lose(self) -> None:
        """Twisted's TLS transport starts its shutdown only once no producer is
        registered: this connection is its own (see ``connectionMade``), so it steps
        down first, or the close would wait for ``CLOSE_GRACE`` every time. Once: a
        connection may be closed again (a GOAWAY after a GOAWAY), and a transport need
        not accept a second step-down."""
        if self.producing:
            self.producing = False
            self.transport.unregisterProducer()
        self.transport.loseConnection()

    # watchdog
    def close_connection(self) -> None:
        """Close in order; ``check_deadlines`` aborts it after ``CLOSE_GRACE`` (over TLS
        an orderly close waits for the peer's close_notify, which may never come)."""
        if self.close_started is None:
            self.close_started = self.core.reactor.seconds()
        self._lose()

    def check_deadlines(self, now: float) -> None:
        core = self.core
        if self.close_started is not None:
            if now - self.close_started > CLOSE_GRACE:
                self.transport.abortConnection()
            return
        stall = stall_timeout(core.timeout_write)
        if self.write_blocked_since and now - self.write_blocked_since > stall:
            self.cut(Cut("timeout_write", ErrorCode.CANCEL,
                         f"the client read nothing for {stall:g} s", abort=True))
            return
        cut = head_timeout(self.guard.head_since, now, core.timeout_read)
        if cut is not None:
            self.cut(cut)
            return
        for stream in list(self.streams.values()):
            exchange = stream.exchange
            if exchange is not None and not exchange.request_done and stream.pipe is None \
                    and not exchange.connect and core.timeout_read and not stream.pauses \
                    and now - stream.last_read > core.timeout_read:
                # The request body stopped (time the gateway holds it back is not the
                # client's: a paused stream withholds its window).
                self._body_timed_out(stream, exchange)
            elif stream.blocked_since is not None and now - stream.blocked_since > stall:
                # its window stayed closed: reset it, drop its bytes, release the upstream
                self.reset(stream.stream_id, ErrorCode.CANCEL)
                self._drop(stream, f"timeout_write: no window for {stall:g} s")
            elif exchange is not None and exchange.deadline and now > exchange.deadline \
                    and not exchange.finished and not stream.producer_paused:
                exchange.timed_out()
        if not self.streams and core.timeout_idle and \
                now - self.last_activity > core.timeout_idle:
            self.h2.close()
            self.flush()
            self.close_connection()

    # -- the gateway's stop (``services.drain``)

    def drain(self) -> None:
        """The gateway is stopping: GOAWAY NO_ERROR naming the highest stream taken
        (RFC 9113 6.8; the client opens no more and may retry later ones elsewhere);
        the open streams finish, and the connection closes once none is left. The
        engine goes on reading (bodies, WINDOW_UPDATEs for the responses finishing).
        Called again at every poll of the drain."""
        if self.close_started is not None or self.transport is None:
            return
        if self.drain_last is None:
            self.drain_last = self.h2.highest_inbound_stream_id
            self.h2.out += frame(GOAWAY, 0, 0, self.drain_last.to_bytes(4, "big")
                                 + ErrorCode.NO_ERROR.to_bytes(4, "big"))
            self.flush()
        if not self.streams:
            self.close_connection()

    def _refused_after_goaway(self, stream_id: int) -> bool:
        """A stream the client opened after the drain's GOAWAY (crossing it on the
        wire) is refused: REFUSED_STREAM tells it nothing was done, safe to retry."""
        if self.drain_last is None or stream_id <= self.drain_last:
            return False
        self.reset(stream_id, ErrorCode.REFUSED_STREAM)
        return True
