"""``agenttrace``: the trace agent's API v0.4, traces as MessagePack ``PUT`` to
``http://<tracing_agenttrace_address>/v0.4/traces``.

The body is an array of traces, each an array of span maps with 64-bit ids: the trace
id is the low half of OpenTelemetry's 128-bit one (the high half goes in meta
``_dd.p.tid``, as the agent's own tracers do), times are nanoseconds, string attributes
go to ``meta`` and numbers to ``metrics``. No OpenTelemetry exporter for this API exists
any more, so it is written here (``msgpack_wire``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from gateway import __version__
from gateway.observability.tracing.msgpack_wire import packb

_MASK = (1 << 64) - 1
_KINDS = {SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
          SpanKind.INTERNAL: "internal"}


def agent_span(span: ReadableSpan, service: str) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    meta: dict[str, str] = {"span.kind": _KINDS.get(span.kind, "internal")}
    metrics: dict[str, float] = {}
    attributes = span.attributes or {}
    for key, value in attributes.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            meta[key] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            metrics[key] = float(value)
    if ctx.trace_id >> 64:
        meta["_dd.p.tid"] = f"{ctx.trace_id >> 64:016x}"
    error = span.status.status_code is StatusCode.ERROR
    if error and span.status.description:
        meta["error.message"] = span.status.description
    kind_type = "web" if span.kind is SpanKind.SERVER else "http"
    if "db.system" in attributes:
        kind_type = str(attributes["db.system"])
    elif span.kind is SpanKind.INTERNAL:
        kind_type = "custom"
    start = span.start_time or 0
    return {
        "trace_id": ctx.trace_id & _MASK, "span_id": ctx.span_id,
        "parent_id": span.parent.span_id if span.parent is not None else 0,
        "name": span.name, "resource": span.name, "service": service, "type": kind_type,
        "start": start, "duration": max((span.end_time or start) - start, 0),
        "error": 1 if error else 0, "meta": meta, "metrics": metrics,
    }


def encode_traces(spans: Sequence[ReadableSpan], service: str) -> tuple[bytes, int]:
    """(body, number of traces): the spans grouped by trace."""
    traces: dict[int, list[dict[str, Any]]] = {}
    for span in spans:
        ctx = span.get_span_context()
        assert ctx is not None
        traces.setdefault(ctx.trace_id, []).append(agent_span(span, service))
    return packb(list(traces.values())), len(traces)


class AgentTraceExporter(SpanExporter):
    def __init__(self, address: str, service: str, timeout: float = 5.0) -> None:
        self.url = f"http://{address}/v0.4/traces"
        self.service = service
        self.timeout = timeout
        self.session = requests.Session()
        self.last_error = ""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body, count = encode_traces(spans, self.service)
        response = self.session.put(self.url, data=body, timeout=self.timeout, headers={
            "Content-Type": "application/msgpack", "Datadog-Meta-Lang": "python",
            "Datadog-Meta-Tracer-Version": __version__, "X-Datadog-Trace-Count": str(count)})
        if response.status_code // 100 != 2:
            self.last_error = f"{self.url} answered {response.status_code}"
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.session.close()
