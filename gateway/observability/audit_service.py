"""The audit stream of the running configuration, as a service of the process.

On each configuration it sets ``audit.AUDIT``'s fields and sinks: the log namespace
(``audit_log``), the file (``audit_log_file``; opened again only when the path
changes) and the OTLP log queue (``otel_logs_exporter: otlp``; rebuilt when its
settings change). Every second it checks whether the file's path still names the open
file (logrotate renamed it away: a new one is opened); ``reopen`` does so at once
(SIGHUP, ``tree.SighupService``). Events written between a rename and the reopen land at
the end of the renamed file: none is lost. The OTLP queue's counts are
``gateway_telemetry_*{signal="audit"}``.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from gateway.config import otel
from gateway.config.snapshot import Snapshot
from gateway.observability.audit import AUDIT, AuditFile
from gateway.observability.bounded_queue import BoundedQueue, Tally
from gateway.observability.metrics import watch_telemetry

log = Logger(namespace="gateway.audit.service")
CHECK_INTERVAL = 1.0
STOP_WAIT = 3.0
_OTLP_KEYS = ("otel_logs_exporter", "otel_sdk_disabled", "otel_exporter_otlp_endpoint",
              "otel_exporter_otlp_protocol", "otel_exporter_otlp_headers",
              "otel_exporter_otlp_timeout", "otel_exporter_otlp_certificate",
              "otel_exporter_otlp_client_certificate", "otel_exporter_otlp_client_key",
              "otel_service_name", "otel_resource_attributes", "services")


class AuditService(Service):
    def __init__(self, reactor: Any, snapshot: Snapshot) -> None:
        self.reactor = reactor
        self.snapshot = snapshot
        self.file: AuditFile | None = None
        self.queue: BoundedQueue[Any] | None = None
        self._otlp_settings: tuple[object, ...] = ()
        self._tally = Tally()
        self._check = LoopingCall(self.check)
        self._check.clock = reactor

    def apply(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.running:
            self._configure(snapshot)

    def _configure(self, snapshot: Snapshot) -> None:
        options = snapshot.options
        path = options.audit_log_file
        if self.file is None or self.file.path != path:
            old, self.file = self.file, None
            if path:
                try:
                    self.file = AuditFile(path, self.reactor.callLater)
                except OSError as exc:
                    log.error("audit_log_file {path}: {error}; audit events are not written "
                              "to a file", path=path, error=exc.strerror or str(exc))
            if old is not None:
                old.close()
        settings = tuple(getattr(options, key) for key in _OTLP_KEYS)
        if settings != self._otlp_settings:
            self._otlp_settings = settings
            self._replace_queue(self._build_queue(snapshot) if otel.logs_over_otlp(options)
                                else None)
        AUDIT.configure(options.authorize_log_fields, options.audit_log, self.file,
                        self.queue.put if self.queue is not None else None)

    @staticmethod
    def _build_queue(snapshot: Snapshot) -> BoundedQueue[Any]:
        from opentelemetry.sdk.resources import Resource

        from gateway.observability.audit_otlp import AuditOtlp
        from gateway.observability.otlp_export import log_exporter

        options = snapshot.options
        target = otel.target(options, "logs")
        log.info("audit: events as OTLP log records to {endpoint} ({protocol})",
                 endpoint=target.endpoint, protocol=target.protocol)
        return AuditOtlp(log_exporter(target), Resource(otel.resource_attributes(options)))

    def _replace_queue(self, queue: BoundedQueue[Any] | None) -> None:
        old, self.queue = self.queue, queue
        self._tally.retire(old)

    def counts(self) -> tuple[int, int, int]:
        return self._tally.total(self.queue)

    def check(self) -> None:
        """A new file when the path names another one (renamed away, removed)."""
        file = self.file
        if file is None:
            return
        try:
            if file.reopen():
                log.info("audit_log_file {path} opened again (it was moved)", path=file.path)
        except OSError as exc:
            log.error("audit_log_file {path}: {error}", path=file.path,
                      error=exc.strerror or str(exc))

    def reopen(self) -> None:
        """SIGHUP: open the path again, whatever it names now."""
        file = self.file
        if file is None:
            return
        try:
            file.reopen(force=True)
        except OSError as exc:
            log.error("audit_log_file {path}: {error}", path=file.path,
                      error=exc.strerror or str(exc))

    def startService(self) -> None:
        Service.startService(self)
        watch_telemetry("audit", self.counts)
        self._configure(self.snapshot)
        if not self._check.running:
            self._check.start(CHECK_INTERVAL, now=False)

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        if self._check.running:
            self._check.stop()
        AUDIT.configure((), AUDIT.log, None, None)
        if self.file is not None:
            self.file.close()
            self.file = None
        queue, self.queue = self.queue, None
        self._otlp_settings = ()
        if queue is None:
            return succeed(None)
        d: Deferred[None] = deferToThreadPool(self.reactor, self.reactor.getThreadPool(),
                                              queue.stop, STOP_WAIT)
        return d
