"""The upstream side of an exchange: pick a host, get a pooled connection, relay.

``dispatch`` picks a host with the route's load balancer and takes an idle pooled
connection (or connects one); ``attach`` sends the rewritten request head and whatever
body arrived meanwhile. The response streams back through the ``UpstreamListener``
methods with flow control both ways: the upload pauses the client while the upstream
cannot take more, the response pauses the upstream while the client cannot. A pooled
connection the upstream had just closed is retried once for idempotent requests; 5xx
answers, failures and timeouts count towards the host's outlier ejection.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.exchange.access import log_access
from gateway.dataplane.exchange.base import ExchangeBase, Sink
from gateway.dataplane.exchange.head import (
    BODY_CHUNKED,
    BODY_LENGTH,
    BODY_NONE,
    NO_NAMES,
)
from gateway.dataplane.exchange.mcp_response import listener_for
from gateway.dataplane.exchange.measure import observe_upstream
from gateway.dataplane.exchange.request_head import upstream_request_head
from gateway.dataplane.exchange.stage import CONNECTING, DONE, RESPONDING, TUNNEL, WAITING
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.dataplane.upstream.http1_client import UpstreamConnection, UpstreamListener
from gateway.dataplane.upstream.pool import Pool
from gateway.net.endpoints import connect_failure
from gateway.wire.headers import (
    HOP_BY_HOP,
    NAME_INFO,
    connection_tokens,
    learn_name,
    rewrite_prefix,
)

_IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})
_PENDING_LIMIT = 256 * 1024
_CONNECT_MESSAGES = {"timeout": "upstream connect timeout",
                     "name resolution failed": "upstream name resolution failed",
                     "connection refused or unreachable": "upstream connect error",
                     "TLS or connect error": "upstream TLS or connect error"}


@implementer(IPushProducer)
class _UploadThrottle:
    """Registered on the upstream transport: pauses reading the client's body."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def pauseProducing(self) -> None:
        self.sink.pause_reading("upload")

    def resumeProducing(self) -> None:
        self.sink.resume_reading("upload")

    def stopProducing(self) -> None:
        self.sink.resume_reading("upload")


class UpstreamRelay(ExchangeBase):
    """The forwarding half of ``Exchange``; also its ``UpstreamListener``."""

    __slots__ = ()

    # -- request body (sent on, or held until the upstream connection is there)

    def _send_body(self, data: bytes) -> None:
        self.body_sent = True
        if self.upstream is not None:
            self.upstream.write_body(data)
            return
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size > _PENDING_LIMIT:
            self.sink.pause_reading("connect")

    # -- forwarding

    def dispatch(self) -> None:
        plan = self.plan
        assert plan is not None
        now = self.core.reactor.seconds()
        balancer = plan.balancer
        hash_key = self.client_address().encode() if plan.hashed else None
        host = balancer.pick(now, hash_key) if balancer else None
        if host is None:
            self.fail(503, "no healthy upstream")
            return
        self.host_state = self.upstream_host = host
        self.upstream_started = now
        host.active += 1
        if self.trace is not None:
            self.trace.start_upstream(self)
        # The route timeout runs from the end of the request (as Envoy's does).
        self.deadline = now + plan.response_timeout if self.request_done else 0.0
        self.stage = CONNECTING  # (a plain write: see ``stage.MOVED_BY``)
        if self.expect_continue:
            self.expect_continue = False
            self.sink.send_continue()
        key = Pool.key_for(host, plan.tls)
        conn = self.core.pool.take_idle(key)
        if conn is not None:
            self.reused = True
            self.attach(conn)
            return
        self.reused = False
        d = self.core.pool.connect(key, plan.timeout)
        self.connecting = d
        d.addCallbacks(self.attach, self._connect_failed)

    def attach(self, conn: UpstreamConnection) -> None:
        self.connecting = None
        if self.finished:
            self.core.pool.release(conn)
            return
        self.upstream = conn
        self.stage = WAITING  # (a plain write: see ``stage.MOVED_BY``)
        head = self.head
        listener: UpstreamListener = self
        plan = self.plan
        if plan is not None and plan.mcp is not None:
            listener = listener_for(self)  # an MCP route's response may be filtered
        conn.send(listener, upstream_request_head(self), head.method == b"HEAD",
                  head.framing == BODY_CHUNKED)
        if self.pending:
            for chunk in self.pending:
                conn.write_body(chunk)
            self.pending = []
            self.pending_size = 0
            self.sink.resume_reading("connect")
        if not head.framing:
            return
        if self.request_done:
            conn.end_body()  # the whole body came before the connection
        elif conn.transport is not None:
            conn.transport.registerProducer(_UploadThrottle(self.sink), True)  # type: ignore

    def _connect_failed(self, failure: Failure) -> None:
        self.connecting = None
        if self.finished:
            return
        self.release_host(failed=True)
        status, kind = connect_failure(failure)
        self.fail(status, _CONNECT_MESSAGES[kind])
        self.detail = failure.getErrorMessage()

    # -- response side (UpstreamListener)

    def upstream_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                      keep_alive: bool) -> None:
        if self.finished:
            return
        plan = self.plan
        assert plan is not None
        head = self.head
        if status == 101 and not head.upgrade:
            self._unrequested_switch()
            return
        self.stage = RESPONDING  # (a plain write: see ``stage.MOVED_BY``)
        self.deadline = self.core.reactor.seconds() + plan.response_timeout
        self.status = self.upstream_status = status
        out: list[tuple[bytes, bytes]] = []
        upstream_conn = self.upstream
        named = connection_tokens(upstream_conn.connection_values) \
            if upstream_conn is not None else NO_NAMES
        overridden = plan.response_header_names
        rewrites = plan.response_rewrites
        has_length = False
        upgrading = status == 101
        names = NAME_INFO
        for name, value in headers:
            info = names.get(name)
            low = info[0] if info is not None else learn_name(name)[0]
            if low in HOP_BY_HOP or low in named:
                if upgrading and low in (b"upgrade", b"connection"):
                    out.append((name, value))
                continue
            if low in overridden:
                continue
            if low == b"content-length":
                has_length = True
            if rewrites:
                for header, prefix, replacement in rewrites:
                    if low == header:
                        value = rewrite_prefix(value, prefix, replacement)
            out.append((name, value))
        out.extend(plan.response_headers)
        out.append((b"x-request-id", self.rid or self.request_id_bytes()))
        # a body of unknown length is the sink's to delimit (HTTP/1.1 chunks it)
        framing = BODY_NONE if head.method == b"HEAD" or status in (204, 304) or upgrading \
            else BODY_LENGTH if has_length else BODY_CHUNKED
        close = not self.keep_alive and not upgrading
        # Held until the first body bytes or the end of this read, so head and body
        # usually leave in one send.
        self.head_pending = (status, reason, out, framing, close)
        if upgrading:
            self.flush_head()
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None and not upgrading:
            self.sink.start_response_flow(upstream)

    def client_reads(self) -> None:
        """The client reads the response again after a full buffer paused it: the
        route timeout runs afresh."""
        plan = self.plan
        if plan is not None:
            self.deadline = self.core.reactor.seconds() + plan.response_timeout

    def flush_head(self) -> None:
        """Write a response head still held back (called after each upstream read)."""
        self._send(b"")
        self.sink.flush()

    def _send(self, data: bytes) -> None:
        """``data`` to the client, behind the response head if that is still held back
        (then both leave in one write)."""
        head, self.head_pending = self.head_pending, None
        if head is not None:
            self.sink.write_head(*head, first_body=data)
        elif data:
            self.sink.write_body(data)

    def upstream_body(self, data: bytes) -> None:
        if self.finished or not data:
            return  # (an empty chunk to the client would be the last-chunk)
        self.deadline = self.core.reactor.seconds() + (self.plan.response_timeout
                                                       if self.plan else 30)
        self.sent += len(data)
        self._send(data)

    def upstream_complete(self) -> None:
        if self.finished:
            return
        upstream, self.upstream = self.upstream, None
        self.sink.stop_response_flow()
        if self.trace is not None:
            self.trace.upstream_done(self.status, self.reused)
        if upstream is not None:
            if not self.request_done:
                upstream.reusable = False  # answered before the body was sent
            self.core.pool.release(upstream)
        self.release_host(failed=self.status >= 500)
        self._send(b"")
        # no flush before the end: ``exchange_done`` flushes, so an HTTP/2 response's
        # HEADERS, DATA and END_STREAM leave in one frame sequence, one write
        self.sink.end_body()
        self._finish()

    def upstream_upgraded(self, rest: bytes) -> None:
        upstream, self.upstream = self.upstream, None
        if self.finished or upstream is None or self.plan is None:
            return
        self.release_host(failed=False)
        self.enter(TUNNEL)
        if self.trace is not None:
            self.trace.upstream_done(101, self.reused)
        log_access(self, 101)
        upgrades = self.upgrade_sink
        assert upgrades is not None  # a 101 without an upgrade request was refused
        upgrades.start_tunnel(self, upstream, rest, self.plan.timeout)

    def upstream_failed(self, reason: str, before_response: bool) -> None:
        if self.finished:
            return
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.abort()
        if before_response and self.reused and not self.retried and not self.body_sent \
                and self.head.method in _IDEMPOTENT:
            # A pooled connection the upstream had just closed: try once on a fresh one.
            self.retried = True
            observe_upstream(self)  # the failed attempt counts as an upstream request
            self.release_host(failed=False)
            self.dispatch()
            return
        self.release_host(failed=True)
        self.detail = reason
        self._give_up(502, "upstream connection closed before the response", before_response)

    def timed_out(self) -> None:
        """The route timeout passed while waiting for (more of) the response."""
        if self.finished:
            return
        if self.connecting is not None:
            self.connecting.cancel()  # -> _connect_failed -> 504
            return
        self._drop_upstream(failed=True)
        self.detail = "route timeout"
        self._give_up(504, "upstream request timeout")

    def _drop_upstream(self, failed: bool) -> None:
        """Abort the upstream connection (it is never pooled) and give the host back."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.abort()
        self.release_host(failed=failed)

    def _unrequested_switch(self) -> None:
        """A 101 to a request that asked for no upgrade (or one the route does not allow:
        such requests are refused before they get here). Passing it on would turn the
        client's connection into a raw pipe to this upstream, and the client's next
        requests on it would skip routing and policy: 502, and the upstream dropped."""
        self._drop_upstream(failed=True)
        self.detail = "the upstream switched protocols without an upgrade request"
        self._give_up(502, "invalid response from the upstream")

    def request_timed_out(self) -> None:
        """``timeout_read`` passed between pieces of the request body: the upstream
        request is dropped and the client gets 408 (its response cut off if it began)."""
        if self.finished:
            return
        self.detail = "timeout_read: the request body stopped"
        connecting, self.connecting = self.connecting, None
        self._drop_upstream(failed=False)
        self.internal_body = None
        self._give_up(408, "the request was not received in time")
        if connecting is not None:
            connecting.cancel()  # finished: its errback does nothing more

    def _give_up(self, status: int, message: str, answerable: bool = True) -> None:
        """Answer ``status`` if nothing reached the client yet (a held head is dropped);
        otherwise cut the response off."""
        if self.head_pending is not None:
            self.head_pending = None  # nothing was written yet: answer cleanly instead
            self.status = 0  # (no response was started after all)
            answerable = True
        if answerable and not self.response_started:
            self.fail(status, message)
        else:
            self.enter(DONE)
            self.sink.stop_response_flow()
            self.sink.abort()
            log_access(self, self.status or status)

    def release_host(self, failed: bool) -> None:
        host, self.host_state = self.host_state, None
        if host is None:
            return
        host.active -= 1
        plan = self.plan
        detector = plan.route.outlier_detection if plan is not None else None
        if detector is None:
            return
        if failed:
            host.consecutive_5xx += 1
            if host.consecutive_5xx >= detector.consecutive_5xx:
                _eject(host, plan.hosts if plan else (), detector, self.core.reactor.seconds())
        else:
            host.consecutive_5xx = 0


def _eject(host: UpstreamHost, hosts: tuple[UpstreamHost, ...], detector: Any,
           now: float) -> None:
    """Outlier detection: eject a host after ``consecutive_5xx`` failures in a row,
    for ``base_ejection_time`` times the ejections so far, within ``max_ejection_percent``."""
    if host.ejected_until > now:
        return
    ejected = sum(1 for h in hosts if h.ejected_until > now)
    if hosts and (ejected + 1) * 100 > detector.max_ejection_percent * len(hosts) \
            and ejected > 0:
        return
    host.ejections += 1
    host.ejected_until = now + detector.base_ejection_time * host.ejections
    host.consecutive_5xx = 0
