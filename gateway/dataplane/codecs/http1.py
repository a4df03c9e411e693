"""The downstream HTTP/1.1 codec: llhttp parsing, strict validation, pipelining in
order, response writing, upgrades into byte pipes, and the connection's timeouts.

Strictness, before anything is forwarded: HTTP/1.0 is refused (426); llhttp refuses
ambiguous framing (Content-Length with Transfer-Encoding, duplicate Content-Length,
bad chunking) and this codec adds size limits (414, 431) and Host checks. Any framing
error closes the connection after a 400.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Any

import httptools
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer, ITransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.codecs.http1_head import Refused, read_head
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.base import ExchangeBase
from gateway.dataplane.exchange.exchange import Exchange
from gateway.dataplane.exchange.head import (
    BODY_CHUNKED,
    BODY_LENGTH,
    ConnectionFacts,
    request_head,
)
from gateway.dataplane.exchange.recheck import UpgradeWatch
from gateway.dataplane.exchange.tunnel import Tunnel
from gateway.dataplane.pipes.splice import SplicePipe, can_splice
from gateway.dataplane.upstream.http1_client import NoCallbacks, UpstreamConnection
from gateway.net.pipe import CLOSE_GRACE, Pipe
from gateway.pages.answer import error_answer
from gateway.pages.layout import look_of
from gateway.twisted_ext.fastio import direct_writer, maybe_pause_producer, write_now
from gateway.wire.responses import status_line

MAX_TARGET = 8 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
_GATEWAY_WAITS = frozenset({"pipeline", "authorize"})  # pauses not counted in timeout_read
log = Logger()


# llhttp's parser holds the connection's bound callbacks, and the connection holds the
# parser: a cycle that kept every closed connection, with its TLS state (~20 KiB), until
# the next full garbage collection. A closed connection swaps its parser for this one.
_SPENT_PARSER = httptools.HttpRequestParser(NoCallbacks())


class _Closing(Exception):
    """Raised from a parser callback to stop reading requests: the connection is closing
    (a response said ``connection: close``), so what follows in the same read (a
    pipelined request) is neither forwarded nor answered."""


@implementer(IPushProducer)
class _ResponseFlow:
    """Registered on the client transport while a response streams: a full client
    buffer pauses reading from the upstream (and starts the write timeout).

    ``detach`` ends its part when the response ends: it undoes its own pause (the
    upstream connection goes back to the pool and must read the next response) and
    ignores whatever the client transport says afterwards, since by then the upstream
    connection may be serving another client."""

    def __init__(self, conn: Http1Connection, upstream: Any) -> None:
        self.conn = conn
        self.upstream: Any = upstream  # what it pauses: the UpstreamConnection
        self.paused = False

    def pauseProducing(self) -> None:
        if self.upstream is None:
            return
        self.conn.write_blocked_since = self.conn.core.reactor.seconds()
        if not self.paused:
            self.paused = True
            self.upstream.pauseProducing()

    def resumeProducing(self) -> None:
        if self.upstream is None:
            return
        self.conn.write_blocked_since = 0.0
        head = self.conn.queue[0] if self.conn.queue else None
        if head is not None:
            head.client_reads()
        if self.paused:
            self.paused = False
            self.upstream.resumeProducing()

    def stopProducing(self) -> None:
        if self.upstream is not None:
            self.upstream.stopProducing()

    def detach(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None and self.paused:
            self.paused = False
            upstream.resumeProducing()


@implementer(IHalfCloseableProtocol)
class Http1Connection(Protocol):
    """One client connection."""

    transport: Any

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Exchange] = deque()
        self.current: Exchange | None = None
        self.client_ip = ""
        self.facts: ConnectionFacts | None = None  # made at the first request
        # the request head being read (llhttp hands it over in pieces)
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.header_bytes = 0
        self.pauses: set[str] = set()
        self.closing = False
        self.last_activity = 0.0
        self.request_started = 0.0
        self.write_blocked_since = 0.0
        self.pipe: Pipe | SplicePipe | None = None
        self.close_started: float | None = None
        self._early = b""  # bytes after an upgrade/CONNECT head, for the pipe
        self._flow: _ResponseFlow | None = None
        self._flow_from: Any = None  # the upstream connection of a flow not registered yet
        self.chunked = False  # the response being written has a chunked body
        self.draining = False  # the gateway is stopping (``drain``)

    # -- connection

    def connectionMade(self) -> None:
        transport: Any = self.transport
        if hasattr(transport, "setTcpNoDelay"):
            transport.setTcpNoDelay(True)
        self.last_activity = self.core.reactor.seconds()
        self.core.connections.add(self)
        if direct_writer(transport):
            self.write = partial(write_now, transport)  # type: ignore[method-assign]
        else:
            self.write = transport.write  # type: ignore[method-assign]

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.core.connections.discard(self)
        self.closing = True
        self.parser = _SPENT_PARSER  # freed by reference counting, not the collector
        for exchange in list(self.queue):
            exchange.downstream_lost()
        if self.current is not None and self.current not in self.queue:
            self.current.downstream_lost()
        self.queue.clear()
        if self.pipe is not None:
            self.pipe.lost("client closed", clean=reason.check(ConnectionDone) is not None)

    def readConnectionLost(self) -> None:
        """The client closed its side: in a pipe that is a half-close passed on; for
        HTTP it ends the connection and aborts what is in flight (as nginx does), so a
        client that leaves never keeps an upstream busy."""
        if self.pipe is not None:
            self.pipe.eof_from(self.transport)
            return
        self.closing = True
        self.transport.abortConnection()

    def writeConnectionLost(self) -> None:
        if self.pipe is None:  # a pipe closes once both directions have ended
            self.close_connection()

    def dataReceived(self, data: bytes) -> None:
        self.last_activity = self.core.reactor.seconds()
        if self.pipe is not None:
            self.pipe.from_a(data)
            return
        if self.close_started is not None:
            return  # closing: only the peer's close matters now
        if "upgrade" in self.pauses:
            # After an upgrade or CONNECT head the bytes belong to the pipe to come (TLS
            # delivers records it already decrypted even while reading is paused).
            self._early += data
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade_requested(data[upgrade.args[0]:])
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _Closing):
                return
            if isinstance(cause, Refused):
                self._refuse(cause.status, cause.detail, cause.headers)
            else:
                log.failure("request handling failed", Failure(cause or exc))
                self._refuse(500, "")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request ({_parser_reason(exc)})")

    def _refuse(self, status: int, detail: str,
                headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """Answer a request we could not parse or accept, then close the connection.

        Whatever was dispatched for it upstream is aborted first. Nothing is written
        when a response already said ``connection: close`` (a malformed body still
        arriving after it must not add a second answer)."""
        answered = self.closing
        current = self.current
        if current is not None and not current.finished:
            # Whatever was dispatched for it upstream is aborted, and the access log
            # says what the client was answered (not 499, which means "client left").
            current.downstream_lost(status, detail)
        for earlier in list(self.queue):
            # Pipelined requests before it still waiting for their answer are aborted
            # too: written after the refusal, their responses would answer the wrong
            # requests.
            if not earlier.response_started and not earlier.finished:
                earlier.downstream_lost(status,
                                        "aborted: a later pipelined request was refused")
        self.closing = True
        self.pauses.add("closing")
        if not answered and not any(e.response_started and not e.finished for e in self.queue):
            body, page = error_answer(status, detail, self.headers if current else [],
                                      look_of(self.core.plan.snapshot.options))
            own = {name for name, _ in page}
            self.write_head(status, b"", [
                *(p for p in self.core.plan.response_headers if p[0].lower() not in own),
                *headers, *page, (b"content-length", b"%d" % len(body))], BODY_LENGTH, True, body)
        self.close_connection()

    def close_connection(self) -> None:
        """Close in order, and make sure the close ends. Reading may be paused (a body
        the upstream does not take, pipelined requests); then the peer's EOF, or over
        TLS its close_notify that Twisted waits for, would never be read and the
        descriptor would stay forever. So reading resumes (what arrives is ignored),
        and ``check_deadlines`` aborts a close still going after ``CLOSE_GRACE``."""
        self.closing = True
        if self.close_started is None:
            self.close_started = self.core.reactor.seconds()
        transport = self.transport
        if transport is None or getattr(transport, "disconnecting", False):
            return  # already closing (resuming now would do nothing on a real socket)
        if self.pauses and self.pipe is None:
            self.pauses.clear()
            transport.resumeProducing()
        transport.loseConnection()

    def write(self, data: bytes) -> None:
        """Replaced per connection in ``connectionMade`` by the fastest safe writer."""
        self.transport.write(data)

    # -- llhttp callbacks

    def on_message_begin(self) -> None:
        if self.closing:
            raise _Closing()
        facts = self.facts
        if facts is None:
            # Here, not in connectionMade: behind a PROXY-protocol wrapper the peer is
            # only known once its header has been read.
            self.client_ip = getattr(self.transport.getPeer(), "host", "")
            facts = self.facts = ConnectionFacts(self.client_ip, self.transport)
        exchange = Exchange(self, self.core, facts)
        self.current = exchange
        self.target = b""
        self.headers = []
        self.header_bytes = 0
        self.request_started = self.core.reactor.seconds()
        if self.queue:
            self.pause_reading("pipeline")
        self.queue.append(exchange)

    def on_url(self, url: bytes) -> None:
        self.target += url
        if len(self.target) > MAX_TARGET:
            raise Refused(414, f"the request target is longer than {MAX_TARGET} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4
        headers = self.headers
        headers.append((name, value))
        if self.header_bytes > MAX_HEADER_BYTES or len(headers) > MAX_HEADERS:
            raise Refused(431, f"request headers exceed {MAX_HEADER_BYTES // 1024} KiB or "
                               f"{MAX_HEADERS} fields")

    def on_headers_complete(self) -> None:
        exchange = self.current
        assert exchange is not None
        parser = self.parser
        version = parser.get_http_version()
        if version != "1.1":
            raise Refused(426, f"HTTP/{version} is not supported; use HTTP/1.1 or HTTP/2",
                          ((b"upgrade", b"HTTP/1.1"),))
        method = parser.get_method()
        try:
            head = read_head(method, self.target, self.headers, self.core.reject_parameters,
                             parser.should_keep_alive() and not self.draining,
                             parser.should_upgrade())
        except Refused:
            # logged with what was read of it
            exchange.head_read(request_head(method, self.target, b"1.1", self.headers))
            raise
        if self.queue and self.queue[0] is exchange:
            exchange.begin(head)
        else:
            exchange.head_complete(head)  # pipelined: begun when those before it are done

    def on_body(self, body: bytes) -> None:
        exchange = self.current
        if exchange is not None:
            exchange.request_body(body)

    def on_message_complete(self) -> None:
        exchange = self.current
        if exchange is not None:
            exchange.request_complete()
        if exchange is not None and (exchange.head.upgrade or exchange.head.connect):
            return  # llhttp stops at an upgrade; the rest of the bytes belong to the pipe
        self.current = None

    # -- Sink for exchanges

    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   framing: int, close: bool, first_body: bytes = b"") -> None:
        parts = [status_line(status, reason)]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if framing == BODY_CHUNKED:  # a body of unknown length
            self.chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
            if first_body:
                first_body = b"%x\r\n%s\r\n" % (len(first_body), first_body)
        if close:
            self.closing = True
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", first_body)
        self.write(b"".join(parts))

    def write_body(self, data: bytes) -> None:
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.write(data)

    def end_body(self) -> None:
        if self.chunked:
            self.chunked = False
            self.write(b"0\r\n\r\n")

    def flush(self) -> None:
        """The end of an upstream read (writes themselves leave at once, see ``write``):
        a response still streaming now gets its flow control. Most responses end within
        the read that began them, and for those registering a producer on the client's
        transport (on TLS: a membrane object, two calls each way) was wasted."""
        upstream = self._flow_from
        if upstream is None:
            return
        self._flow_from = None
        flow = self._flow = _ResponseFlow(self, upstream)
        transport: Any = self.transport
        transport.registerProducer(flow, True)
        # Twisted pauses a producer only on a write past the buffer limit: if the writes
        # of this read already passed it, pause now, as an early registration would have.
        wire = getattr(transport, "transport", transport)  # under TLS, the TCP connection
        maybe_pause_producer(wire)

    def send_continue(self) -> None:
        self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def start_response_flow(self, producer: Any) -> None:
        self._flow_from = producer  # registered by ``flush`` if still streaming then

    def stop_response_flow(self) -> None:
        self._flow_from = None
        flow, self._flow = self._flow, None
        if flow is not None:
            flow.detach()
            self.write_blocked_since = 0.0
            self.transport.unregisterProducer()

    def pause_reading(self, reason: str) -> None:
        if not self.pauses and self.transport is not None:
            self.transport.pauseProducing()
        self.pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self.pauses:
            return
        self.pauses.discard(reason)
        if not self.pauses and self.transport is not None:
            self.transport.resumeProducing()

    def abort(self) -> None:
        self.closing = True
        self.transport.abortConnection()

    def exchange_done(self, exchange: ExchangeBase) -> None:
        if self.queue and self.queue[0] is exchange:
            self.queue.popleft()
        else:
            for index, queued in enumerate(self.queue):
                if queued is exchange:
                    del self.queue[index]
                    break
        self.last_activity = self.core.reactor.seconds()
        if self.closing:
            self.close_connection()
            return
        if self.queue:
            head = self.queue[0]
            if head.ready:
                head.begin()
            if head is self.current:
                # The request being served is still arriving (its head or its body):
                # the pause that held it back while earlier ones were answered ends.
                self.resume_reading("pipeline")
        else:
            self.resume_reading("pipeline")

    # -- upgrades

    def _upgrade_requested(self, rest: bytes) -> None:
        """llhttp stopped at an upgrade request; bytes after it wait for the 101."""
        exchange = self.current
        if exchange is None or exchange.finished:
            self.close_connection()
            return
        self.pause_reading("upgrade")
        self._early = rest

    def start_tunnel(self, exchange: ExchangeBase, upstream: UpstreamConnection, rest: bytes,
                     idle_timeout: float) -> None:
        if upstream.transport is None or self.transport is None:
            return
        self.queue.clear()
        self.current = None
        watch = UpgradeWatch(exchange, exchange.upgrade)  # type: ignore[arg-type]
        self.pipe = Pipe(self.core.reactor, self.transport, upstream.transport, idle_timeout,
                         on_close=watch.closed)
        watch.start(self.pipe)
        upstream.raw = self.pipe
        if rest:
            self.pipe.from_b(rest)
        early, self._early = self._early, b""
        if early:
            self.pipe.from_a(early)
        self.pauses.clear()
        self.transport.resumeProducing()

    def start_connect(self, tunnel: Tunnel, upstream: ITransport) -> None:
        """200, then the pipe. The 200 and the bytes either side sent early are written
        first; if both sockets then have nothing buffered, the kernel relays the rest
        (``SplicePipe``), otherwise an ordinary ``Pipe`` does."""
        if self.transport is None:
            upstream.loseConnection()
            return
        self.queue.clear()
        self.current = None
        self.pauses.clear()
        self.write(b"HTTP/1.1 200 Connection established\r\nx-request-id: %s\r\n\r\n"
                   % tunnel.exchange.request_id_bytes())
        early, self._early = self._early, b""
        tunnel.send_early(early)
        plan = tunnel.exchange.plan
        timeout = plan.timeout if plan is not None else 0.0
        transport: Any = self.transport
        if not tunnel.upstream.gone and can_splice(transport) and can_splice(upstream):
            try:
                self.pipe = SplicePipe(self.core.reactor, transport, upstream, timeout,
                                       on_close=tunnel.closed)
            except OSError as exc:  # no descriptors for the kernel pipes: copy instead
                log.warn("tunnel: kernel relay unavailable ({error}); copying instead",
                         error=str(exc))
            else:
                tunnel.join(self.pipe)
                return
        self.pipe = Pipe(self.core.reactor, transport, upstream, timeout,
                         on_close=tunnel.closed)
        tunnel.join(self.pipe)
        transport.resumeProducing()

    # -- timeouts (called by the core's watchdog)

    def check_deadlines(self, now: float) -> None:
        core = self.core
        if self.close_started is not None and now - self.close_started > CLOSE_GRACE:
            self.transport.abortConnection()
            return
        if self.pipe is not None:
            return  # the pipe enforces the route timeout itself
        if self.write_blocked_since and core.timeout_write and \
                now - self.write_blocked_since > core.timeout_write:
            if self.queue:
                self.queue[0].abandon("timeout_write: the client stopped reading")
            self.abort()
            return
        head = self.queue[0] if self.queue else None
        if head is not None and head.deadline and now > head.deadline and not head.finished \
                and not self.write_blocked_since:
            head.timed_out()
            return
        if (current := self.current) is not None and not current.request_done:
            # A head within timeout_read of its first byte, a body with gaps below it; time
            # spent waiting on the gateway (pipelining, authorization) is not the client's.
            if self.pauses & _GATEWAY_WAITS:
                self.request_started = self.last_activity = now
            since = self.request_started if not current.ready else self.last_activity
            if core.timeout_read and now - since > core.timeout_read:
                if current.response_started:
                    self.abort()
                else:
                    self._refuse(408, "the request was not received in time")
            return
        if not self.queue and core.timeout_idle and \
                now - self.last_activity > core.timeout_idle:
            self.close_connection()  # (sets ``closing``)

    # -- the gateway's stop (``services.drain``)

    def drain(self) -> None:
        """The gateway is stopping: an idle connection closes now; one with a request in
        flight finishes it and then closes, the response saying ``connection: close``
        when it has not begun yet (a later pipelined request is not read). A tunnel or
        an upgraded connection stays until the drain's deadline. Called again at every
        poll of the drain, so it must change nothing the second time."""
        if self.pipe is not None or self.close_started is not None:
            return
        if not self.queue and self.current is None:
            self.close_connection()
            return
        self.draining = True  # a head still arriving is answered with connection: close
        for exchange in self.queue:
            exchange.last_on_connection()
        if all(exchange.response_started for exchange in self.queue):
            self.closing = True  # ``exchange_done`` closes; no request is read after it


def _parser_reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:120]
