"""Ended spans go to a ``BoundedQueue``; its thread sends them to the provider's exporter.

Not the SDK's ``BatchSpanProcessor``: its drops are a log line per span and a counter in
OpenTelemetry's own metrics, and we want both counts in our hands (``TracingService``
logs them and publishes them as ``gateway_telemetry_*{signal="spans"}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from gateway.observability.bounded_queue import BoundedQueue


class BoundedExport(BoundedQueue[ReadableSpan], SpanProcessor):
    thread_name = "gateway-trace-export"

    def __init__(self, exporter: SpanExporter, max_queue: int = 2048, max_batch: int = 256,
                 delay: float = 1.0) -> None:
        self.exporter = exporter
        BoundedQueue.__init__(self, max_queue, max_batch, delay)

    def send(self, batch: Sequence[ReadableSpan]) -> bool:
        result: Any = self.exporter.export(batch)
        if result is SpanExportResult.SUCCESS:
            return True
        self.last_error = getattr(self.exporter, "last_error", "") or "export refused"
        return False

    def close(self) -> None:
        self.exporter.shutdown()

    # -- SpanProcessor (reactor thread)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.put(span)

    def shutdown(self) -> None:
        self.stop(0.0)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
