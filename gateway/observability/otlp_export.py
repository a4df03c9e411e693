"""The SDK's OTLP exporters (spans, metrics, log records) for one ``config.otel.SignalExport``.

Over HTTP the protobuf body is POSTed to the target's URL; over gRPC the target's URL
names the collector and its scheme whether TLS is used. TLS to the collector: the CA
file (else the system's roots) and an optional client certificate and key. Every call of
``export`` blocks for at most the target's timeout (retries included): callers run it on
a thread of their own, never on the reactor.

Imported only when something is sent over OTLP.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from gateway.adapters.otel_logs import LogRecordExporter, grpc_log_exporter, http_log_exporter
from gateway.config.otel import SignalExport

# The exporters report through the standard library's logging, which nothing here
# shows: the services that own them count and log failures themselves.
logging.getLogger("opentelemetry").addHandler(logging.NullHandler())
logging.getLogger("opentelemetry").propagate = False


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def _grpc_arguments(target: SignalExport) -> dict[str, Any]:
    import grpc

    arguments: dict[str, Any] = {"endpoint": target.endpoint, "headers": dict(target.headers),
                                 "timeout": target.timeout}
    if target.insecure:
        arguments["insecure"] = True
    else:
        arguments["insecure"] = False
        arguments["credentials"] = grpc.ssl_channel_credentials(
            root_certificates=_read(target.certificate),
            private_key=_read(target.client_key),
            certificate_chain=_read(target.client_certificate))
    return arguments


def _http_arguments(target: SignalExport) -> dict[str, Any]:
    arguments: dict[str, Any] = {"endpoint": target.endpoint, "headers": dict(target.headers),
                                 "timeout": target.timeout}
    if target.certificate:
        import requests

        arguments["certificate_file"] = target.certificate
        # requests lets REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE in the environment replace a
        # session's CA file: the collector's CA must be the one checked
        session = requests.Session()
        session.trust_env = False
        arguments["session"] = session
    if target.client_certificate:
        arguments["client_certificate_file"] = target.client_certificate
        arguments["client_key_file"] = target.client_key
    return arguments


def span_exporter(target: SignalExport) -> SpanExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpans,
        )

        return GrpcSpans(**_grpc_arguments(target))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpans,
    )

    return HttpSpans(**_http_arguments(target))


def metric_exporter(target: SignalExport) -> MetricExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetrics,
        )

        return GrpcMetrics(**_grpc_arguments(target))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetrics,
    )

    return HttpMetrics(**_http_arguments(target))


def log_exporter(target: SignalExport) -> LogRecordExporter:
    if target.protocol == "grpc":
        return grpc_log_exporter(**_grpc_arguments(target))
    return http_log_exporter(**_http_arguments(target))
