"""The tracing of the running configuration, as a service of the proxy.

It builds ``Tracing`` when ``tracing_provider`` is set (loading OpenTelemetry only then),
hands its ``Tracer`` to the data plane through ``on_change``, rebuilds it when a reload
changes a ``tracing_*`` setting, and every ``REPORT_INTERVAL`` logs the spans the export
queue dropped or failed to send since the last report (the only per-span news: a dead
collector never produces a log line per request). The same counts, summed over the
tracings a reload replaced, are the ``gateway_telemetry_*{signal="spans"}`` metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from gateway.config.otel import sampling, tracing_provider
from gateway.config.settings import Options
from gateway.observability.metrics import watch_caller_sampled_refused, watch_telemetry

if TYPE_CHECKING:
    from gateway.observability.tracing.provider import Tracing
    from gateway.observability.tracing.tracer import Tracer

log = Logger(namespace="gateway.tracing")
REPORT_INTERVAL = 30.0
STOP_WAIT = 3.0  # seconds the queued spans get to leave when the gateway stops


class TracingService(Service):
    def __init__(self, reactor: Any, options: Options,
                 on_change: Callable[[Tracer | None], None]) -> None:
        self.reactor = reactor
        self.on_change = on_change
        self.current: Tracing | None = None
        self._reported = (0, 0)
        # exported, failed, dropped, caller-sampled refused of the tracings replaced
        self._carried = (0, 0, 0, 0)
        self._report = LoopingCall(self.report)
        self._report.clock = reactor
        self.options = options

    def apply(self, options: Options) -> None:
        """A new configuration; acted on once running (the export thread starts with
        the service, after twistd has daemonized)."""
        self.options = options
        if self.running:
            self._configure(options)

    def _configure(self, options: Options) -> None:
        provider = tracing_provider(options)
        if not provider:
            self._replace(None)
            return
        from gateway.observability.tracing.provider import build_tracing, settings_of

        if self.current is not None and self.current.settings == settings_of(options):
            return
        self._replace(build_tracing(options))
        log.info("tracing: {provider} spans of {rate:%} of requests (and of every request "
                 "whose caller sampled it)", provider=provider,
                 rate=sampling(options).rate)

    def counts(self) -> tuple[int, int, int]:
        """Spans exported, failed and dropped since the service started."""
        exported, failed, dropped, _ = self._carried
        if self.current is not None:
            now = self.current.queue.counts()
            return exported + now[0], failed + now[1], dropped + now[2]
        return exported, failed, dropped

    def caller_sampled_refused(self) -> int:
        current = self.current
        return self._carried[3] + (current.tracer.forced_refused if current else 0)

    def _replace(self, tracing: Tracing | None) -> None:
        old, self.current = self.current, tracing
        if old is not None:
            counts = old.queue.counts()
            self._carried = (self._carried[0] + counts[0], self._carried[1] + counts[1],
                             self._carried[2] + counts[2],
                             self._carried[3] + old.tracer.forced_refused)
        self._reported = (0, 0)
        self.on_change(tracing.tracer if tracing is not None else None)
        if old is not None:
            old.stop(0.0)  # its worker sends what it holds, then ends

    def report(self) -> None:
        tracing = self.current
        if tracing is None:
            return
        queue = tracing.queue
        dropped, failed = queue.dropped, queue.failed
        new_dropped, new_failed = dropped - self._reported[0], failed - self._reported[1]
        self._reported = (dropped, failed)
        if new_dropped or new_failed:
            log.warn("tracing: {dropped} spans dropped (export queue full) and {failed} not "
                     "accepted by the collector in the last {interval:g}s: {error}",
                     dropped=new_dropped, failed=new_failed, interval=REPORT_INTERVAL,
                     error=queue.last_error or "-", exported_total=queue.exported)

    def startService(self) -> None:
        Service.startService(self)
        watch_telemetry("spans", self.counts)
        watch_caller_sampled_refused(self.caller_sampled_refused)
        self._configure(self.options)
        if not self._report.running:
            self._report.start(REPORT_INTERVAL, now=False)

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        if self._report.running:
            self._report.stop()
        tracing, self.current = self.current, None
        if tracing is None:
            return succeed(None)
        self.on_change(None)
        d: Deferred[None] = deferToThreadPool(self.reactor, self.reactor.getThreadPool(),
                                              tracing.stop, STOP_WAIT)
        return d
