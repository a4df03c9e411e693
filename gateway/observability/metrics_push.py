"""Metrics over OTLP (``otel_metrics_exporter: otlp``): every
``otel_metric_export_interval`` the reactor collects the Prometheus registry (what a
scrape would read) and hands the families to a thread, which converts them
(``metrics_otlp``) and exports them. A collector that is down or slow costs the
reactor nothing: at most ``MAX_PENDING`` collections wait, older ones are dropped
(``gateway_telemetry_dropped_total{signal="metrics"}``). Each process pushes its own
counts; ``service.instance.id`` (host and process id, unless the resource attributes
name one) tells workers apart.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from gateway.config import otel
from gateway.config.snapshot import Snapshot
from gateway.observability.bounded_queue import BoundedQueue, Tally
from gateway.observability.metrics import REGISTRY, watch_telemetry
from gateway.observability.request_metrics import REQUESTS

log = Logger(namespace="gateway.metrics.otlp")
MAX_PENDING = 4
STOP_WAIT = 3.0
_KEYS = ("otel_metrics_exporter", "otel_metric_export_interval", "otel_sdk_disabled",
         "otel_exporter_otlp_endpoint", "otel_exporter_otlp_protocol",
         "otel_exporter_otlp_headers", "otel_exporter_otlp_timeout",
         "otel_exporter_otlp_certificate", "otel_exporter_otlp_client_certificate",
         "otel_exporter_otlp_client_key", "otel_service_name", "otel_resource_attributes",
         "services")
_STARTED = time.time_ns()

Collected = tuple[int, list[Any]]  # (time in ns, the families)


class MetricsExport(BoundedQueue[Collected]):
    thread_name = "gateway-metrics-export"

    def __init__(self, exporter: Any, resource: Any) -> None:
        self.exporter = exporter
        self.resource = resource
        # one collection a batch: each is a whole picture of the registry
        BoundedQueue.__init__(self, max_queue=MAX_PENDING, max_batch=1, delay=0.5)

    def send(self, batch: Sequence[Collected]) -> bool:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        from gateway.observability.metrics_otlp import metrics_data

        now, families = batch[-1]
        result = self.exporter.export(metrics_data(families, self.resource, _STARTED, now))
        if result is MetricExportResult.SUCCESS:
            return True
        self.last_error = "export refused"
        return False

    def close(self) -> None:
        self.exporter.shutdown()


def resource_attributes(snapshot: Snapshot) -> dict[str, str]:
    attributes = otel.resource_attributes(snapshot.options)
    attributes.setdefault("service.instance.id", f"{socket.gethostname()}:{os.getpid()}")
    return attributes


class MetricsPushService(Service):
    def __init__(self, reactor: Any, snapshot: Snapshot) -> None:
        self.reactor = reactor
        self.snapshot = snapshot
        self.export: MetricsExport | None = None
        self._settings: tuple[object, ...] = ()
        self._tally = Tally()
        self._push = LoopingCall(self.push)
        self._push.clock = reactor

    def apply(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.running:
            self._configure(snapshot)

    def _configure(self, snapshot: Snapshot) -> None:
        options = snapshot.options
        settings = tuple(getattr(options, key) for key in _KEYS)
        if settings == self._settings:
            return
        self._settings = settings
        if self._push.running:
            self._push.stop()
        self._replace(None)
        if not otel.metrics_over_otlp(options):
            return
        if options.runs("proxy") or options.services == "authenticate":
            REQUESTS.enable(options.service_label)  # (as services.metrics_endpoint.count_requests)
        from opentelemetry.sdk.resources import Resource

        from gateway.observability.otlp_export import metric_exporter

        target = otel.target(options, "metrics")
        self._replace(MetricsExport(metric_exporter(target),
                                    Resource(resource_attributes(snapshot))))
        interval = options.otel_metric_export_interval / 1000.0
        self._push.start(interval, now=False)
        log.info("metrics: pushed over OTLP to {endpoint} ({protocol}) every {interval:g}s",
                 endpoint=target.endpoint, protocol=target.protocol, interval=interval)

    def _replace(self, export: MetricsExport | None) -> None:
        old, self.export = self.export, export
        self._tally.retire(old)

    def counts(self) -> tuple[int, int, int]:
        """Collections exported, failed and dropped since the service started."""
        return self._tally.total(self.export)

    def push(self) -> None:
        export = self.export
        if export is None:
            return
        from gateway.observability.metrics_otlp import collect

        export.put((time.time_ns(), collect(REGISTRY)))

    def startService(self) -> None:
        Service.startService(self)
        watch_telemetry("metrics", self.counts)
        self._configure(self.snapshot)

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        if self._push.running:
            self._push.stop()
        export, self.export = self.export, None
        self._settings = ()
        if export is None:
            return succeed(None)
        self.push_final(export)
        d: Deferred[None] = deferToThreadPool(self.reactor, self.reactor.getThreadPool(),
                                              export.stop, STOP_WAIT)
        return d

    @staticmethod
    def push_final(export: MetricsExport) -> None:
        """The last counts go too (a short-lived process is not left unreported)."""
        from gateway.observability.metrics_otlp import collect

        export.put((time.time_ns(), collect(REGISTRY)))
