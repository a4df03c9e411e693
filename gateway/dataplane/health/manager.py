"""Active health checks: probe every upstream host of routes with ``health_checks`` and
take hosts out of load balancing (``UpstreamHost.healthy``) while they fail.

A ``HealthChecker`` runs one check against one host every ``interval`` and flips its
verdict after ``unhealthy_threshold`` failures / ``healthy_threshold`` successes in a
row. A ``HealthManager`` keeps one checker per (host, check, TLS settings) of the
current plan; a host is healthy when every check on it is. The probes themselves are in
``gateway.dataplane.health.probes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.config.upstreams import HealthCheck
from gateway.dataplane.health.probes import PROBES, Probe, probe_grpc, probe_http, probe_tcp
from gateway.dataplane.routing.plan import Plan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.tls.client import TLSClientConfig

__all__ = ["PROBES", "HealthChecker", "HealthManager", "Probe", "probe_grpc", "probe_http",
           "probe_tcp"]

log = Logger()

#: Shortest probe interval: a zero interval would probe on every reactor turn.
MIN_INTERVAL = 0.05
#: Extra time a probe gets beyond its own timeout before the checker gives up on it.
GRACE = 1.0

CheckerKey = tuple[int, HealthCheck, TLSClientConfig | None]


class HealthChecker:
    """Probes one host with one check on ``reactor`` (the clock too); ``start``/``stop``.

    ``probe`` replaces the probe of ``check.kind`` (tests use a fake). ``on_change`` is
    told when the verdict flips; without it the checker sets ``host.healthy`` itself.
    """

    def __init__(self, reactor: Any, host: UpstreamHost, check: HealthCheck,
                 tls: TLSClientConfig | None = None, *, route: str = "",
                 probe: Probe | None = None,
                 on_change: Callable[[HealthChecker], None] | None = None) -> None:
        self.reactor = reactor
        self.host = host
        self.check = check
        self.tls = tls
        self.route = route
        self.probe = probe if probe is not None else PROBES[check.kind]
        self.healthy = True
        self.successes = 0
        self.failures = 0
        self._on_change = on_change
        self._pending: Deferred[None] | None = None
        self._loop = LoopingCall(self._run)
        self._loop.clock = reactor

    @property
    def running(self) -> bool:
        return self._loop.running

    def start(self) -> None:
        """First probe now, then one every ``interval``."""
        if self._loop.running:
            return
        done = self._loop.start(max(self.check.interval, MIN_INTERVAL), now=True)
        done.addErrback(lambda f: log.failure("health check loop stopped", f,
                                              host=self.host.address, route=self.route))

    def stop(self) -> None:
        """No more probes; a probe in flight is aborted and its result ignored."""
        if self._loop.running:
            self._loop.stop()
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()

    def _run(self) -> Deferred[None]:
        probe: Deferred[bool] = maybeDeferred(
            self.probe, self.reactor, self.host, self.check, self.tls
        )
        probe.addTimeout(self.check.timeout + GRACE, self.reactor)
        done = probe.addCallbacks(self._record, self._probe_failed)
        done.addErrback(  # a failing subscriber must not end the loop either
            lambda f: log.failure("health check bookkeeping failed", f, host=self.host.address,
                                  route=self.route, kind=self.check.kind))
        self._pending = done
        done.addBoth(self._settled)
        return done

    def _settled(self, _: object) -> None:
        self._pending = None

    def _probe_failed(self, failure: Failure) -> None:
        if not self._loop.running or failure.check(CancelledError):
            return  # stopped meanwhile
        log.failure("health check probe of {host} failed", failure, host=self.host.address,
                    route=self.route, kind=self.check.kind)
        self._record(False)

    def _record(self, healthy: object) -> None:
        if not self._loop.running:
            return
        if healthy is True:
            self.successes, self.failures = self.successes + 1, 0
            if not self.healthy and self.successes >= self.check.healthy_threshold:
                self._flip(True)
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.healthy and self.failures >= self.check.unhealthy_threshold:
                self._flip(False)

    def _flip(self, healthy: bool) -> None:
        self.healthy = healthy
        emit = log.info if healthy else log.warn
        emit(
            "upstream {host} of route {route} is {state} ({kind} health check)",
            host=self.host.address, route=self.route, kind=self.check.kind, healthy=healthy,
            state="healthy" if healthy else "unhealthy",
            in_a_row=self.successes if healthy else self.failures,
        )
        if self._on_change is not None:
            self._on_change(self)
        else:
            self.host.healthy = healthy


class HealthManager:
    """One checker per (host, check, route TLS settings) of the current plan."""

    def __init__(self, reactor: Any, *, probe: Probe | None = None) -> None:
        self.reactor = reactor
        self._probe = probe
        self._checkers: dict[CheckerKey, HealthChecker] = {}
        self._by_host: dict[int, dict[CheckerKey, HealthChecker]] = {}

    @property
    def checkers(self) -> tuple[HealthChecker, ...]:
        return tuple(self._checkers.values())

    def update(self, plan: Plan) -> None:
        """Start checkers the plan needs, stop those it no longer does. Host objects
        reused by the plan keep their checkers (and verdicts)."""
        wanted: dict[CheckerKey, tuple[UpstreamHost, HealthCheck, TLSClientConfig | None,
                                        str]] = {}
        hosts: dict[int, UpstreamHost] = {}
        for route_plan in plan.routes:
            route = route_plan.route
            label = route.name or str(route.index)
            for host in route_plan.hosts:
                hosts[id(host)] = host
                for check in route.health_checks:
                    key = (id(host), check, route_plan.tls)
                    wanted.setdefault(key, (host, check, route_plan.tls, label))
        for key in [k for k in self._checkers if k not in wanted]:
            self._remove(key).stop()
        started = []
        for key, (host, check, tls, label) in wanted.items():
            if key not in self._checkers:
                checker = HealthChecker(self.reactor, host, check, tls, route=label,
                                        probe=self._probe, on_change=self._changed)
                self._checkers[key] = checker
                self._by_host.setdefault(id(host), {})[key] = checker
                started.append(checker)
        for host in hosts.values():
            self._apply(host)  # e.g. a host whose only failing check was removed
        for checker in started:
            checker.start()

    def stop(self) -> None:
        for key in list(self._checkers):
            self._remove(key).stop()

    def _remove(self, key: CheckerKey) -> HealthChecker:
        checker = self._checkers.pop(key)
        of_host = self._by_host.get(key[0], {})
        of_host.pop(key, None)
        if not of_host:
            self._by_host.pop(key[0], None)
        return checker

    def _changed(self, checker: HealthChecker) -> None:
        self._apply(checker.host)

    def _apply(self, host: UpstreamHost) -> None:
        host.healthy = all(c.healthy for c in self._by_host.get(id(host), {}).values())
