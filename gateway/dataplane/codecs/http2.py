"""The downstream HTTP/2 codec, sharing ``Exchange`` with HTTP/1.1.

The protocol itself (frames, stream states, HPACK, flow-control arithmetic) is
``h2_engine``; this module ties its events to exchanges. Each stream is one exchange;
upstreams are still spoken to in HTTP/1.1. Flow control both ways: request DATA is
acknowledged (window reopened) only while the upstream accepts it, and response bytes
wait for the stream's window, pausing the upstream read when more than a bounded
amount is waiting. A small response is framed when the connection flushes, so its
HEADERS and DATA (with END_STREAM) leave in one write.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import partial
from typing import Any

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.codecs import h2_engine
from gateway.dataplane.codecs.connection_tls import ConnectionTLS
from gateway.dataplane.codecs.h2_engine import ErrorCode, H2Engine, H2Error
from gateway.dataplane.codecs.h2_guard import (
    BUSY_STREAMS,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    STALLED_STREAMS,
    STREAMS_HARD_CAP,
    STREAMS_PER_BUSY_TURN,
    STREAMS_PER_TURN,
    Cut,
    H2Guard,
    head_timeout,
    next_turn_end,
    stall_timeout,
)
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.base import BODY_CHUNKED, BODY_LENGTH, ExchangeBase
from gateway.dataplane.exchange.request import Exchange
from gateway.net.pipe import CLOSE_GRACE, Pipe
from gateway.observability.tracing.propagation import CONTEXT_NAMES
from gateway.twisted_ext.fastio import direct_writer, write_now
from gateway.wire.normalize import BadTarget, connect_authority, normalise_target

log = Logger()


_HIGH_WATER = 256 * 1024
_CONNECTION_HIGH_WATER = 2 * 1024 * 1024  # all streams' waiting response bytes together
_FLUSH_EVERY = 64 * 1024
_CONNECTION_SPECIFIC = frozenset({b"connection", b"keep-alive", b"proxy-connection",
                                  b"transfer-encoding", b"upgrade", b"te"})
PREFACE = h2_engine.PREFACE
# RFC 9110 5.6.2 token (lower case: the engine refuses upper case). HTTP/2 only refuses
# controls, spaces, ':' and non-ASCII in names (RFC 9113 8.2.1): ";x" or "a(b)" would
# reach the HTTP/1.1 upstream as a header line it cannot parse.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9a-z]+")
# The method goes into the upstream's request line: a token (RFC 9110 9.1).
_METHOD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What an authority may hold (RFC 3986 3.2: reg-name, IP literal, port); it becomes the
# route's host and X-Forwarded-Host.
_AUTHORITY = re.compile(rb"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%@]*")
# Control characters HTTP/1.1 field values may not hold (RFC 9110 5.5); h2 refuses only
# NUL, CR and LF, and "a\x01b" would reach an upstream that refuses it.
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# Streams of a closed connection whose exchanges are let go (upstream aborted, logged)
# in one turn of the reactor.
RELEASES_PER_TURN = 16


class _Stream:
    """The ``Sink`` of one HTTP/2 stream."""

    chunked_framing = False

    def __init__(self, owner: H2Connection, stream_id: int) -> None:
        self.owner = owner
        self.stream_id = stream_id
        self.client_ip = owner.client_ip
        self.exchange: Exchange | None = None
        self.pending = bytearray()
        self.end_pending = False
        self.producer: Any = None
        self.producer_paused = False
        self.unacked = 0
        self.pauses: set[str] = set()
        self.closed = False
        self.pipe: Pipe | None = None  # a CONNECT tunnel once it is established
        self.early: list[bytes] = []  # tunnel DATA that came before the 200
        self.early_end = False  # ... and END_STREAM
        self.blocked_since: float | None = None  # response bytes wait for a window since
        self.last_read = owner.core.reactor.seconds()  # request HEADERS or DATA, last

    # Sink
    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   body: bool, close: bool, first_body: bytes = b"") -> None:
        if self.closed:
            return
        if not self.owner.h2.send_response_head(self.stream_id, status, headers,
                                                _CONNECTION_SPECIFIC,
                                                end_stream=not body and not first_body):
            self.closed = True
            return
        if first_body:
            self.write_body(first_body)

    def write_body(self, data: bytes) -> None:
        if self.closed:
            return
        self.pending += data
        owner = self.owner
        owner.buffered += len(data)
        if len(self.pending) < MAX_FRAME_SIZE and not self.end_pending:
            # framed at the next flush (or end_body): with its END_STREAM, in one frame
            owner.dirty.append(self)
            return
        self._drain()
        if self.producer is not None and not self.producer_paused and self.pending and (
                len(self.pending) > _HIGH_WATER or owner.buffered > _CONNECTION_HIGH_WATER):
            self.producer_paused = owner.squeezed = True
            self.producer.pauseProducing()

    def end_body(self) -> None:
        self.end_pending = True
        self._drain()

    def _drain(self) -> None:
        if self.closed:
            return
        owner = self.owner
        conn = owner.h2
        sid = self.stream_id
        sent = 0
        pending = self.pending
        ended = False
        while pending and not owner.send_paused:
            window = conn.window(sid)
            if window <= 0:
                break
            if window > conn.max_outbound_frame_size:
                window = conn.max_outbound_frame_size
            if len(pending) <= window:
                chunk = bytes(pending)
                pending.clear()
                ended = self.end_pending
            else:
                chunk = bytes(pending[:window])
                del pending[:window]
            if not conn.send_data(sid, chunk, ended):
                self.closed = True  # the client reset it meanwhile
                sent += len(chunk) + len(pending)
                pending.clear()
                break
            sent += len(chunk)
            owner.unflushed += len(chunk)
            if owner.unflushed >= _FLUSH_EVERY:
                # hand the frames to the transport now, so that a full socket can pause
                # the connection before more is queued (counted per connection: a
                # WINDOW_UPDATE that reopens many streams drains them all in one turn)
                owner.flush()
        if self.end_pending and not pending and not self.closed:
            if not ended:
                conn.send_data(sid, b"", True)  # END_STREAM alone (nothing was pending)
            self.end_pending = False
            self.closed = True
            if self.exchange is None or self.exchange.finished:
                owner.forget_stream(self)
        if pending:  # waiting for a window (or the socket): since the last progress
            if sent or self.blocked_since is None:
                self.blocked_since = self.owner.core.reactor.seconds()
        else:
            self.blocked_since = None
        if sent:
            self.owner.unbuffer(sent)
        if self.producer is not None and self.producer_paused and \
                len(self.pending) < _HIGH_WATER // 2 and \
                self.owner.buffered < _CONNECTION_HIGH_WATER // 2:
            self.producer_paused = False
            self.producer.resumeProducing()

    def exchange_done(self, exchange: ExchangeBase) -> None:
        self.owner.stream_done(self)

    def flush(self) -> None:
        """Send what h2 has queued (after an upstream read, or when a stream ends)."""
        self.owner.flush()

    def misdirected(self, host: str, routed: bool) -> str:
        return self.owner.misdirected(host, routed)

    def client_cert_problem(self, policy: Any) -> str | None:
        return self.owner.client_cert_problem(policy)

    def abort(self) -> None:
        """The response cannot be finished (its upstream failed mid-body): reset the
        stream and forget it (an aborted exchange never calls ``exchange_done``: kept,
        it would count against MAX_CONCURRENT_STREAMS for the connection's life)."""
        if not self.closed:
            self.closed = True
            self.owner.reset(self.stream_id, ErrorCode.INTERNAL_ERROR)
        self.owner.forget_stream(self)

    def pause_reading(self, reason: str) -> None:
        self.pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        self.pauses.discard(reason)
        if not self.pauses and self.unacked:
            size, self.unacked = self.unacked, 0
            self.owner.acknowledge(self.stream_id, size)

    def send_continue(self) -> None:
        if not self.closed:
            self.owner.h2.send_headers(self.stream_id, [(b":status", b"100")])
            self.owner.flush()

    def start_response_flow(self, producer: Any) -> None:
        self.producer = producer

    def stop_response_flow(self) -> None:
        if self.producer is not None and self.producer_paused:
            self.producer.resumeProducing()
        self.producer = None
        self.producer_paused = False

    def start_connect(self, tunnel: Any, upstream: Any) -> None:
        if self.closed:
            upstream.loseConnection()
            return
        if not self.owner.h2.send_headers(self.stream_id, [
                (b":status", b"200"), (b"x-request-id", tunnel.exchange.request_id_bytes())]):
            self.closed = True
            upstream.loseConnection()
            return
        plan = tunnel.exchange.plan
        self.pipe = Pipe(self.owner.core.reactor, _StreamEnd(self), upstream,
                         plan.timeout if plan is not None else 0.0, on_close=tunnel.closed)
        tunnel.join(self.pipe)
        early, self.early = self.early, []
        for data in early:
            self.pipe.from_a(data)
        if self.early_end:
            self.pipe.eof_from(self.pipe.a)
        self.resume_reading("connect")
        self.owner.flush()

    def start_tunnel(self, exchange: ExchangeBase, upstream: Any, rest: bytes,
                     idle_timeout: float) -> None:
        upstream.abort()  # upgrades do not exist in HTTP/2 (no extended CONNECT here)
        self.abort()


class _StreamEnd:
    """A CONNECT stream as one end of a ``Pipe``, with the transport methods it calls:
    writes wait for the stream's window (pausing the upstream above a bound), a
    half-close is END_STREAM, a pause withholds WINDOW_UPDATEs from the client."""

    def __init__(self, stream: _Stream) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write_body(data)
        self.stream.owner.flush()

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.stream.start_response_flow(producer)

    def unregisterProducer(self) -> None:
        self.stream.stop_response_flow()

    def pauseProducing(self) -> None:
        self.stream.pause_reading("upstream")

    def resumeProducing(self) -> None:
        self.stream.resume_reading("upstream")

    def stopProducing(self) -> None:
        self.abortConnection()

    def loseWriteConnection(self) -> None:
        if not self.stream.closed and not self.stream.end_pending:
            self.stream.end_body()
            self.stream.owner.flush()

    def loseConnection(self) -> None:
        self.loseWriteConnection()  # END_STREAM once what is pending has its window
        self.stream.owner.stream_done(self.stream)

    def abortConnection(self) -> None:
        stream = self.stream
        if not stream.closed:
            stream.closed = True
            stream.owner.reset(stream.stream_id, ErrorCode.CONNECT_ERROR)
        stream.owner.forget_stream(stream)


@implementer(IPushProducer)
class H2Connection(ConnectionTLS, Protocol):
    """One HTTP/2 client connection (after ALPN ``h2`` or the h2c preface)."""

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        # Streams between the advertised limit and the hard cap reach the codec, which
        # refuses them with REFUSED_STREAM; past the cap the engine closes the connection.
        self.h2 = H2Engine(MAX_CONCURRENT_STREAMS, STREAMS_HARD_CAP, MAX_HEADER_LIST_SIZE,
                           MAX_FRAME_SIZE)
        self.streams: dict[int, _Stream] = {}
        self.client_ip = ""
        self.last_activity = 0.0
        self.write_blocked_since = 0.0
        self.close_started: float | None = None
        self.producing = False  # registered as the transport's producer (connectionMade)
        self.send_paused = False  # the client's socket buffer is full
        self.guard = H2Guard(core.reactor.seconds())
        self.buffered = 0  # response bytes waiting in all streams
        self.unflushed = 0  # DATA framed since the last flush
        self.dirty: list[_Stream] = []  # streams with small body bytes not yet framed
        # Requests not started yet because STALLED_STREAMS of the connection's responses
        # wait for a window: started as those drain or end (``_start_waiting``).
        self.waiting: list[_Stream] = []
        self.squeezed = False  # a stream's upstream was paused on them
        # The rest of a read holding more requests than a turn starts (reading paused
        # until it is handled, a turn at a time) and the call that handles the next turn.
        self.backlog: bytes | None = None
        self._turn: Any = None

    def connectionMade(self) -> None:
        transport: Any = self.transport
        if hasattr(transport, "setTcpNoDelay"):
            transport.setTcpNoDelay(True)
        if direct_writer(transport):
            self._write = partial(write_now, transport)  # type: ignore[method-assign]
        now = self.last_activity = self.core.reactor.seconds()
        # the client (after any PROXY header: this codec starts on the first bytes)
        self.client_ip = getattr(transport.getPeer(), "host", "")
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

    def _release(self, streams: list[_Stream], why: str, clean: bool) -> None:
        """Let go of the streams of a connection that is gone (or cut, ``why``): each
        exchange's upstream request aborted and the exchange logged, a turn's worth at
        a time (128 at once held the reactor for over 10 ms)."""
        for stream in streams:
            stream.closed = True  # nothing more is written for them
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

    def forget_stream(self, stream: _Stream) -> None:
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
        if self.squeezed and self.buffered < _CONNECTION_HIGH_WATER // 2:
            self.squeezed = False
            for stream in list(self.streams.values()):
                if stream.producer_paused and len(stream.pending) < _HIGH_WATER // 2:
                    stream.producer_paused = False
                    stream.producer.resumeProducing()

    def stream_done(self, stream: _Stream) -> None:
        if stream.closed or not (stream.pending or stream.end_pending):
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
        reset: Collection[int] = ()
        malformed: Collection[int] = ()
        if len(events) != 1 or events[0][0] != h2_engine.EV_REQUEST:  # (the common read)
            reset = {e[1] for e in events if e[0] == h2_engine.EV_RESET}
            malformed = {e[1] for e in events if e[0] == h2_engine.EV_MALFORMED}
        served = sum(1 for stream_id in reset
                     if (stream := self.streams.get(stream_id)) is not None
                     and not stream.closed)
        for _ in range(served + len(malformed)):
            cut = self.guard.premature_reset(now)
            if cut is not None:
                self.cut(cut)
                return
        reset_in_read = self.guard.reset_in_read
        for event in events:
            kind = event[0]
            if kind == h2_engine.EV_REQUEST:
                stream_id = event[1]
                if stream_id not in reset and stream_id not in reset_in_read \
                        and stream_id not in malformed:
                    self._request(stream_id, event[2], event[3])
            elif kind == h2_engine.EV_DATA:
                self._data(event[1], event[2], event[3])
            elif kind == h2_engine.EV_ENDED:
                stream = self.streams.get(event[1])
                if stream is not None and stream.pipe is not None:
                    stream.pipe.eof_from(stream.pipe.a)
                elif stream is not None and stream.exchange is not None \
                        and stream.exchange.connect:
                    stream.early_end = True
                elif stream is not None and stream.exchange is not None:
                    stream.exchange.request_complete()
            elif kind == h2_engine.EV_RESET:
                stream = self.streams.get(event[1])
                if stream is not None:
                    self._drop(stream, "client reset the stream", by_client=True)
            elif kind == h2_engine.EV_WINDOW:
                self._window(event[1])
            elif kind == h2_engine.EV_MALFORMED:
                stream = self.streams.get(event[1])
                if stream is not None:
                    stream.closed = True  # the engine has reset it
                    self._drop(stream, f"malformed HTTP/2 stream: {event[2]}")
            elif kind == h2_engine.EV_REFUSED:
                log.debug("HTTP/2 request from {client} refused: {why}",
                          client=self.client_ip, why=event[2])
            elif kind == h2_engine.EV_TERMINATED:
                self.close_connection()
        self.flush()

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
        if len(self.streams) >= MAX_CONCURRENT_STREAMS:  # the engine allows up to the cap
            self.reset(stream_id, ErrorCode.REFUSED_STREAM)
            cut = self.guard.refused(self.core.reactor.seconds())
            if cut is not None:
                self.cut(cut)
            return
        stream = _Stream(self, stream_id)
        self.streams[stream_id] = stream
        exchange = Exchange(stream, self.core)
        stream.exchange = exchange
        headers: list[tuple[bytes, bytes]] = []
        cookies: list[bytes] = []
        authority = host = b""
        has_length = False
        for name, value in fields:
            if name == b":method":
                exchange.method = value
            elif name == b":path":
                exchange.target = value
            elif name == b":authority":
                authority = value
            elif name.startswith(b":"):
                continue
            elif name == b"cookie":
                cookies.append(value)
            else:
                if name == b"host":
                    host = value
                elif name == b"content-length":
                    has_length = True
                elif name in CONTEXT_NAMES:  # HTTP/2 names are lower case
                    exchange.trace_context = True
                headers.append((name, value))
        if cookies:
            headers.append((b"cookie", b"; ".join(cookies)))  # RFC 9113 8.2.3
        exchange.headers = headers
        exchange.keep_alive = True
        exchange.host = (authority or host).decode("latin-1").lower()
        exchange.body_kind = 0 if ended else (BODY_LENGTH if has_length else BODY_CHUNKED)
        exchange.request_done = ended
        exchange.ready = True
        if not _METHOD.fullmatch(exchange.method):
            exchange.fail(400, "the method is not a token")
            return
        if not _AUTHORITY.fullmatch(authority or host):
            exchange.fail(400, "the authority holds a character a host name cannot")
            return
        if exchange.method == b"CONNECT":
            stream.early_end = ended
            self._connect(stream, exchange, authority)
            return
        if not exchange.host:
            exchange.fail(400, "the request has no authority")
            return
        # each name a token, no control character in a value: one regex call each over
        # all of them ("!" is a token character, a tab is allowed in values; the engine
        # has refused empty names)
        if headers and not _TOKEN.fullmatch(b"!".join([name for name, _ in headers])):
            exchange.fail(400, "a header name is not a valid token")
            return
        if _BAD_VALUE.search(b"\t".join([value for _, value in headers])):
            exchange.fail(400, "a header value holds a control character")
            return
        try:
            path, query = normalise_target(exchange.target)
        except BadTarget as exc:
            exchange.fail(400, str(exc))
            return
        exchange.path = path.decode("latin-1")
        exchange.query = query
        if self.buffered and self._stalled() >= STALLED_STREAMS:
            # the client reads none of what it asked for: no more upstream work for it
            # until it does (its frames are still read: WINDOW_UPDATEs and bodies)
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

    def _connect(self, stream: _Stream, exchange: Exchange, authority: bytes) -> None:
        """RFC 9113 8.5: ``:method CONNECT`` with ``:authority`` host:port and no
        ``:scheme``/``:path``; the stream's DATA frames are the tunnel's bytes."""
        if exchange.target:
            exchange.fail(400, "CONNECT takes no :path (RFC 9113 8.5)")
            return
        try:
            exchange.host = connect_authority(authority)
        except BadTarget as exc:
            exchange.fail(400, str(exc))
            return
        exchange.path = ""
        exchange.connect = True
        exchange.body_kind = 0
        exchange.request_done = True
        stream.pause_reading("connect")  # DATA waits (unacknowledged) for the tunnel
        exchange.begin()

    def _drop(self, stream: _Stream, why: str, by_client: bool = False) -> None:
        """The stream is over (the client reset it, or we give up on it): drop it and
        its waiting bytes, and release its upstream work."""
        exchange = stream.exchange
        self.forget_stream(stream)
        stream.closed = True
        if stream.pipe is not None:
            stream.pipe.lost(why, clean=False)
        elif exchange is not None and by_client:
            exchange.downstream_lost()
        elif exchange is not None:
            exchange.abandon(why)

    def _body_timed_out(self, stream: _Stream, exchange: Exchange) -> None:
        """408 (or the response cut off if it began: the stream is reset and forgotten
        then), the upstream request dropped. A 408 that waits for a window the client
        does not open is given up at once: the stream is reset and forgotten too."""
        exchange.request_timed_out()
        if stream.pending or stream.end_pending:
            stream.closed = True
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
                stream.closed = True
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
