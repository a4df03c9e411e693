"""Ended spans go to a bounded queue; one background thread sends them in batches.

The reactor thread only appends to a deque (or, when it is full, counts a drop): a dead,
slow or refusing collector costs the proxy nothing but those drops, and the memory held
is at most ``max_queue`` spans. The worker wakes every ``delay`` seconds or when a batch
is full, sends batches of at most ``max_batch``, and counts what was sent and what
failed; a failed batch is not retried (the queue behind it matters more).

Not the SDK's ``BatchSpanProcessor``: its drops are a log line per span and a counter in
OpenTelemetry's own metrics, and we want both counts in our hands (``TracingService``
logs them).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class BoundedExport(SpanProcessor):
    def __init__(self, exporter: SpanExporter, max_queue: int = 2048, max_batch: int = 256,
                 delay: float = 1.0) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.delay = delay
        self.queue: deque[ReadableSpan] = deque()
        self.dropped = 0  # reactor thread only
        self.exported = 0  # worker thread only
        self.failed = 0  # worker thread only
        self.last_error = ""
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gateway-trace-export",
                                        daemon=True)
        self._thread.start()

    # -- SpanProcessor (reactor thread)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        queue = self.queue
        if self._stopping or len(queue) >= self.max_queue:
            self.dropped += 1
            return
        queue.append(span)
        if len(queue) >= self.max_batch:
            self._wake.set()

    def shutdown(self) -> None:
        self.stop(0.0)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def stop(self, timeout: float) -> None:
        """Let the worker send what is queued (each request bounded by the exporter's
        own timeout); wait at most ``timeout`` for it (0: not at all)."""
        self._stopping = True
        self._wake.set()
        if timeout > 0:
            self._thread.join(timeout)

    @property
    def idle(self) -> bool:
        return not self._thread.is_alive()

    # -- the worker

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            stopping = self._stopping
            self._drain()
            if stopping:
                with suppress(Exception):  # the process is stopping: nobody to tell
                    self.exporter.shutdown()
                return

    def _drain(self) -> None:
        queue = self.queue
        while queue:
            batch: list[ReadableSpan] = []
            while queue and len(batch) < self.max_batch:
                batch.append(queue.popleft())
            self._send(batch)

    def _send(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            result: Any = self.exporter.export(batch)
        except Exception as exc:  # any failure of a collector is counted
            self.failed += len(batch)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        if result is SpanExportResult.SUCCESS:
            self.exported += len(batch)
        else:
            self.failed += len(batch)
            self.last_error = getattr(self.exporter, "last_error", "") or "export refused"
