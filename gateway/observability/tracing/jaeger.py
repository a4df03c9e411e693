"""``thrifttrace``: spans in Jaeger's Thrift format (``jaeger.thrift``), either a Batch
in the binary protocol POSTed to the HTTP collector (``application/x-thrift``) or an
``Agent.emitBatch`` one-way call in the compact protocol over UDP to the agent.

OpenTelemetry Python's Jaeger exporter was removed upstream (its last release, 1.21, is
from 2023), so the wire format is written here (``thrift_wire``).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from gateway.observability.tracing.thrift_wire import (
    BOOL,
    DOUBLE,
    I32,
    I64,
    LIST,
    ONEWAY,
    STRING,
    STRUCT,
    Field,
    binary_struct,
    compact_message,
    signed64,
)

UDP_MAX = 65000  # the agent's largest datagram
TAG_STRING, TAG_DOUBLE, TAG_BOOL, TAG_LONG = 0, 1, 2, 3
_KINDS = {SpanKind.SERVER: "server", SpanKind.CLIENT: "client"}


def _tag(key: str, value: object) -> list[Field]:
    if isinstance(value, bool):
        return [(1, STRING, key), (2, I32, TAG_BOOL), (5, BOOL, value)]
    if isinstance(value, int):
        return [(1, STRING, key), (2, I32, TAG_LONG), (6, I64, value)]
    if isinstance(value, float):
        return [(1, STRING, key), (2, I32, TAG_DOUBLE), (4, DOUBLE, value)]
    return [(1, STRING, key), (2, I32, TAG_STRING), (3, STRING, str(value))]


def jaeger_span(span: ReadableSpan) -> list[Field]:
    ctx = span.get_span_context()
    assert ctx is not None
    parent = span.parent.span_id if span.parent is not None else 0
    start = (span.start_time or 0) // 1000
    duration = ((span.end_time or 0) - (span.start_time or 0)) // 1000
    tags = [_tag(k, v) for k, v in (span.attributes or {}).items()]
    if span.kind in _KINDS:
        tags.append(_tag("span.kind", _KINDS[span.kind]))
    if span.status.status_code is StatusCode.ERROR:
        tags.append(_tag("error", True))
        if span.status.description:
            tags.append(_tag("otel.status_description", span.status.description))
    refs = None
    if parent:
        refs = (STRUCT, [[(1, I32, 0), (2, I64, signed64(ctx.trace_id)),
                          (3, I64, signed64(ctx.trace_id >> 64)), (4, I64, signed64(parent))]])
    return [
        (1, I64, signed64(ctx.trace_id)), (2, I64, signed64(ctx.trace_id >> 64)),
        (3, I64, signed64(ctx.span_id)), (4, I64, signed64(parent)),
        (5, STRING, span.name), (6, LIST, refs), (7, I32, int(ctx.trace_flags)),
        (8, I64, start), (9, I64, duration), (10, LIST, (STRUCT, tags) if tags else None),
    ]


def batch(service: str, spans: Sequence[ReadableSpan]) -> list[Field]:
    process = [(1, STRING, service),
               (2, LIST, (STRUCT, [_tag("telemetry.sdk.language", "python")]))]
    return [(1, STRUCT, process), (2, LIST, (STRUCT, [jaeger_span(s) for s in spans]))]


class JaegerHTTPExporter(SpanExporter):
    """POSTs one binary-protocol Batch per export to the collector's ``/api/traces``."""

    def __init__(self, endpoint: str, service: str, timeout: float = 5.0) -> None:
        self.endpoint = endpoint
        self.service = service
        self.timeout = timeout
        self.session = requests.Session()
        self.last_error = ""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = binary_struct(batch(self.service, spans))
        response = self.session.post(self.endpoint, data=body, timeout=self.timeout,
                                     headers={"Content-Type": "application/x-thrift"})
        if response.status_code // 100 != 2:
            self.last_error = f"{self.endpoint} answered {response.status_code}"
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.session.close()


class JaegerUDPExporter(SpanExporter):
    """``Agent.emitBatch`` in the compact protocol, one datagram of at most ``UDP_MAX``
    bytes each: a batch too large is split, a span too large alone is dropped (counted
    as failed)."""

    def __init__(self, host: str, port: int, service: str) -> None:
        self.address = (host, port)
        self.service = service
        self.seqid = random.getrandbits(16)
        self.sock: socket.socket | None = None
        self.last_error = ""

    def _socket(self) -> socket.socket:
        if self.sock is None:
            family, _, _, _, address = socket.getaddrinfo(
                *self.address, type=socket.SOCK_DGRAM)[0]
            self.sock = socket.socket(family, socket.SOCK_DGRAM)
            self.sock.connect(address)
        return self.sock

    def _packets(self, spans: Sequence[ReadableSpan]) -> list[bytes]:
        self.seqid = (self.seqid + 1) & 0x7FFFFFFF
        packet = compact_message("emitBatch", ONEWAY, self.seqid,
                                 [(1, STRUCT, batch(self.service, spans))])
        if len(packet) <= UDP_MAX:
            return [packet]
        if len(spans) == 1:
            self.last_error = f"a span of {len(packet)} bytes exceeds {UDP_MAX}"
            return []
        half = len(spans) // 2
        return self._packets(spans[:half]) + self._packets(spans[half:])

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        packets = self._packets(spans)
        sock = self._socket()
        for packet in packets:
            sock.send(packet)
        if not packets and spans:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self.sock is not None:
            self.sock.close()
