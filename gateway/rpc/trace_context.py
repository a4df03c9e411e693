"""Trace context across gRPC: a split proxy's calls to authorize and the databroker join
the request's trace, and so do the spans those services make (their session lookups,
kvstore commands, identity-provider calls).

- Client (reactor thread, where the request's span is active): ``client_call`` starts a
  client span under it and gives the W3C ``traceparent`` that names it, sent as gRPC
  metadata; ``end`` closes the span when the call is over. Outside a traced request
  both cost one ``ContextVar.get``.
- Server: ``ServerTracing`` holds this process's tracer (``tracing_provider``; none
  without it) and ``traced`` runs a call's work on the reactor under a server span whose
  parent is the caller's ``traceparent``. Only calls whose caller sampled are traced:
  the decision was the request's, made once at the proxy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.observability.tracing.active import ChildSpan, active, start_child
from gateway.observability.tracing.propagation import TRACEPARENT, find_parent

if TYPE_CHECKING:
    from gateway.observability.tracing.tracer import Tracer

Metadata = tuple[tuple[str, str], ...]
KEY = TRACEPARENT.decode("ascii")


def client_call(service: str, method: str) -> tuple[ChildSpan | None, Metadata]:
    """A client span for one call (None outside a traced request) and its metadata."""
    span = start_child(f"grpc {service}/{method}", {
        "rpc.system": "grpc", "rpc.service": service, "rpc.method": method})
    if span is None:
        return None, ()
    return span, tuple((name.decode("latin-1"), value.decode("latin-1"))
                       for name, value in span.context_headers() if name == TRACEPARENT)


def end(result: Any, span: ChildSpan | None) -> Any:
    """As a Deferred's callback and errback: the span ends with the call."""
    if span is not None:
        span.end(result.getErrorMessage() if isinstance(result, Failure) else None)
    return result


def traceparent(metadata: Any) -> bytes:
    for key, value in metadata or ():
        if key == KEY and isinstance(value, str):
            return value.encode("latin-1")
    return b""


class ServerTracing:
    """This process's tracer, as the tracing service hands it over (None: off)."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None

    def changed(self, tracer: Tracer | None) -> None:
        self.tracer = tracer

    def traced(self, metadata: Any, name: str, work: Callable[[], Any]) -> Any:
        """Run ``work()`` (on the reactor) under a server span child of the caller's
        span, when tracing is on here and the caller sampled; else just run it."""
        tracer = self.tracer
        header = traceparent(metadata) if tracer is not None else b""
        if not header or tracer is None:
            return work()
        parent = find_parent([(TRACEPARENT, header)])
        if parent is None or not parent.sampled:
            return work()
        from gateway.observability.tracing.tracer import server_span

        span = server_span(tracer, name, parent)
        try:
            with active(span):
                result = work()
        except BaseException as exc:
            span.end(str(exc) or type(exc).__name__)
            raise
        if isinstance(result, Deferred):
            return result.addBoth(end, span)
        span.end()
        return result
