"""One HTTP/2 stream as the exchange sees it (``StreamSink``, the ``Sink`` of its
exchange), and a CONNECT stream as one end of a tunnel's ``Pipe`` (``TunnelEnd``).

Response bytes wait in ``pending`` for the stream's window: a small response is framed
when the connection flushes, so its HEADERS and DATA (with END_STREAM) leave in one
write; past a high-water mark (the stream's, or all streams' together) the upstream's
reading is paused. Whether the stream may still be written is the engine's to say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.dataplane.exchange.base import ExchangeBase
from gateway.dataplane.exchange.exchange import Exchange
from gateway.dataplane.exchange.tunnel import Tunnel
from gateway.dataplane.http2.fields import NOT_FORWARDED
from gateway.dataplane.http2.protocol import MAX_FRAME_SIZE, ErrorCode
from gateway.net.pipe import Pipe

if TYPE_CHECKING:
    from twisted.internet.interfaces import ITransport

    from gateway.dataplane.http2.connection import H2Connection
    from gateway.dataplane.http2.state import Stream

HIGH_WATER = 256 * 1024
CONNECTION_HIGH_WATER = 2 * 1024 * 1024  # all streams' waiting response bytes together
FLUSH_EVERY = 64 * 1024


class StreamSink:
    """The ``Sink`` of one HTTP/2 stream."""

    def __init__(self, owner: H2Connection, stream_id: int, state: Stream) -> None:
        self.owner = owner
        self.stream_id = stream_id
        self.state = state  # the engine's: read, never written here
        self.exchange: Exchange | None = None
        self.pending = bytearray()
        self.end_pending = False
        self.producer: Any = None
        self.producer_paused = False
        self.unacked = 0
        self.pauses: set[str] = set()
        self.pipe: Pipe | None = None  # a CONNECT tunnel once it is established
        self.early: list[bytes] = []  # tunnel DATA that came before the 200
        self.early_end = False  # ... and END_STREAM
        self.blocked_since: float | None = None  # response bytes wait for a window since
        self.last_read = owner.core.reactor.seconds()  # request HEADERS or DATA, last

    @property
    def closed(self) -> bool:
        """Nothing more may be written on the stream: the engine's to say."""
        return self.state.local_ended

    # Sink
    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   framing: int, close: bool, first_body: bytes = b"") -> None:
        # (the engine refuses a head for a stream that is closed: no check of our own;
        # a body of any framing is delimited by END_STREAM)
        if self.owner.h2.send_response_head(self.stream_id, status, headers, NOT_FORWARDED,
                                            end_stream=not framing and not first_body) \
                and first_body:
            self.write_body(first_body)

    def write_body(self, data: bytes) -> None:
        if self.state.local_ended:  # (``closed``, without a property call per write)
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
                len(self.pending) > HIGH_WATER or owner.buffered > CONNECTION_HIGH_WATER):
            self.producer_paused = owner.squeezed = True
            self.producer.pauseProducing()

    def end_body(self) -> None:
        if not self.state.local_ended:
            self.end_pending = True
            self._drain()

    def _drain(self) -> None:
        owner = self.owner
        conn = owner.h2
        sid = self.stream_id
        state = self.state
        if state.local_ended:
            return
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
            if not conn.send_data(sid, chunk, ended):  # the client reset it meanwhile
                sent += len(chunk) + len(pending)
                pending.clear()
                break
            sent += len(chunk)
            owner.unflushed += len(chunk)
            if owner.unflushed >= FLUSH_EVERY:
                # hand the frames to the transport now, so that a full socket can pause
                # the connection before more is queued (counted per connection: a
                # WINDOW_UPDATE that reopens many streams drains them all in one turn)
                owner.flush()
        if self.end_pending and not pending and (ended or not state.local_ended):
            if not ended:
                conn.send_data(sid, b"", True)  # END_STREAM alone (nothing was pending)
            self.end_pending = False
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
                len(self.pending) < HIGH_WATER // 2 and \
                self.owner.buffered < CONNECTION_HIGH_WATER // 2:
            self.producer_paused = False
            self.producer.resumeProducing()

    def exchange_done(self, exchange: ExchangeBase) -> None:
        self.owner.stream_done(self)

    def flush(self) -> None:
        """Send what h2 has queued (after an upstream read, or when a stream ends)."""
        self.owner.flush()

    def abort(self) -> None:
        """The response cannot be finished (its upstream failed mid-body): reset the
        stream and forget it (an aborted exchange never calls ``exchange_done``: kept,
        it would count against MAX_CONCURRENT_STREAMS for the connection's life)."""
        if not self.closed:
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

    def start_connect(self, tunnel: Tunnel, upstream: ITransport) -> None:
        if self.closed:
            upstream.loseConnection()
            return
        if not self.owner.h2.send_headers(self.stream_id, [
                (b":status", b"200"), (b"x-request-id", tunnel.exchange.request_id_bytes())]):
            upstream.loseConnection()
            return
        plan = tunnel.exchange.plan
        self.pipe = Pipe(self.owner.core.reactor, TunnelEnd(self), upstream,
                         plan.timeout if plan is not None else 0.0, on_close=tunnel.closed)
        tunnel.join(self.pipe)
        early, self.early = self.early, []
        for data in early:
            self.pipe.from_a(data)
        if self.early_end:
            self.pipe.eof_from(self.pipe.a)
        self.resume_reading("connect")
        self.owner.flush()


class TunnelEnd:
    """A CONNECT stream as one end of a ``Pipe``, with the transport methods it calls:
    writes wait for the stream's window (pausing the upstream above a bound), a
    half-close is END_STREAM, a pause withholds WINDOW_UPDATEs from the client."""

    def __init__(self, stream: StreamSink) -> None:
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
            stream.owner.reset(stream.stream_id, ErrorCode.CONNECT_ERROR)
        stream.owner.forget_stream(stream)
