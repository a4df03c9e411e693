"""Audit events as OTLP log records (``otel_logs_exporter: otlp``).

The reactor hands over the event's mapping (``put``, a deque append); the queue's thread
makes the SDK's log records of a batch and exports them: body the event's sentence
(``allow GET app.example.com/ 200``), attributes the chosen fields prefixed ``audit.``,
severity INFO, the event's trace id, scope ``gateway.audit``, the resource of the
traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from gateway import __version__
from gateway.adapters.otel_logs import (
    LogRecord,
    LogRecordExporter,
    LogRecordExportResult,
    ReadableLogRecord,
    SeverityNumber,
)
from gateway.observability.bounded_queue import BoundedQueue

Event = tuple[float, dict[str, Any]]  # (time in seconds, the event's fields)
SCOPE = InstrumentationScope("gateway.audit", __version__)


def _attribute(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return value


def log_record(when: float, event: dict[str, Any], resource: Resource) -> ReadableLogRecord:
    trace = event.get("trace_id") or ""
    body = (f"{event.get('decision', '')} {event.get('method', '')} {event.get('host', '')}"
            f"{event.get('path', '')} {event.get('status', '')}")
    record = LogRecord(
        timestamp=int(when * 1e9), observed_timestamp=int(when * 1e9),
        trace_id=int(trace, 16) if trace else None, severity_text="INFO",
        severity_number=SeverityNumber.INFO, body=body,
        attributes={f"audit.{k}": _attribute(v) for k, v in event.items() if k != "time"})
    return ReadableLogRecord(record, resource, SCOPE)


class AuditOtlp(BoundedQueue[Event]):
    thread_name = "gateway-audit-export"

    def __init__(self, exporter: LogRecordExporter, resource: Resource,
                 max_queue: int = 8192, max_batch: int = 512, delay: float = 1.0) -> None:
        self.exporter = exporter
        self.resource = resource
        BoundedQueue.__init__(self, max_queue, max_batch, delay)

    def send(self, batch: Sequence[Event]) -> bool:
        records = [log_record(when, event, self.resource) for when, event in batch]
        result = self.exporter.export(records)
        if result is LogRecordExportResult.SUCCESS:
            return True
        self.last_error = "export refused"
        return False

    def close(self) -> None:
        self.exporter.shutdown()  # type: ignore[no-untyped-call]
