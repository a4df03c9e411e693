"""The per-request decision and spans (no sockets): unsampled requests get nothing,
a caller's decision wins, sampled ones get their spans; and the export queue stays
bounded, counting what it drops, whatever the exporter does."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.exchange.head import request_head
from gateway.observability.tracing.active import active, start_child
from gateway.observability.tracing.export_queue import BoundedExport
from gateway.observability.tracing.service import TracingService
from gateway.observability.tracing.tracer import Tracer
from tests.unit.config.helpers import base_config, load

TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN = 0x00F067AA0BA902B7


def exchange(headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    """An exchange as the tracer reads it, with a real ``RequestHead`` (a fake head's
    fields once hid that the tracer read a field the exchange no longer had)."""
    head = request_head(b"GET", b"/p", b"1.1", headers or [], "app.test", "/p",
                        trace_context=bool(headers))
    return SimpleNamespace(
        head=head, headers=head.headers, method=head.method, path=head.path,
        host=head.host, detail="", core=SimpleNamespace(scheme="https"), plan=None,
        host_state=None, reused=False, trace=None, trace_id="", user_id="",
        client_address=lambda: "192.0.2.1")


def tracer(rate: float) -> tuple[Tracer, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return Tracer(provider.get_tracer("test"), rate), memory


class DecisionTests(SynchronousTestCase):
    def test_traces_forced_by_callers_are_budgeted(self) -> None:
        """A caller's "sampled" is honoured up to FORCED_RATE a second (burst
        FORCED_BURST): a client asking for a trace on every request cannot multiply
        the gateway's cost; past the budget the sample rate decides, and the trace id
        is still kept for the logs."""
        from gateway.observability.tracing import tracer as module
        clock = Clock()
        memory = InMemorySpanExporter()
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(memory))
        t = Tracer(provider.get_tracer("test"), 0.0, clock=clock.seconds)
        forced = [(b"traceparent", b"00-%032x-%016x-01" % (TRACE, SPAN))]

        def burst(count: int) -> int:
            traced = 0
            for _ in range(count):
                e = exchange(forced)
                t.begin(e)
                traced += e.trace is not None
                self.assertEqual(e.trace_id, f"{TRACE:032x}")
            return traced

        self.assertEqual(burst(1000), module.FORCED_BURST)
        self.assertEqual(t.forced_refused, 1000 - module.FORCED_BURST)
        clock.advance(1.0)
        self.assertEqual(burst(1000), module.FORCED_RATE)
        clock.advance(1000)
        self.assertEqual(burst(1), 1)
        everything = Tracer(provider.get_tracer("test"), 1.0, clock=clock.seconds)
        for _ in range(1000):  # at rate 1 every request is traced anyway
            e = exchange(forced)
            everything.begin(e)
            self.assertIsNotNone(e.trace)

    def test_unsampled_gets_nothing(self) -> None:
        t, memory = tracer(0.0)
        for _ in range(100):
            e = exchange()
            t.begin(e)
            self.assertIsNone(e.trace)
            self.assertEqual(e.trace_id, "")
        self.assertEqual(memory.get_finished_spans(), ())

    def test_ratio(self) -> None:
        t, _ = tracer(0.25)
        sampled = 0
        for _ in range(4000):
            e = exchange()
            t.begin(e)
            sampled += e.trace is not None
        self.assertTrue(800 < sampled < 1200, sampled)

    def test_parent_decides(self) -> None:
        """A caller's sampled context is traced at rate 0; a caller's "not sampled" is
        not at rate 1, but its trace id is kept for the logs."""
        t, memory = tracer(0.0)
        e = exchange([(b"traceparent", b"00-%032x-%016x-01" % (TRACE, SPAN))])
        t.begin(e)
        self.assertIsNotNone(e.trace)
        self.assertEqual(e.trace_id, f"{TRACE:032x}")
        t1, _ = tracer(1.0)
        e = exchange([(b"traceparent", b"00-%032x-%016x-00" % (TRACE, SPAN))])
        t1.begin(e)
        self.assertIsNone(e.trace)
        self.assertEqual(e.trace_id, f"{TRACE:032x}")
        e = exchange([(b"b3", b"0")])
        t1.begin(e)
        self.assertIsNone(e.trace)
        self.assertEqual(e.trace_id, "")
        e = exchange([(b"traceparent", b"\xff garbage")])  # ignored: a root, sampled at 1
        t1.begin(e)
        self.assertIsNotNone(e.trace)
        self.assertEqual(len(memory.get_finished_spans()), 0)

    def test_spans_of_an_exchange(self) -> None:
        t, memory = tracer(0.0)
        e = exchange([(b"X-B3-TraceId", b"%032x" % TRACE), (b"X-B3-SpanId", b"%016x" % SPAN),
                       (b"X-B3-Sampled", b"1")])
        t.begin(e)
        trace = e.trace
        upstream = SimpleNamespace(host="127.0.0.1", port=8080, scheme="http")
        e.host_state = SimpleNamespace(upstream=upstream)
        authorize = trace.authorize_span()
        with active(authorize):
            child = start_child("kvstore get", {"db.system": "redis"})
        assert child is not None
        child.end("no answer")
        authorize.end()
        self.assertIsNone(start_child("outside"))
        trace.start_upstream(e)
        headers = dict(trace.upstream_headers())
        trace.upstream_done(503, True)
        e.plan = SimpleNamespace(route=SimpleNamespace(name="", host="app.test", index=3))
        trace.end(e, 503)
        spans = {s.name: s for s in memory.get_finished_spans()}
        self.assertEqual(set(spans), {"GET app.test", "authorize", "kvstore get",
                                      "upstream GET"})
        server, client = spans["GET app.test"], spans["upstream GET"]
        self.assertEqual(server.kind, SpanKind.SERVER)
        self.assertEqual(server.parent.span_id, SPAN)  # type: ignore[union-attr]
        self.assertEqual(server.context.trace_id, TRACE)
        self.assertEqual(server.status.status_code, StatusCode.ERROR)
        self.assertEqual(server.attributes["gateway.route"], "3")  # type: ignore[index]
        self.assertEqual(client.parent.span_id, server.context.span_id)  # type: ignore[union-attr]
        self.assertEqual(client.attributes["http.response.status_code"], 503)  # type: ignore[index]
        self.assertEqual(spans["kvstore get"].parent.span_id,  # type: ignore[union-attr]
                         spans["authorize"].context.span_id)
        # the caller spoke B3: the upstream gets traceparent and b3 naming the client span
        self.assertEqual(headers[b"traceparent"],
                         b"00-%032x-%016x-01" % (TRACE, client.context.span_id))
        self.assertEqual(headers[b"b3"], b"%032x-%016x-1" % (TRACE, client.context.span_id))


class _Blocking(SpanExporter):
    """A collector that does not answer until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.batches.append(len(spans))
        return SpanExportResult.SUCCESS


class _Failing(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionRefusedError("refused")


def _spans(n: int) -> list[ReadableSpan]:
    return [ReadableSpan(name=f"s{i}") for i in range(n)]


class QueueTests(SynchronousTestCase):
    def test_stuck_exporter_bounds_and_counts(self) -> None:
        """With the exporter stuck, adding spans never waits; beyond ``max_queue`` they
        are counted as dropped; once it answers, the queue drains."""
        exporter = _Blocking()
        queue = BoundedExport(exporter, max_queue=10, max_batch=4, delay=0.01)
        self.addCleanup(exporter.release.set)
        started = time.monotonic()
        for span in _spans(40):
            queue.on_end(span)
        self.assertLess(time.monotonic() - started, 0.5)
        self.assertLessEqual(len(queue.queue), 10)
        self.assertGreaterEqual(queue.dropped, 40 - 10 - 4)  # one batch may be in flight
        exporter.release.set()
        queue.stop(5.0)
        self.assertEqual(sum(exporter.batches) + queue.dropped, 40)
        self.assertTrue(all(n <= 4 for n in exporter.batches))

    def test_failures_counted(self) -> None:
        queue = BoundedExport(_Failing(), max_queue=100, max_batch=10, delay=0.01)
        for span in _spans(25):
            queue.on_end(span)
        queue.stop(5.0)
        self.assertEqual((queue.failed, queue.exported, queue.dropped), (25, 0, 0))
        self.assertIn("ConnectionRefusedError", queue.last_error)


class ServiceTests(SynchronousTestCase):
    def test_reports_drops_and_swaps_on_reload(self) -> None:
        clock = Clock()
        seen: list[Any] = []
        options = load(base_config(tracing_provider="agenttrace",
                                   tracing_agenttrace_address="127.0.0.1:9")).options
        service = TracingService(clock, options, seen.append)
        self.assertEqual(seen, [])  # nothing before the service starts
        service.startService()
        self.addCleanup(lambda: service.current and service.current.stop(0))
        self.assertIsInstance(seen[-1], Tracer)
        current = service.current
        assert current is not None
        current.queue.dropped += 7
        with capturedLogs() as events:
            clock.advance(30)
        (event,) = [e for e in events if e["log_level"] == LogLevel.warn]
        self.assertEqual(event["dropped"], 7)
        service.apply(options)  # unchanged: kept
        self.assertIs(service.current, current)
        service.apply(load(base_config()).options)  # tracing off
        self.assertIsNone(seen[-1])
        self.assertIsNone(service.current)


class HostTests(SynchronousTestCase):
    def test_server_address_and_port(self) -> None:
        from gateway.observability.tracing.tracer import split_host

        self.assertEqual(split_host("app.test:8443"), ("app.test", 8443))
        self.assertEqual(split_host("app.test"), ("app.test", 0))
        self.assertEqual(split_host("[::1]:8080"), ("::1", 8080))
        self.assertEqual(split_host("[::1]"), ("::1", 0))
        self.assertEqual(split_host("app.test:x"), ("app.test", 0))
