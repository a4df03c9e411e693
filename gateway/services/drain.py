"""A graceful stop: on SIGTERM the gateway drains before its services stop.

What operators of Envoy (drain), nginx (graceful quit) and HAProxy (soft-stop) expect,
and what systemd's stop, a container runtime's stop and a Kubernetes rolling update
assume (SIGTERM, then SIGKILL after a grace period):

1. at once: every listener stops accepting (HTTP, the redirect listener, native SSH;
   the metrics endpoint stays until the end), ``/ping`` answers 503, systemd hears
   ``STOPPING=1``;
2. idle connections close at once; a connection with a request in flight finishes it
   and closes (HTTP/1.1 ``connection: close``, HTTP/2 GOAWAY NO_ERROR naming the last
   stream taken): each codec's ``drain``, called again at every poll, closes its
   connection once nothing is left in flight;
3. long-lived connections (tunnels, websockets, SSH sessions) are kept until
   ``shutdown_drain_timeout``, then closed with everything else still open (SSH with a
   disconnect message saying why);
4. then the services stop as before (session writes in flight are saved first).

A second SIGTERM or SIGINT during the drain cuts what is left and goes on with the
stop at once. ``shutdown_drain_timeout: 0`` skips the drain (the stop of old: every
connection cut). The parts drained (``Drainable``) are the proxy service and the SSH
server, which know their listeners and connections; this module only sequences them,
counts, logs and keeps time.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from prometheus_client import Gauge
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.observability.metrics import REGISTRY
from gateway.twisted_ext.exit_status import orderly_sigterm_exit

log = Logger(namespace="gateway")

# How often open connections are asked again whether they are done: the drain ends at
# most this long after its last connection did.
POLL_INTERVAL = 0.05
SHUTTING_DOWN = "the gateway is shutting down"

DRAINING = Gauge(
    "gateway_drain_open_connections", "Connections still open while this process drains "
    "before it stops (shutdown_drain_timeout); 0 when not draining.", registry=REGISTRY)


class Drainable(Protocol):
    """A part of the process that holds listeners and client connections."""

    def drain_begin(self) -> None:
        """Stop accepting, and ask every connection to wind down."""

    def drain_poll(self) -> int:
        """Ask the connections again (an idle one closes); how many are still open."""

    def drain_cut(self, reason: str) -> int:
        """Close every connection still open; how many there were."""


@dataclass(frozen=True)
class DrainResult:
    started: int  # connections open when the drain began
    cut: int  # closed by the timeout or a second signal
    seconds: float
    why: str  # "done", "timeout", "signal"

    @property
    def finished(self) -> int:
        return max(0, self.started - self.cut)


class Drain:
    """Sequences one drain of ``parts`` within ``timeout()`` seconds (read when the
    drain begins, so a reload before the stop counts). ``on_begin`` callables run first
    (readiness: systemd's ``STOPPING=1``)."""

    def __init__(self, reactor: Any, timeout: Callable[[], float],
                 parts: Sequence[Drainable] = (), *,
                 on_begin: Sequence[Callable[[], None]] = (),
                 signals: bool = True) -> None:
        self.reactor = reactor
        self.timeout = timeout
        self.parts = list(parts)
        self.on_begin = list(on_begin)
        self.signals = signals  # False in unit tests: no process-wide handlers
        self.result: DrainResult | None = None
        self.draining = False
        self._waiters: list[Deferred[DrainResult | None]] = []
        self._started_at = 0.0
        self._count = 0
        self._poll: LoopingCall | None = None
        self._deadline: Any = None
        self._previous: dict[int, Any] = {}

    def run(self) -> Deferred[DrainResult | None]:
        """Drain; fires once every connection has closed, or was cut. None (at once)
        when the timeout is 0."""
        if self.draining or self.result is not None:  # (a second stop)
            waiter: Deferred[DrainResult | None] = Deferred()
            if self.result is not None:
                waiter.callback(self.result)
            else:
                self._waiters.append(waiter)
            return waiter
        timeout = self.timeout()
        if timeout <= 0:
            return succeed(None)
        self.draining = True
        self._started_at = self.reactor.seconds()
        for call in self.on_begin:
            call()
        for part in self.parts:
            part.drain_begin()
        self._count = self._open()
        DRAINING.set(self._count)
        log.info("draining: {connections} connection(s) open, closed in at most "
                 "{timeout:g} s (shutdown_drain_timeout); new connections refused",
                 connections=self._count, timeout=timeout)
        if self.signals:
            self._install_signals()
        self._deadline = self.reactor.callLater(timeout, self._finish, "timeout")
        self._poll = LoopingCall(self._check)
        self._poll.clock = self.reactor
        first: Deferred[DrainResult | None] = Deferred()
        self._waiters.append(first)
        self._poll.start(POLL_INTERVAL, now=True)  # (may finish the drain at once)
        return first

    def _open(self) -> int:
        return sum(part.drain_poll() for part in self.parts)

    def _check(self) -> None:
        left = self._open()
        DRAINING.set(left)
        if not left:
            self._finish("done")

    def cut_now(self) -> None:
        """A second SIGTERM or SIGINT: cut what is left, stop now."""
        if self.draining:
            log.info("draining: second stop signal, closing every connection now")
            self._finish("signal")

    def _finish(self, why: str) -> None:
        if not self.draining:
            return
        self.draining = False
        if self._poll is not None and self._poll.running:
            self._poll.stop()
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        cut = 0
        if why != "done":
            cut = sum(part.drain_cut(SHUTTING_DOWN) for part in self.parts)
        self._restore_signals()
        DRAINING.set(0)
        seconds = self.reactor.seconds() - self._started_at
        result = self.result = DrainResult(self._count, min(cut, self._count), seconds,
                                           why)
        log.info("drained in {seconds:.3f} s: {finished} connection(s) finished, {cut} "
                 "cut ({ended_by})", seconds=seconds, finished=result.finished, cut=cut,
                 ended_by=why, started=self._count)
        if why == "done":
            self._release(result)
        else:
            # The aborted connections are lost (``connectionLost``) in the reactor's next
            # turn: only then do their exchanges know the client is gone. Stopped
            # before, the services would end those exchanges' upstream requests and
            # answer 502 into a cut connection (what is aborted here may still be
            # written to directly: ``twisted_ext.fastio``).
            self.reactor.callLater(0, self._release, result)

    def _release(self, result: DrainResult) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(result)

    # -- a second signal
    def _install_signals(self) -> None:
        for number in (signal.SIGTERM, signal.SIGINT):
            self._previous[number] = signal.signal(number, self._signalled)

    def _restore_signals(self) -> None:
        previous, self._previous = self._previous, {}
        for number, handler in previous.items():
            signal.signal(number, handler)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        self.reactor.callFromThread(self.cut_now)


class DrainingRoot(MultiService):
    """The root of a process's service tree: its stop drains first (``drain``), then
    stops the services as a ``MultiService`` does (they run until then: the identity,
    the databroker and the audit stream serve the requests finishing). A stop asked
    by SIGTERM that went in order then exits 0 (``twisted_ext.exit_status``)."""

    def __init__(self, reactor: Any) -> None:
        MultiService.__init__(self)
        self.reactor = reactor
        self.drain: Drain | None = None

    def stopService(self) -> Deferred[None]:
        drained: Deferred[Any] = self.drain.run() if self.drain is not None \
            else succeed(None)
        stopped: Deferred[None] = drained.addCallback(
            lambda _: MultiService.stopService(self))
        stopped.addCallback(self._stopped)
        return stopped

    def _stopped(self, result: object) -> None:
        orderly_sigterm_exit(self.reactor)
