"""CONNECT tunnels to ``tcp+https`` routes: the upstream TCP connection and its life.

The exchange routes and authorizes a CONNECT like any request; then ``open_tunnel``
picks an upstream host with the route's balancer and connects (503 when refused or
unresolvable, 504 on timeout). Once connected, the codec answers 200 and joins the
client's side to the upstream with a ``Pipe``: bytes the client sent after the CONNECT
head go first, both directions are flow controlled, half-closes pass on, the route
timeout is an idle timeout (0: none). While it is open, the tunnel's request is
authorized again every ``RECHECK`` seconds, so a sign-out anywhere, an expired session
or a policy edit ends it. One access-log line is written when it closes.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol as TwistedProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.authorize.hook import RequestInfo
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.access import Logged, log_access
from gateway.dataplane.exchange.base import Sink, TunnelSink
from gateway.dataplane.exchange.head import ConnectionFacts
from gateway.dataplane.exchange.recheck import Reauthorized
from gateway.dataplane.exchange.stage import CONNECTING, TUNNEL, Stage
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.net.endpoints import client_endpoint, connect_failure
from gateway.tls.client import is_ip_literal
from gateway.twisted_ext.connect import connect_protocol
from gateway.twisted_ext.fastio import direct_writer, write_now

CONNECT_TIMEOUT = 10.0  # when the route has no timeout of its own
_CONNECT_MESSAGES = {
    "timeout": "the TCP service did not accept the connection in time",
    "name resolution failed": "the TCP service's name does not resolve",
    "connection refused or unreachable": "the TCP service is not reachable (connection refused)",
    "TLS or connect error": "the TCP service could not be connected",
}


class Exchange(Logged, Protocol):
    """What a tunnel uses of its exchange (``exchange.Exchange``)."""

    sink: Sink
    facts: ConnectionFacts
    @property
    def tunnel_sink(self) -> TunnelSink | None: ...
    core: ProxyCore
    plan: RoutePlan | None
    host_state: UpstreamHost | None
    connecting: Deferred[Any] | None
    @property
    def method(self) -> bytes: ...
    @property
    def host(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def query(self) -> bytes: ...
    started: float
    keep_alive: bool
    status: int
    sent: int
    detail: str
    trace: Any  # tracer.RequestTrace | None

    @property
    def finished(self) -> bool: ...
    def enter(self, stage: Stage) -> None: ...
    def client_address(self) -> str: ...
    def request_id_bytes(self) -> bytes: ...
    def fail(self, status: int, detail: str) -> None: ...
    def request_info(self, plan: RoutePlan | None = None) -> RequestInfo: ...
    def release_host(self, failed: bool) -> None: ...


@implementer(IHalfCloseableProtocol)
class TunnelUpstream(TwistedProtocol):
    """The upstream end of a tunnel: bytes go to the pipe once there is one."""

    def __init__(self) -> None:
        self.raw: Relay | None = None
        self.early: list[bytes] = []
        self.gone = False

    def dataReceived(self, data: bytes) -> None:
        if self.raw is not None:
            self.raw.from_b(data)
        else:
            self.early.append(data)

    def readConnectionLost(self) -> None:
        if self.raw is not None:
            self.raw.eof_from(self.transport)
        else:
            self.gone = True

    def writeConnectionLost(self) -> None:
        pass  # the pipe closes the connection once both directions have ended

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.gone = True
        if self.raw is not None:
            clean = reason.check(ConnectionDone) is not None
            self.raw.lost("upstream closed" if clean else "upstream connection lost", clean)


class Relay(Protocol):
    """What the tunnel needs of its pipe (``Pipe``, or ``SplicePipe`` in the kernel)."""

    closed: bool

    @property
    def sent_to_a(self) -> int: ...
    @property
    def sent_to_b(self) -> int: ...
    def from_b(self, data: bytes) -> None: ...
    def eof_from(self, side: Any) -> None: ...
    def lost(self, reason: str = ..., clean: bool = ...) -> None: ...
    def abort(self, reason: str) -> None: ...


class Tunnel(Reauthorized):
    """One open tunnel: its exchange, its pipe, and the periodic authorization."""

    exchange: Exchange
    pipe: Relay | None

    def __init__(self, exchange: Exchange, upstream: TunnelUpstream) -> None:
        super().__init__(exchange)
        self.upstream = upstream
        self.early_to_a = 0
        self.early_to_b = 0

    def send_early(self, from_client: bytes) -> None:
        """Before the pipe: the client's bytes that came with the CONNECT head go
        upstream, and what the upstream sent meanwhile (an SSH banner) to the client."""
        if from_client and self.upstream.transport is not None:
            self.early_to_b += len(from_client)
            write(self.upstream.transport, from_client)
        early, self.upstream.early = self.upstream.early, []
        for data in early:
            self.early_to_a += len(data)
            self.exchange.sink.write_body(data)

    def join(self, pipe: Relay) -> None:
        """The codec built the pipe: replay what the upstream sent since; from now on
        the tunnel is authorized again every ``RECHECK`` seconds."""
        self.pipe = pipe
        self.exchange.core.tunnels.add(self)
        self.watch_session()
        self.upstream.raw = pipe
        early, self.upstream.early = self.upstream.early, []
        for data in early:
            pipe.from_b(data)
        if self.upstream.gone:
            pipe.eof_from(self.upstream.transport)

    def closed(self, pipe: Relay, reason: str) -> None:
        exchange = self.exchange
        exchange.core.tunnels.discard(self)
        self.forget_session()
        exchange.sent = pipe.sent_to_a + self.early_to_a
        if not exchange.detail:
            exchange.detail = reason
        exchange.received = pipe.sent_to_b + self.early_to_b
        exchange.release_host(failed=False)
        log_access(exchange, 200)

    # -- authorization while open (``Reauthorized.check``, called by the watchdog)

    def lookup(self) -> RoutePlan | None:
        plan, _ = self.exchange.core.plan.lookup_tcp(self.exchange.host)
        return plan


def write(transport: Any, data: bytes) -> None:
    """At once when the socket takes it (so a splice can start with empty buffers)."""
    if direct_writer(transport):
        write_now(transport, data)
    else:
        transport.write(data)


def open_tunnel(exchange: Exchange) -> None:
    """Connect to an upstream of the exchange's (authorized) tcp+https route; on
    success the codec's ``start_connect`` answers 200 and builds the pipe."""
    plan = exchange.plan
    assert plan is not None
    core = exchange.core
    balancer = plan.balancer
    host = balancer.pick(core.reactor.seconds(), exchange.client_address().encode()
                         if plan.hashed else None) if balancer else None
    if host is None:
        exchange.fail(503, "no healthy upstream")
        return
    exchange.host_state = exchange.upstream_host = host
    host.active += 1
    exchange.enter(CONNECTING)
    up = host.upstream
    timeout = plan.timeout or CONNECT_TIMEOUT
    upstream = TunnelUpstream()
    resolve = core.pool.resolve
    if resolve is not None and not is_ip_literal(up.host):
        d: Deferred[Any] = resolve(up.host, up.port).addCallback(
            lambda ip: connect_protocol(client_endpoint(core.reactor, ip, up.port, timeout),
                                        upstream))
    else:
        d = connect_protocol(client_endpoint(core.reactor, up.host, up.port, timeout), upstream)
    exchange.connecting = d
    d.addCallbacks(lambda _: _connected(exchange, upstream),
                   lambda failure: _connect_failed(exchange, failure))


def _connected(exchange: Exchange, upstream: TunnelUpstream) -> None:
    exchange.connecting = None
    if exchange.finished or upstream.transport is None:
        if upstream.transport is not None:
            upstream.transport.loseConnection()
        return
    transport: Any = upstream.transport
    if hasattr(transport, "setTcpNoDelay"):
        transport.setTcpNoDelay(True)
    tunnel = Tunnel(exchange, upstream)
    exchange.enter(TUNNEL)  # from here on the pipe owns both connections
    exchange.status = 200
    sink = exchange.tunnel_sink
    assert sink is not None  # a CONNECT's sink is its tunnel side (both codecs)
    sink.start_connect(tunnel, transport)
    if tunnel.pipe is None:  # the client's side went away meanwhile: no tunnel
        transport.loseConnection()
        exchange.release_host(failed=False)
        exchange.detail = "the client left before the tunnel opened"
        log_access(exchange, 499)


def _connect_failed(exchange: Exchange, failure: Failure) -> None:
    exchange.connecting = None
    if exchange.finished:
        return
    exchange.release_host(failed=True)
    exchange.detail = failure.getErrorMessage()
    exchange.keep_alive = False
    status, kind = connect_failure(failure)
    exchange.fail(status, _CONNECT_MESSAGES[kind])
