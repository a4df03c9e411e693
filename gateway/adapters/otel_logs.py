"""OpenTelemetry's logs API and SDK, and the OTLP log exporters.

OpenTelemetry still calls its logs signal experimental and keeps it in underscore
modules (``opentelemetry._logs``, ``opentelemetry.sdk._logs``, the exporters'
``_log_exporter``), which its own documentation has users import; a release that
declares them stable may move them. The audit log's OTLP queue (``audit_otlp``) and the
exporters (``otlp_export``) take them from here. The exporters are imported when one is
made, as before: they bring gRPC or an HTTP client along.
"""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

RELIES_ON = (
    ("opentelemetry._logs", "", ("LogRecord", "SeverityNumber")),
    ("opentelemetry.sdk._logs", "", ("ReadableLogRecord",)),
    ("opentelemetry.sdk._logs.export", "", ("LogRecordExporter", "LogRecordExportResult")),
    ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "", ("OTLPLogExporter",)),
    ("opentelemetry.exporter.otlp.proto.http._log_exporter", "", ("OTLPLogExporter",)),
)

__all__ = ["LogRecord", "LogRecordExportResult", "LogRecordExporter", "ReadableLogRecord",
           "SeverityNumber", "grpc_log_exporter", "http_log_exporter"]


def grpc_log_exporter(**arguments: Any) -> LogRecordExporter:
    """The SDK's OTLP log exporter over gRPC."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

    return OTLPLogExporter(**arguments)


def http_log_exporter(**arguments: Any) -> LogRecordExporter:
    """The SDK's OTLP log exporter over HTTP/protobuf."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    return OTLPLogExporter(**arguments)
