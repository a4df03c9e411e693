"""An MCP route's response, filtered on its way to the client: list results hold only
the entries the caller's policy allows (``gateway.mcp.listing``), whether the server
answers with one JSON body or an SSE stream.

The filter stands between the upstream connection and the exchange (it is the
connection's ``UpstreamListener`` in the exchange's place, ``relay.attach``) on every
response of an MCP route that is not public, whatever its request asked: a list result
is filtered wherever it comes (found by its id, or by its shape under any id), since a
server may send it on another request's stream (the official Python SDK keys its
streams by the id's text: a ``tools/call`` sent with the id of a ``tools/list`` in
progress got the whole list, unfiltered, in a security review) or replay it on a GET
resuming with ``Last-Event-ID``. A JSON answer is read whole to be filtered, so it is
bounded by ``mcp.max_response_bytes`` whatever it answers.

- ``application/json``: the body is read whole, up to the route's
  ``mcp.max_response_bytes``, filtered, and sent with its new ``content-length`` (HTTP/1.1
  and HTTP/2 alike). Larger: not passed on.
- ``text/event-stream``: filtered event by event as it streams (only one event is ever
  held), ``content-length`` dropped (HTTP/1.1 chunks the body, HTTP/2 ends the stream);
  an event left alone goes on byte for byte. An event larger than the limit ends the
  stream with an error event.
- anything else in a 2xx answer to a list call (and a 206): not what an MCP client may
  be sent, and nothing the gateway could filter: replaced by JSON-RPC errors. (A GET
  answered otherwise than with a stream is relayed as it is: only a stream replays.)
- ``content-encoding`` gzip or deflate is decoded to filter (the answer goes out
  without it); another one is refused as unreadable.

Whatever cannot be filtered is not passed on: the client gets JSON-RPC errors
(``listing.LIST_UNREADABLE``) for its calls, never the server's unfiltered list.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from twisted.logger import Logger

from gateway.authorize.mcp_entries import Allowed, entry_predicate
from gateway.dataplane.exchange.head import BODY_CHUNKED, BODY_LENGTH, BODY_NONE
from gateway.dataplane.exchange.mcp_request import bound_session
from gateway.mcp.listing import (
    Counts,
    IdKey,
    encode,
    error_for,
    filter_data,
    filter_json,
    list_calls,
    refusal,
)
from gateway.mcp.messages import McpRequest
from gateway.mcp.sse import EventTooLarge, SseReader
from gateway.observability.mcp_metrics import MCP_METRICS

if TYPE_CHECKING:
    from gateway.dataplane.exchange.relay import UpstreamRelay
    from gateway.dataplane.upstream.http1_client import UpstreamListener

log = Logger(namespace="gateway.mcp")

PASS, JSON, SSE, REFUSE = range(4)
# headers that describe the bytes the server sent, not the filtered ones
_REWRITTEN = frozenset({b"content-length", b"etag", b"content-md5", b"digest",
                        b"content-digest", b"repr-digest"})
_DECODED = {b"gzip": 16 + zlib.MAX_WBITS, b"x-gzip": 16 + zlib.MAX_WBITS,
            b"deflate": 32 + zlib.MAX_WBITS}
_PIECE = 65536  # decompressed bytes made at a time (a small input may inflate a lot)
_JSON = b"application/json"


def listener_for(exchange: UpstreamRelay) -> UpstreamListener:
    """The listener of ``exchange``'s response on an MCP route: a filter when the
    response may hold a list result for a caller the policy decides, else the exchange."""
    plan = exchange.plan
    decided = exchange.mcp
    if plan is None or plan.public or plan.route.mcp is None:
        return exchange
    request = decided.request if decided is not None else McpRequest(())
    return McpResponse(exchange, request, list_calls(request),
                       plan.route.mcp.max_response_bytes)


class McpResponse:
    """The filter of one response (see the module's text)."""

    __slots__ = ("allowed", "body", "counts", "decoder", "exchange", "limit", "mode",
                 "pending", "reader", "request")

    def __init__(self, exchange: UpstreamRelay, request: McpRequest,
                 pending: dict[IdKey, str], limit: int) -> None:
        self.exchange = exchange
        self.request = request
        self.pending = pending
        self.limit = limit
        self.mode = PASS
        self.allowed: Allowed | None = None
        self.body = bytearray()
        self.reader: SseReader | None = None
        self.decoder: zlib._Decompress | None = None
        self.counts = Counts.empty()

    # -- UpstreamListener

    def upstream_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                      keep_alive: bool) -> None:
        exchange = self.exchange
        headers = bound_session(exchange, headers)  # (mcp_request: the session id's binding)
        exchange.upstream_head(status, reason, headers, keep_alive)
        held = exchange.head_pending
        if held is None or exchange.finished or held[3] == BODY_NONE:
            return  # an upgrade, a HEAD, a 204/304: no body to filter
        status, reason, out, _, close = held
        media, encoding = _content(out)
        json_media = media == _JSON or media.endswith(b"+json")
        if not self.pending and not json_media and media != b"text/event-stream":
            return  # no list asked for, and nothing a client reads a result from
        if media == b"text/event-stream":
            mode = SSE
        elif json_media:
            mode = JSON
        elif 200 <= status < 300:
            mode = REFUSE
        else:
            return  # an error page: no result in it, and no client reads one there
        if status == 206:
            mode = REFUSE  # a range of a list cannot be filtered
        dropped = _REWRITTEN
        if encoding and encoding != b"identity":
            wbits = _DECODED.get(encoding)
            if wbits is None:
                mode = REFUSE
            elif mode != REFUSE:
                self.decoder = zlib.decompressobj(wbits)
                dropped = _REWRITTEN | {b"content-encoding"}
        self.mode = mode
        if mode == SSE:
            self.reader = SseReader(self.limit)
        kept = [pair for pair in out if pair[0].lower() not in dropped]
        exchange.head_pending = (status, reason, kept, BODY_CHUNKED, close)

    def upstream_body(self, data: bytes) -> None:
        mode = self.mode
        exchange = self.exchange
        if mode == PASS:
            exchange.upstream_body(data)
            return
        if exchange.finished or not data:
            return
        plan = exchange.plan
        exchange.deadline = exchange.core.reactor.seconds() + (plan.response_timeout
                                                               if plan else 30)
        if mode == REFUSE:
            return  # (answered at the end: nothing of it is passed on)
        try:
            pieces = self._decoded(data)
            if mode == JSON:
                for piece in pieces:
                    self.body += piece
                    if len(self.body) > self.limit:
                        self._refuse_now(f"larger than {self.limit} bytes "
                                         "(mcp.max_response_bytes)")
                        return
                return
            out = bytearray()
            for piece in pieces:
                out += self._events(piece)
        except zlib.error as exc:
            self._refuse_now(f"its content-encoding could not be decoded: {exc}")
            return
        except EventTooLarge:
            self._end_stream(f"an event larger than {self.limit} bytes "
                             "(mcp.max_response_bytes)")
            return
        if out:
            exchange.upstream_body(bytes(out))

    def flush_head(self) -> None:
        if self.mode in (PASS, SSE):
            self.exchange.flush_head()
        # (JSON and REFUSE: the head waits for the body, whose length it then says)

    def upstream_complete(self) -> None:
        exchange = self.exchange
        mode = self.mode
        if exchange.finished:
            return
        if mode in (JSON, REFUSE):
            try:
                self._finish_decoding()
            except zlib.error as exc:
                mode = REFUSE
                why = f"its content-encoding could not be decoded: {exc}"
            else:
                why = "the server answered a list call with a body that is neither JSON nor" \
                    " an event stream"
            if mode == JSON:
                body = filter_json(bytes(self.body), self.request, self.pending,
                                   self._allowed(), self.counts)
                self._sized_head(body)
            else:
                body = refusal(self.request, why)
                self._json_head(body)
            self.body = bytearray()
            if body:
                exchange.upstream_body(body)
        elif mode == SSE:
            try:
                tail = self._events(self._flush_decoder())
            except (zlib.error, EventTooLarge):
                tail = b""
            if tail:
                exchange.upstream_body(tail)
            assert self.reader is not None
            if self.reader.close():
                log.info("an unfinished event at the end of an MCP stream was not passed on",
                         request_id=exchange.request_id)
        self._count()
        exchange.upstream_complete()

    def upstream_upgraded(self, rest: bytes) -> None:
        self.exchange.upstream_upgraded(rest)

    def upstream_failed(self, reason: str, before_response: bool) -> None:
        # a held head is still the exchange's: a failure before the body went out is
        # answered cleanly (502), as on any route
        self.exchange.upstream_failed(reason, before_response)

    # -- the filter

    def _allowed(self) -> Allowed:
        allowed = self.allowed
        if allowed is None:
            exchange = self.exchange
            plan = exchange.plan
            assert plan is not None
            allowed = self.allowed = entry_predicate(
                plan.route, exchange.caller,
                exchange.request_info(),  # type: ignore[attr-defined]  # (an Exchange's)
                exchange.core.reactor.seconds())
        return allowed

    def _events(self, data: bytes) -> bytes:
        reader = self.reader
        assert reader is not None
        out = bytearray()
        for event in reader.feed(data):
            text = event.data
            new = None if text is None else filter_data(text, self.pending, self._allowed(),
                                                        self.counts)
            out += event.raw if new is None else event.with_data(new)
        return bytes(out)

    def _decoded(self, data: bytes) -> list[bytes]:
        decoder = self.decoder
        if decoder is None:
            return [data]
        pieces = [decoder.decompress(data, _PIECE)]
        size = len(pieces[0])
        while decoder.unconsumed_tail and size <= self.limit:
            piece = decoder.decompress(decoder.unconsumed_tail, _PIECE)
            pieces.append(piece)
            size += len(piece)
        return pieces

    def _flush_decoder(self) -> bytes:
        decoder = self.decoder
        if decoder is None:
            return b""
        rest = decoder.flush()
        if not decoder.eof:
            raise zlib.error("the compressed body ended early")
        return rest

    def _finish_decoding(self) -> None:
        rest = self._flush_decoder()
        if self.mode == JSON:
            self.body += rest

    def _sized_head(self, body: bytes) -> None:
        exchange = self.exchange
        held = exchange.head_pending
        assert held is not None
        status, reason, headers, _, close = held
        exchange.head_pending = (status, reason,
                                 [*headers, (b"content-length", b"%d" % len(body))],
                                 BODY_LENGTH, close)

    def _json_head(self, body: bytes) -> None:
        """The head of an answer the gateway makes in the server's place: 200, JSON."""
        exchange = self.exchange
        held = exchange.head_pending
        close = held[4] if held is not None else not exchange.keep_alive
        headers = [pair for pair in (held[2] if held is not None else [])
                   if pair[0].lower() not in (b"content-type", b"content-encoding")]
        exchange.status = 200
        exchange.head_pending = (200, b"", [*headers, (b"content-type", _JSON),
                                            (b"content-length", b"%d" % len(body))],
                                 BODY_LENGTH, close)

    def _refuse_now(self, why: str) -> None:
        """Stop reading the server's answer (it is dropped) and answer the errors."""
        exchange = self.exchange
        log.info("an MCP list response was not passed on: {why}", why=why,
                 request_id=exchange.request_id)
        self.body = bytearray()
        for method in set(self.pending.values()) or {"unknown"}:
            self.counts.refused[method] = self.counts.refused.get(method, 0) + 1
        exchange._drop_upstream(failed=False)
        body = refusal(self.request, why)
        self._json_head(body)
        exchange.upstream_body(body)
        self._count()
        exchange.upstream_complete()

    def _end_stream(self, why: str) -> None:
        """End a stream the gateway can no longer filter: an error event, then the end
        (the rest of the server's stream is dropped)."""
        exchange = self.exchange
        log.info("an MCP event stream was cut: {why}", why=why,
                 request_id=exchange.request_id)
        self.counts.refused["unknown"] = self.counts.refused.get("unknown", 0) + 1
        exchange._drop_upstream(failed=False)
        exchange.upstream_body(b"data: " + encode(error_for(None, "list", why)).encode()
                               + b"\n\n")
        self._count()
        exchange.upstream_complete()

    def _count(self) -> None:
        if MCP_METRICS.enabled:
            plan = self.exchange.plan
            if plan is not None:
                MCP_METRICS.listed(plan.metric_labels[1], self.counts)


def _content(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    """The media type (lower case, no parameters) and the content coding (``b""``:
    none; several codings are returned as written, which nothing decodes)."""
    media = encoding = b""
    for name, value in headers:
        low = name.lower()
        if low == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
        elif low == b"content-encoding":
            encoding = (encoding + b"," + value if encoding else value).strip().lower()
    return media, encoding.replace(b" ", b"")
