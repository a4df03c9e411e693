"""Tracing: spans of requests to a Zipkin, Jaeger or trace-agent collector.

Only ``active`` and ``propagation`` load without OpenTelemetry; the rest is imported
when ``tracing_provider`` is set (``service.TracingService``).
"""
