"""From the ``tracing_*`` settings to a running ``Tracing``: the OpenTelemetry SDK's
tracer provider, the bounded export queue and the provider's exporter.

- ``httptrace``: OpenTelemetry's Zipkin JSON exporter (v2) to ``tracing_httptrace_endpoint``.
- ``thrifttrace``: Jaeger Thrift over HTTP to ``tracing_thrifttrace_collector_endpoint``
  or, when only ``tracing_thrifttrace_agent_endpoint`` is set, compact Thrift over UDP.
- ``agenttrace``: the trace agent's API v0.4 at ``tracing_agenttrace_address``.
- ``otlp``: OpenTelemetry's own protocol, over HTTP (protobuf) or gRPC, with the SDK's
  OTLP exporters (``otlp_export``), to where the ``otel_*`` settings say
  (``gateway.config.otel``).

Imported only when tracing is configured: with ``tracing_provider`` unset nothing of
OpenTelemetry is loaded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from opentelemetry.exporter.zipkin.json import ZipkinExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from gateway import __version__
from gateway.adapters.zipkin import ZipkinV2Encoder
from gateway.config import otel
from gateway.config.settings import Options
from gateway.config.values import parse_address
from gateway.observability.tracing.agenttrace import AgentTraceExporter
from gateway.observability.tracing.export_queue import BoundedExport
from gateway.observability.tracing.jaeger import JaegerHTTPExporter, JaegerUDPExporter
from gateway.observability.tracing.tracer import Tracer

EXPORT_TIMEOUT = 5  # seconds, per batch sent
TRACING_KEYS = ("tracing_provider", "tracing_sample_rate", "tracing_agenttrace_address",
                "tracing_thrifttrace_collector_endpoint",
                "tracing_thrifttrace_agent_endpoint", "tracing_httptrace_endpoint",
                "tracing_user_id", "tracing_caller_sampled_per_second",
                "otel_traces_exporter", "otel_exporter_otlp_endpoint",
                "otel_exporter_otlp_traces_endpoint", "otel_exporter_otlp_protocol",
                "otel_exporter_otlp_traces_protocol", "otel_exporter_otlp_headers",
                "otel_exporter_otlp_traces_headers", "otel_exporter_otlp_timeout",
                "otel_exporter_otlp_traces_timeout", "otel_exporter_otlp_certificate",
                "otel_exporter_otlp_client_certificate", "otel_exporter_otlp_client_key",
                "otel_service_name", "otel_resource_attributes", "otel_traces_sampler",
                "otel_traces_sampler_arg", "otel_propagators", "otel_sdk_disabled")
# The SDK and the Zipkin exporter report through the standard library's logging, which
# nothing here shows: ``TracingService`` reports the counts instead.
logging.getLogger("opentelemetry").addHandler(logging.NullHandler())
logging.getLogger("opentelemetry").propagate = False


def agenttrace_address(address: str) -> str:
    host, port = parse_address(address or "localhost:8126")
    host = host or "localhost"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def exporter_for(options: Options, service: str) -> SpanExporter:
    provider = otel.tracing_provider(options)
    if provider == "otlp":
        from gateway.observability.otlp_export import span_exporter

        return span_exporter(otel.target(options, "traces"))
    if provider == "httptrace":
        zipkin = ZipkinExporter(endpoint=options.tracing_httptrace_endpoint,
                                timeout=EXPORT_TIMEOUT)
        zipkin.encoder = ZipkinV2Encoder()  # type: ignore[assignment]
        return zipkin
    if provider == "thrifttrace":
        if options.tracing_thrifttrace_collector_endpoint:
            return JaegerHTTPExporter(options.tracing_thrifttrace_collector_endpoint, service,
                                      EXPORT_TIMEOUT)
        host, port = parse_address(options.tracing_thrifttrace_agent_endpoint)
        return JaegerUDPExporter(host or "localhost", port, service)
    if provider == "agenttrace":
        return AgentTraceExporter(agenttrace_address(options.tracing_agenttrace_address), service,
                             EXPORT_TIMEOUT)
    raise ValueError(f"unknown tracing_provider {provider!r}")


@dataclass
class Tracing:
    """One configuration's tracing: replaced whole when a reload changes a setting."""

    settings: tuple[object, ...]
    tracer: Tracer
    provider: TracerProvider
    queue: BoundedExport

    def stop(self, timeout: float) -> None:
        self.queue.stop(timeout)


def settings_of(options: Options) -> tuple[object, ...]:
    return (*(getattr(options, key) for key in TRACING_KEYS), options.services)


def build_tracing(options: Options, max_queue: int = 2048) -> Tracing:
    attributes = otel.resource_attributes(options)
    service = attributes["service.name"]
    provider = TracerProvider(resource=Resource(attributes), sampler=ParentBased(ALWAYS_ON),
                              shutdown_on_exit=False)
    queue = BoundedExport(exporter_for(options, service), max_queue=max_queue)
    provider.add_span_processor(queue)
    sampling = otel.sampling(options)
    tracer = Tracer(provider.get_tracer("gateway", __version__), sampling.rate,
                    parent_based=sampling.parent_based, formats=otel.propagators(options),
                    user_id=options.tracing_user_id,
                    forced_rate=float(options.tracing_caller_sampled_per_second))
    return Tracing(settings_of(options), tracer, provider, queue)
