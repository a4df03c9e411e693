"""The per-request side of tracing: the sampling decision and the spans of one exchange.

``Tracer.begin`` runs first for every request while tracing is on. The decision is made
before any OpenTelemetry object exists: a caller's context (``traceparent``, ``b3``,
``X-B3-*``, searched only when the codec flagged one in the request head's ``trace_context``)
decides when it says sampled or not (parent-based; "sampled" within a budget of
``tracing_caller_sampled_per_second``, past which the rate decides and
``forced_refused`` counts it); otherwise one ``random()`` against the sample rate (a
ratio sampler). A sampler that is not parent-based (``otel_traces_sampler``) lets the
rate decide every request, continuing a caller's trace when it samples one. An unsampled
request gets no span, no context object and no upstream header of ours (the caller's own
trace headers pass through untouched), so without trace headers it costs one random
number and a comparison. A sampled request gets a ``RequestTrace``: its spans are
OpenTelemetry SDK spans, created with explicit parents (nothing is attached to the
global context), and the SDK's sampler for them is ``ParentBased(ALWAYS_ON)``: the
decision is already made.

Spans: the downstream request (server), the authorization decision with its session
lookup, the upstream request (client, carrying ``traceparent``), and whatever runs under
``active.ACTIVE`` (identity-provider calls, kvstore commands).
"""

from __future__ import annotations

from collections.abc import Callable
from random import random
from time import monotonic
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace import (
    Tracer as OTelTracer,
)

from gateway.budget import Budget
from gateway.observability.tracing.propagation import (
    ALL_FORMATS,
    Parent,
    context_headers,
    find_parent,
)

Attributes = dict[str, str | int | float | bool]
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# Traces a caller may force (a sampled parent) beyond the sample rate: each costs about
# four times an untraced request, so a client sending sampled traceparents on every
# request must not multiply the gateway's CPU (a token bucket, per process; its burst
# is two seconds' worth).
FORCED_RATE = 100.0  # per second, tracing_caller_sampled_per_second's default
FORCED_BURST = FORCED_RATE * 2
_USER_AGENT = b"user-agent"


class OpenSpan:
    """An SDK span as ``active.ChildSpan`` and ``active.SpanParent``."""

    __slots__ = ("ended", "span", "tracer")

    def __init__(self, tracer: OTelTracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span
        self.ended = False

    def child(self, name: str, client: bool, attributes: Attributes) -> OpenSpan:
        span = self.tracer.start_span(
            name, context=set_span_in_context(self.span),
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL, attributes=attributes)
        return OpenSpan(self.tracer, span)

    def set(self, key: str, value: str | int | float | bool) -> None:
        self.span.set_attribute(key, value)

    def end(self, error: str | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()

    def context_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        ctx = self.span.get_span_context()
        return context_headers(ctx.trace_id, ctx.span_id, False)


class RequestTrace:
    """The spans of one sampled exchange; the exchange calls in at each step."""

    __slots__ = ("b3", "server", "trace_id", "upstream", "user_id")

    def __init__(self, server: OpenSpan, b3: bool, user_id: bool = True) -> None:
        self.server = server
        self.upstream: OpenSpan | None = None
        self.b3 = b3
        self.user_id = user_id  # whether the server span names the signed-in user
        self.trace_id = f"{server.span.get_span_context().trace_id:032x}"

    def authorize_span(self) -> OpenSpan:
        return self.server.child("authorize", False, {})

    def start_upstream(self, exchange: Any) -> None:
        """Before a host's connection is taken: a retry on a fresh connection ends the
        previous attempt's span and starts another."""
        if self.upstream is not None:
            self.upstream.end(exchange.detail or "retried on a fresh connection")
        host = exchange.host_state
        attributes: Attributes = {"http.request.method": exchange.method.decode("latin-1")}
        if host is not None:
            upstream = host.upstream
            attributes["server.address"] = upstream.host
            attributes["server.port"] = upstream.port
            attributes["url.scheme"] = upstream.scheme
        self.upstream = self.server.child(
            f"upstream {exchange.method.decode('latin-1')}", True, attributes)

    def upstream_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """The context the upstream request carries (naming the client span)."""
        span = self.upstream if self.upstream is not None else self.server
        ctx = span.span.get_span_context()
        return context_headers(ctx.trace_id, ctx.span_id, self.b3)

    def upstream_done(self, status: int, reused: bool) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is None:
            return
        upstream.set("http.response.status_code", status)
        upstream.set("gateway.upstream.reused", reused)
        upstream.end(f"upstream answered {status}" if status >= 500 else None)

    def end(self, exchange: Any, status: int) -> None:
        """The exchange is over (answered, abandoned, or turned into a tunnel)."""
        server = self.server
        detail = exchange.detail or ""
        if self.upstream is not None:
            self.upstream.end(detail or "the exchange ended before the upstream answered")
            self.upstream = None
        method = exchange.method.decode("latin-1")
        plan = exchange.plan
        span = server.span
        if plan is not None:
            route = plan.route
            label = route.name or route.host
            span.update_name(f"{method} {label}")
            span.set_attribute("gateway.route", route.name or str(route.index))
        if self.user_id and exchange.user_id:
            span.set_attribute("user.id", exchange.user_id)
        span.set_attribute("http.response.status_code", status)
        address, port = split_host(exchange.host)
        span.set_attribute("server.address", address)
        if port:
            span.set_attribute("server.port", port)
        if detail:
            span.set_attribute("gateway.detail", detail)
        server.end((detail or f"answered {status}") if status >= 500 else None)


def split_host(host: str) -> tuple[str, int]:
    """``server.address`` and ``server.port`` (0: none) of a Host header's value."""
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[1:end], host[end + 1:]
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = host.partition(":")
    return name, int(port) if port.isdigit() else 0


class Tracer:
    """Decides per request and starts the server span of the sampled ones."""

    def __init__(self, otel: OTelTracer, sample_rate: float, scheme: str = "http",
                 clock: Callable[[], float] = monotonic, *, parent_based: bool = True,
                 formats: frozenset[str] = ALL_FORMATS, user_id: bool = True,
                 forced_rate: float = FORCED_RATE) -> None:
        self.otel = otel
        self.rate = sample_rate
        self.scheme = scheme
        self.parent_based = parent_based
        self.formats = formats  # the caller context formats read (otel_propagators)
        self.user_id = user_id
        # Traces callers ask for (a sampled parent) beyond the sample rate: at most
        # ``forced_rate`` a second (burst: two seconds' worth). Past that the rate
        # decides, as if the caller had not said; the trace id is still kept for the
        # logs and passed on.
        self.clock = clock
        self.forced = Budget(forced_rate * 2, forced_rate, clock())
        self.forced_refused = 0  # caller-forced traces the budget did not allow

    def _forced(self) -> bool:
        """Whether a caller's "sampled" may be honoured now (a token of the budget)."""
        if self.forced.take(self.clock()):
            return True
        self.forced_refused += 1
        return False

    def _ratio(self) -> bool:
        rate = self.rate
        return rate >= 1.0 or (rate > 0.0 and random() < rate)

    def begin(self, exchange: Any) -> None:
        """Sets ``exchange.trace`` (sampled) and ``exchange.trace_id`` (sampled, or a
        caller's trace that we do not sample)."""
        head = exchange.head
        parent = find_parent(head.headers, self.formats) if head.trace_context \
            and self.formats else None
        if parent is not None and not parent.trace:  # a bare "not sampled", no ids
            parent = parent if self.parent_based else None
        if parent is None:
            if not self._ratio():
                return
            context: Context | None = Context()
            b3 = False
        else:
            sampled = parent.sampled if self.parent_based else None
            if sampled is None or (sampled and self.rate < 1.0 and not self._forced()):
                sampled = self._ratio()
            if not sampled:
                if parent.trace:
                    exchange.trace_id = parent.trace
                return
            context = set_span_in_context(NonRecordingSpan(SpanContext(
                parent.trace_id, parent.span_id, is_remote=True, trace_flags=_SAMPLED)))
            b3 = parent.b3
        method = exchange.method.decode("latin-1")
        attributes: Attributes = {
            "http.request.method": method, "url.path": exchange.path,
            "url.scheme": exchange.core.scheme, "client.address": exchange.client_address()}
        for name, value in exchange.headers:
            if len(name) == 10 and name.lower() == _USER_AGENT:
                attributes["user_agent.original"] = value.decode("latin-1")
                break
        span = self.otel.start_span(method, context=context, kind=SpanKind.SERVER,
                                    attributes=attributes)
        trace = RequestTrace(OpenSpan(self.otel, span), b3, self.user_id)
        exchange.trace = trace
        exchange.trace_id = trace.trace_id


def server_span(tracer: Tracer, name: str, parent: Parent,
                attributes: Attributes | None = None) -> OpenSpan:
    """A server span continuing a remote caller's sampled trace (a split proxy's gRPC
    call to authorize or the databroker: ``gateway.rpc.trace_context``)."""
    context = set_span_in_context(NonRecordingSpan(SpanContext(
        parent.trace_id, parent.span_id, is_remote=True, trace_flags=_SAMPLED)))
    span = tracer.otel.start_span(name, context=context, kind=SpanKind.SERVER,
                                  attributes=attributes or {})
    return OpenSpan(tracer.otel, span)
