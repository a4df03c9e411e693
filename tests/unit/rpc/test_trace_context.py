"""Trace context over gRPC: a traced request's call to authorize (and to the databroker)
is a client span whose W3C traceparent travels as metadata; the service continues the
trace with a server span, and what it does meanwhile (a session lookup) is a child of
it. An untraced request sends no traceparent and the service makes no span. Real gRPC
on loopback, spans in memory."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from twisted.internet.defer import Deferred, succeed

from gateway.authorize.hook import Allow, Decision, RequestInfo
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION
from gateway.observability.tracing.active import active, start_child
from gateway.observability.tracing.tracer import OpenSpan, Tracer
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_client import RemoteAuthorizer
from gateway.rpc.authorize_server import SERVICE_NAME, AuthorizeDecider, AuthorizeServicer
from gateway.rpc.databroker_client import RemoteRecordStore
from gateway.rpc.databroker_server import SERVICE_NAME as DATABROKER
from gateway.rpc.databroker_server import DatabrokerServicer
from gateway.rpc.protos import authorize_pb2_grpc, databroker_pb2_grpc
from gateway.rpc.server import GrpcServerService
from gateway.rpc.trace_context import ServerTracing

from .loopback import SECRET, QueueReactor, server_snapshot
from .test_authorize_rpc import APP, LocalIdentity, info, plan_for, policy_snapshot


class LookingUp:
    """Allows after a 'session lookup' (a child span of whatever is active)."""

    def __init__(self) -> None:
        from gateway.authorize.assertion import AssertionSigner
        self.signer = AssertionSigner(None, "ES256", "")

    def authorize(self, request: RequestInfo, route: Any) -> Decision | Deferred[Decision]:
        span = start_child("session lookup", client=False)
        if span is not None:
            span.end()
        return succeed(Allow(()))


@pytest.fixture
def traced(rig: tuple[AsyncioThread, QueueReactor]
           ) -> tuple[AsyncioThread, QueueReactor, Tracer, InMemorySpanExporter]:
    """The bridge and reactor (``rig``) with a tracer whose spans land in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return (*rig, Tracer(provider.get_tracer("test"), 1.0), memory)


def serve(bridge: AsyncioThread, servicer: Any, add: Any, name: str) -> GrpcServerService:
    service = GrpcServerService(bridge, server_snapshot(), [(servicer, add, name)])
    service.startService()
    return service


def request_span(tracer: Tracer) -> OpenSpan:
    """The proxy's authorize span of a sampled request."""
    return OpenSpan(tracer.otel, tracer.otel.start_span("authorize", kind=SpanKind.INTERNAL))


def by_name(memory: InMemorySpanExporter) -> dict[str, Any]:
    return {span.name: span for span in memory.get_finished_spans()}


def test_authorize_continues_the_requests_trace(traced: Any) -> None:
    bridge, reactor, tracer, memory = traced
    tracing = ServerTracing()
    tracing.changed(tracer)
    snapshot = policy_snapshot()
    server = serve(bridge, AuthorizeServicer(bridge, AuthorizeDecider(LookingUp(), snapshot),
                                             tracing),  # type: ignore[arg-type]
                   authorize_pb2_grpc.add_AuthorizeServicer_to_server, SERVICE_NAME)
    remote = RemoteAuthorizer.create(bridge, LocalIdentity(),  # type: ignore[arg-type]
                                     (f"http://127.0.0.1:{server.port}",), SECRET, 5.0)
    plan = plan_for(snapshot, APP, "/x")
    try:
        parent = request_span(tracer)
        with active(parent):
            d = remote.authorize(info("/x"), plan.route)
        assert isinstance(reactor.wait(d), Allow)
        parent.end()
        spans = by_name(memory)
        client = spans[f"grpc {SERVICE_NAME}/Check"]
        served = [s for s in memory.get_finished_spans() if s.kind == SpanKind.SERVER]
        assert len(served) == 1
        trace = parent.span.get_span_context().trace_id
        assert client.kind == SpanKind.CLIENT
        assert client.parent.span_id == parent.span.get_span_context().span_id
        assert served[0].context.trace_id == trace == client.context.trace_id
        assert served[0].parent.span_id == client.context.span_id
        assert spans["session lookup"].parent.span_id == served[0].context.span_id

        # a request that is not traced: no traceparent, no span on either side
        memory.clear()
        assert isinstance(reactor.wait(remote.authorize(info("/x"), plan.route)), Allow)
        assert memory.get_finished_spans() == ()
    finally:
        reactor.wait(remote.close())
        reactor.wait(server.stopService())


def test_databroker_calls_join_the_trace(traced: Any) -> None:
    bridge, reactor, tracer, memory = traced
    tracing = ServerTracing()
    tracing.changed(tracer)
    servicer = DatabrokerServicer(bridge, MemoryRecordStore(reactor.seconds), tracing=tracing)
    server = serve(bridge, servicer, databroker_pb2_grpc.add_DatabrokerServicer_to_server,
                   DATABROKER)
    client = RemoteRecordStore(bridge, (f"http://127.0.0.1:{server.port}",), SECRET, 5.0)
    try:
        parent = request_span(tracer)
        with active(parent):
            d = client.get(SESSION, "s1")
        assert reactor.wait(d) is None
        parent.end()
        spans = by_name(memory)
        call = spans[f"grpc {DATABROKER}/Get"]
        served = [s for s in memory.get_finished_spans() if s.kind == SpanKind.SERVER]
        assert [s.name for s in served] == [f"grpc {DATABROKER}/Get"]
        assert served[0].parent.span_id == call.context.span_id
        assert served[0].context.trace_id == parent.span.get_span_context().trace_id
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())
