"""Per-listener state shared by all connections: the current plan, the upstream pool,
the authorization hook, timeouts, and a watchdog that enforces them.

Timeouts are enforced lazily: requests only record timestamps, and one periodic check
per listener compares them with the deadlines (cheap per request, bounded per second).

Before its first request a connection has a setup deadline, ``timeout_handshake``: the
PROXY header (with ``use_proxy_protocol``) and the TLS handshake must be complete within
min(``timeout_read``, ``HANDSHAKE_LIMIT``) of the accept, or the connection is aborted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.authorize.hook import Authorizer, NoSignInApp, NotYetAuthorizer, SignInApp
from gateway.dataplane.limit import ConnectionLimit, auto_max_connections
from gateway.dataplane.penalty import Penalties
from gateway.dataplane.routing.plan import Plan
from gateway.dataplane.upstream.pool import Pool
from gateway.net.endpoints import family_resolver
from gateway.sessions.live import NoSessionWatch, SessionWatch

if TYPE_CHECKING:
    from gateway.observability.tracing.tracer import Tracer

log = Logger()
HANDSHAKE_LIMIT = 10.0  # seconds, at most, for the PROXY header and the TLS handshake


def handshake_timeout(timeout_read: float) -> float:
    """The setup deadline: ``timeout_read`` when it is shorter than ``HANDSHAKE_LIMIT``
    (a handshake is a few round trips; nothing needs more), the limit otherwise."""
    return min(timeout_read, HANDSHAKE_LIMIT) if timeout_read > 0 else HANDSHAKE_LIMIT


class Watched(Protocol):
    """An open client connection (a codec, or the switch before its first byte)."""

    transport: Any

    def check_deadlines(self, now: float) -> None: ...

    def drain(self) -> None: ...  # the gateway is stopping (services.drain)


class Checked(Protocol):
    """An open CONNECT tunnel, authorized again now and then."""

    def check(self, now: float) -> None: ...


class ProxyCore:
    """What every downstream connection of one listener shares."""

    def __init__(self, reactor: Any, plan: Plan, *, tls: bool,
                 authorizer: Authorizer | None = None, sign_in_app: SignInApp | None = None,
                 watchdog_interval: float = 0.25) -> None:
        self.reactor = reactor
        self.plan = plan
        self.scheme = "https" if tls else "http"
        self.scheme_bytes = self.scheme.encode()
        self.authorizer: Authorizer = authorizer or NotYetAuthorizer()
        self.sign_in_app: SignInApp = sign_in_app or NoSignInApp()
        self.tracer: Tracer | None = None  # set by the proxy service while tracing is on
        self.pool = Pool(reactor)
        self.connections: set[Watched] = set()
        self.tunnels: set[Checked] = set()
        # closes a tunnel or upgraded connection when its session ends, without waiting
        # for its next check (the identity holder's, set by ``gateway.tree``)
        self.live: SessionWatch = NoSessionWatch()
        self.limit = ConnectionLimit(0, [self.connections])
        self.penalties = Penalties()  # addresses whose HTTP/2 connections keep being cut
        self.draining = False  # the gateway is stopping: /ping answers 503 (services.drain)
        self._watchdog = LoopingCall(self._check_all)
        self._watchdog.clock = reactor
        self._watchdog_interval = watchdog_interval
        self.apply_options()

    def apply_options(self) -> None:
        o = self.plan.snapshot.options
        self.timeout_read = o.timeout_read
        self.timeout_write = o.timeout_write
        self.timeout_idle = o.timeout_idle
        self.timeout_handshake = handshake_timeout(o.timeout_read)
        self.limit.maximum = o.max_connections or auto_max_connections()
        # idle upstream connections hold descriptors too: at most half the cap's worth
        self.pool.max_idle_total = max(1, self.limit.maximum // 2)
        self.skip_xff_append = o.skip_xff_append
        self.cookie_name = o.cookie_name
        self.underscores_drop = o.headers_with_underscores_action == "drop"
        self.underscores_reject = o.headers_with_underscores_action == "reject"
        self.reject_parameters = o.path_with_parameters_action == "reject"
        self.xff_trusted_hops = o.xff_num_trusted_hops
        self.pool.resolve = family_resolver(self.reactor, o.dns_lookup_family)

    def set_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.apply_options()

    def start(self) -> None:
        self.pool.start()
        if not self._watchdog.running:
            self._watchdog.start(self._watchdog_interval, now=False)

    def stop(self) -> None:
        if self._watchdog.running:
            self._watchdog.stop()
        self.pool.stop()

    def _check_all(self) -> None:
        """One pass over every connection and tunnel. One failing check is logged and
        the others still run: an exception escaping here would stop the LoopingCall,
        and with it every timeout and tunnel re-authorization of the listener."""
        now = self.reactor.seconds()
        self.limit.poll(now)
        for conn in list(self.connections):
            try:
                conn.check_deadlines(now)
            except Exception:
                log.failure("deadline check failed for a connection")
        for tunnel in list(self.tunnels):
            try:
                tunnel.check(now)
            except Exception:
                log.failure("re-authorization failed for a tunnel")
