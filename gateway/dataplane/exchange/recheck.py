"""Authorization again, every ``RECHECK`` seconds, of a connection that became a pipe.

A CONNECT tunnel (``tunnel.Tunnel``) and an upgraded connection (websocket or SPDY,
``UpgradeWatch``) outlive the request that was authorized: without a check they would
stay open after a sign-out anywhere, an expired session, a revoked client certificate or
a policy edit. The core's watchdog calls ``check``; a denial, a removed route, a failure
of the check itself (fail closed) ends the pipe. A denial is an audit event
(``access.audit_revoked``); the checks that allow are not. The end of the session its
request named does not wait for the next check: the pipe is watched in this process's
registry of live connections (``core.live``, ``gateway.sessions.live``), which the
databroker's change stream tells at once.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.authorize.hook import Reply, RequestInfo
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.access import Logged, access_log, audit_revoked
from gateway.dataplane.exchange.head import ConnectionFacts
from gateway.dataplane.routing.plan import RoutePlan
from gateway.sessions.live import Unwatch

RECHECK = 1.0  # seconds between authorizations of an open pipe


class Watched(Protocol):
    """What a re-authorized pipe uses of its exchange."""

    core: ProxyCore
    detail: str
    facts: ConnectionFacts

    @property
    def host(self) -> str: ...
    @property
    def path(self) -> str: ...
    def request_info(self, plan: RoutePlan | None = None) -> RequestInfo: ...


class Ending(Protocol):
    closed: bool

    def abort(self, reason: str) -> None: ...


class Reauthorized:
    """The periodic check; subclasses say how their route is found again."""

    def __init__(self, exchange: Watched) -> None:
        self.exchange = exchange
        self.pipe: Ending | None = None
        self.next_check = exchange.core.reactor.seconds() + RECHECK
        self.checking = False
        self.unwatch: Unwatch | None = None

    def lookup(self) -> RoutePlan | None:
        """The route that admits the connection under the current configuration."""
        raise NotImplementedError

    def still_allowed(self, plan: RoutePlan) -> str:
        """Why the route no longer admits this kind of connection ("" if it does)."""
        return ""

    def check(self, now: float) -> None:
        if self.checking or now < self.next_check or self.pipe is None or self.pipe.closed:
            return
        self.next_check = now + RECHECK
        try:
            self._check()
        except Exception:
            access_log.failure("re-authorization failed; closing the connection")
            self.end("authorization check failed")

    def _check(self) -> None:
        exchange = self.exchange
        plan = self.lookup()
        if plan is None:
            self.end("the route was removed")
            return
        refused = self.still_allowed(plan)
        if refused:
            self.end(refused)
            return
        if plan.client_cert is not None and \
                exchange.facts.client_cert_problem(plan.client_cert) is not None:
            self.end("the client certificate is no longer accepted")
            return
        if plan.public:
            return
        decision = exchange.core.authorizer.authorize(exchange.request_info(plan), plan.route)
        if isinstance(decision, Deferred):
            self.checking = True
            decision.addCallbacks(self._decided, self._failed)
        else:
            self._decided(decision)

    def _decided(self, decision: object) -> None:
        self.checking = False
        if isinstance(decision, Reply):
            if self.pipe is not None and not self.pipe.closed:
                audit_revoked(cast(Logged, self.exchange), decision)  # (an ExchangeBase)
            self.end(f"no longer allowed ({decision.reason or decision.status})")

    def _failed(self, failure: Failure) -> None:
        self.checking = False
        access_log.failure("re-authorization failed; closing the connection", failure)
        self.end("authorization check failed")

    def watch_session(self) -> None:
        """Closed at once when the session its request named ends (a route that is
        public asks no session, and is not watched)."""
        plan = self.lookup()
        if plan is not None and not plan.public:
            self.unwatch = self.exchange.core.live.watch(
                self.exchange.request_info(plan).headers, self.session_ended)

    def forget_session(self) -> None:
        if self.unwatch is not None:
            self.unwatch()
            self.unwatch = None

    def session_ended(self, reason: str) -> None:
        self.unwatch = None  # (the registry forgets what it ends)
        if self.pipe is not None and not self.pipe.closed:
            audit_revoked(cast(Logged, self.exchange),
                          Reply(401, b"", reason="session-ended"))
        self.end(reason)

    def end(self, reason: str) -> None:
        if self.pipe is not None and not self.pipe.closed:
            self.exchange.detail = reason
            self.pipe.abort(reason)


class UpgradeWatch(Reauthorized):
    """A websocket or SPDY connection: its route found again by host and path, and it
    ends when that route no longer allows its upgrade."""

    def __init__(self, exchange: Watched, upgrade: bytes) -> None:
        super().__init__(exchange)
        self.upgrade = upgrade.lower()

    def lookup(self) -> RoutePlan | None:
        plan, _ = self.exchange.core.plan.lookup(self.exchange.host, self.exchange.path)
        return plan

    def still_allowed(self, plan: RoutePlan) -> str:
        route = plan.route
        allowed = route.allow_websockets if self.upgrade == b"websocket" else \
            route.allow_spdy if self.upgrade.startswith(b"spdy/") else False
        return "" if allowed else f"the route no longer allows {self.upgrade.decode()} upgrades"

    def start(self, pipe: Ending) -> None:
        self.pipe = pipe
        self.exchange.core.tunnels.add(self)
        self.watch_session()

    def closed(self, pipe: Any, reason: str) -> None:
        self.exchange.core.tunnels.discard(self)
        self.forget_session()
