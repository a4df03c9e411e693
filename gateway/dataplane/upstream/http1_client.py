"""HTTP/1.1 toward an upstream: one protocol per connection, parsed with llhttp
(``httptools``). Its owner, the pool (``pool``), keeps it between exchanges.

An ``UpstreamConnection`` serves one exchange at a time and reports to it through the
``UpstreamListener`` methods; the exchange owns framing and flow control decisions. The
hot path (a pooled idle connection) involves no Deferreds.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from typing import Protocol as TypingProtocol

import httptools
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure

from gateway.tls.client import TLSClientConfig
from gateway.twisted_ext.fastio import direct_writer, write_now

PoolKey = tuple[str, str, int, TLSClientConfig | None]

# A response head the gateway accepts from an upstream (what it buffers before the first
# byte reaches the client); past it the response is a 502.
MAX_RESPONSE_HEAD = 64 * 1024
MAX_RESPONSE_FIELDS = 200


class NoCallbacks:
    """What a closed connection's llhttp parser reports to: nothing."""


# The parser holds the connection's bound callbacks and the connection the parser: a
# closed connection swaps its parser for this one, so that reference counting frees it.
_SPENT_PARSER = httptools.HttpResponseParser(NoCallbacks())


class Owner(TypingProtocol):
    """Who keeps the connection (the pool): told when it is lost."""

    def forget(self, conn: UpstreamConnection) -> None: ...


class UpstreamListener(TypingProtocol):
    """What an upstream connection tells the exchange it is serving."""

    def upstream_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                      keep_alive: bool) -> None: ...
    def upstream_body(self, data: bytes) -> None: ...
    def upstream_complete(self) -> None: ...
    def upstream_upgraded(self, rest: bytes) -> None: ...
    def flush_head(self) -> None: ...
    def upstream_failed(self, reason: str, before_response: bool) -> None: ...


class UpstreamConnection(Protocol):
    """One persistent connection; ``send`` starts an exchange on it."""

    def __init__(self, pool: Owner, key: PoolKey) -> None:
        self.pool = pool
        self.key = key
        self.listener: UpstreamListener | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.reason = b""
        self.connected = False
        self.reusable = True
        self.used = 0
        self.idle_since = 0.0
        self._head_request = False
        self._got_head = False
        self._informational = False
        self._upgrading = False
        self._reset_parser = False
        self._framed = False
        self.raw: Any = None  # a net.pipe.Pipe once the connection was upgraded
        self.paused = False  # reading paused by a response's flow control
        self.chunked = False  # the request body being sent is chunked
        # Read off the head as its fields arrive (one pass): its Connection values, and
        # whether Content-Length or chunked coding frames the body.
        self.connection_values: list[bytes] = []
        self._length_framed = False

    # -- lifecycle

    def connectionMade(self) -> None:
        self.connected = True
        transport: Any = self.transport
        if hasattr(transport, "setTcpNoDelay"):
            transport.setTcpNoDelay(True)
        if direct_writer(transport):
            self.write = partial(write_now, transport)  # type: ignore[method-assign]

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.connected = False
        self.reusable = False
        self.parser = _SPENT_PARSER
        if self.raw is not None:
            self.raw.lost()
            return
        listener, self.listener = self.listener, None
        self.pool.forget(self)
        if listener is None:
            return
        if self._got_head and not self._framed:
            listener.upstream_complete()  # body delimited by the connection closing
        else:
            listener.upstream_failed("upstream connection closed", not self._got_head)

    def send(self, listener: UpstreamListener, head: bytes, head_request: bool,
             chunked: bool = False) -> None:
        """Send a request ``head`` (ending in its blank line) for ``listener``; a body
        of unknown length (``chunked``) follows through ``write_body`` / ``end_body``
        in chunked framing, which this adds to the head."""
        self.listener = listener
        self.used += 1
        self.headers = []
        self.head_bytes = 0
        self.reason = b""
        self.connection_values = []
        self._length_framed = False
        self._got_head = False
        self._head_request = head_request
        self.chunked = chunked
        if chunked:
            head = head[:-2] + b"transfer-encoding: chunked\r\n\r\n"
        self.write(head)

    def write(self, data: bytes) -> None:
        """Replaced per connection in ``connectionMade`` by the fastest safe writer."""
        self.transport.write(data)  # type: ignore[union-attr]

    def write_body(self, data: bytes) -> None:
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.write(data)

    def end_body(self) -> None:
        """The request body is complete (a length-framed one needs no word)."""
        if self.chunked:
            self.chunked = False
            self.write(b"0\r\n\r\n")

    # -- the producer a response's flow control pauses (``Sink.start_response_flow``);
    # the flag lets ``Pool.release`` skip resuming a connection nobody paused

    def pauseProducing(self) -> None:
        self.paused = True
        self.transport.pauseProducing()  # type: ignore[union-attr]

    def resumeProducing(self) -> None:
        self.paused = False
        self.transport.resumeProducing()  # type: ignore[union-attr]

    def stopProducing(self) -> None:
        self.transport.stopProducing()  # type: ignore[union-attr]

    def abort(self) -> None:
        """Drop the connection (the exchange gave up on it)."""
        self.reusable = False
        self.listener = None
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    # -- bytes in

    def dataReceived(self, data: bytes) -> None:
        if self.raw is not None:
            self.raw.from_b(data)
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            listener, self.listener = self.listener, None
            self.reusable = False
            if listener is not None:
                listener.upstream_upgraded(data[upgrade.args[0]:])
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__ if isinstance(exc.__context__, ValueError) else exc
            self._fail(f"invalid response from upstream: {cause}")
            return
        if self._reset_parser:
            self._reset_parser = False
            self.parser = httptools.HttpResponseParser(self)
        listener = self.listener
        if listener is not None:
            listener.flush_head()

    def _fail(self, reason: str) -> None:
        listener, self.listener = self.listener, None
        self.reusable = False
        if listener is not None:
            listener.upstream_failed(reason, not self._got_head)
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    # -- httptools callbacks

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > MAX_RESPONSE_HEAD or len(self.headers) > MAX_RESPONSE_FIELDS:
            # Raised through httptools as HttpParserCallbackError: a 502, connection dropped.
            raise ValueError(f"response headers over {MAX_RESPONSE_HEAD // 1024} KiB or "
                             f"{MAX_RESPONSE_FIELDS} fields")
        size = len(name)
        if size == 10 or size == 14 or size == 17:  # the only names that matter here
            low = name.lower()
            if low == b"connection":
                self.connection_values.append(value)
            elif low == b"content-length" or (low == b"transfer-encoding"
                                              and b"chunked" in value.lower()):
                self._length_framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 100 Continue and friends: not relayed
            self.headers = []
            self.head_bytes = 0
            self.reason = b""
            self.connection_values = []
            self._length_framed = False
            return
        self._got_head = True
        self._upgrading = status == 101
        self._framed = self._length_framed or self._head_request or status in (204, 304)
        keep_alive = self.parser.should_keep_alive()
        if not keep_alive or not self._framed:
            self.reusable = False
        listener = self.listener
        if listener is None:
            return
        listener.upstream_head(status, self.reason, self.headers, keep_alive)
        if self._head_request and status != 101:
            self._reset_parser = True  # llhttp cannot be told that a HEAD response has no body
            self._complete()

    def on_body(self, body: bytes) -> None:
        if self.listener is not None:
            self.listener.upstream_body(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._head_request or self._upgrading:
            return  # HEAD completed at the headers; a 101 continues as a pipe
        self._complete()

    def _complete(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.upstream_complete()
