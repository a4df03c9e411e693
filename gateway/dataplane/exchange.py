"""One request/response through the proxy, independent of the downstream codec.

The codec (HTTP/1.1 here; HTTP/2 shares this) fills in the request fields, calls
``begin`` when it may be served, feeds the body with ``request_body`` /
``request_complete``, and implements ``Sink`` for the response. The exchange routes,
asks the authorization hook, picks an upstream, streams both ways with flow control,
and writes the answers the gateway gives itself.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import (
    ConnectError,
    ConnectingCancelledError,
    DNSLookupError,
    TimeoutError,
)
from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.dataplane.authz import Allow, Deny, RequestInfo
from gateway.dataplane.core import ProxyCore, access_log
from gateway.dataplane.headers import (
    HOP_BY_HOP,
    IDENTITY_PREFIX,
    connection_tokens,
    forwarded_for,
)
from gateway.dataplane.hosts import UpstreamHost
from gateway.dataplane.plan import RoutePlan
from gateway.dataplane.redirect import redirect_location
from gateway.dataplane.responses import error_page
from gateway.dataplane.router import upstream_path
from gateway.dataplane.upstream import Pool, UpstreamConnection
from gateway.sessions.cookie import strip_cookie

if TYPE_CHECKING:
    from gateway.dataplane.plan import Pairs

BODY_NONE, BODY_LENGTH, BODY_CHUNKED = 0, 1, 2
ROBOTS = b"User-agent: *\nDisallow: /"
_IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE", b"PUT", b"DELETE"})
_PENDING_LIMIT = 256 * 1024
_PLAIN = ((b"content-type", b"text/plain; charset=utf-8"),)


class Sink(Protocol):
    """The downstream side of one exchange (implemented by each codec)."""

    client_ip: str
    chunked_framing: bool  # HTTP/1.1 frames unknown-length bodies itself; HTTP/2 does not
    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   body: bool, close: bool, first_body: bytes = b"") -> None: ...
    def write_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...
    def flush(self) -> None: ...
    def tls_info(self) -> tuple[str, Any, Any]: ...
    def client_cert_problem(self, policy: Any) -> str | None: ...
    def exchange_done(self, exchange: Exchange) -> None: ...
    def abort(self) -> None: ...
    def pause_reading(self, reason: str) -> None: ...
    def resume_reading(self, reason: str) -> None: ...
    def send_continue(self) -> None: ...
    def start_response_flow(self, producer: Any) -> None: ...
    def stop_response_flow(self) -> None: ...
    def start_tunnel(self, exchange: Exchange, upstream: UpstreamConnection,
                     rest: bytes, idle_timeout: float) -> None: ...


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


class Exchange:
    """Request fields are set by the codec before ``begin``."""

    def __init__(self, sink: Sink, core: ProxyCore) -> None:
        self.sink = sink
        self.core = core
        self.started = core.reactor.seconds()
        self.method = b""
        self.target = b""
        self.path = "/"
        self.query = b""
        self.host = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True
        self.upgrade = b""
        self.connection_tokens: frozenset[bytes] = frozenset()
        self.expect_continue = False
        self.body_kind = BODY_NONE
        self.ready = False
        self.request_done = False
        self.finished = False
        self.plan: RoutePlan | None = None
        self.host_state: UpstreamHost | None = None
        self.upstream: UpstreamConnection | None = None
        self.connecting: Deferred[UpstreamConnection] | None = None
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.allow: Allow | None = None
        self.deadline = 0.0
        self.waiting_upstream = False
        self.response_started = False
        self.head_pending: tuple[int, bytes, list[tuple[bytes, bytes]], bool, bool] | None = None
        self.chunked_out = False
        self.status = 0
        self.sent = 0
        self.reused = False
        self.retried = False
        self.body_sent = False
        self.detail = ""
        self.internal_body: bytearray | None = None

    # -- request side (codec calls)

    def request_body(self, data: bytes) -> None:
        if self.finished:
            return
        if self.internal_body is not None:
            if len(self.internal_body) + len(data) > 16384:
                self.internal_body = None
                self.keep_alive = False
                self.fail(413, "request body too large")
                return
            self.internal_body += data
            return
        if self.body_kind == BODY_CHUNKED:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self._send_body(data)

    def request_complete(self) -> None:
        self.request_done = True
        if self.finished:
            return
        if self.internal_body is not None:
            body, self.internal_body = bytes(self.internal_body), None
            if not self._internal(body):
                self.fail(404, "not found")
            return
        if self.waiting_upstream and self.plan is not None:
            self.deadline = self.core.reactor.seconds() + self.plan.timeout
        if self.body_kind == BODY_CHUNKED:
            self._send_body(b"0\r\n\r\n")
        upstream = self.upstream
        if upstream is not None and self.body_kind and upstream.transport is not None:
            upstream.transport.unregisterProducer()  # type: ignore[attr-defined]
            self.sink.resume_reading("upload")

    def _send_body(self, data: bytes) -> None:
        self.body_sent = True
        if self.upstream is not None:
            self.upstream.write(data)
            return
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size > _PENDING_LIMIT:
            self.sink.pause_reading("connect")

    def abandon(self, detail: str) -> None:
        """The gateway gives up on the client (e.g. ``timeout_write``): log what was
        sent and why, then drop the upstream side; the caller closes the connection."""
        if self.finished:
            return
        self.detail = detail
        self.downstream_lost(self.status or 499)

    def downstream_lost(self, status: int = 499) -> None:
        """The client went away: abort whatever is in flight upstream."""
        if self.finished:
            return
        self.finished = True
        if self.connecting is not None:
            self.connecting.cancel()
        if self.upstream is not None:
            self.upstream.abort()
            self.upstream = None
        self._release_host(failed=False)
        self._log(status)

    # -- routing

    def begin(self) -> None:
        core = self.core
        path = self.path
        if path == "/ping" or path == "/healthz":
            if self.method in (b"GET", b"HEAD"):
                self.local(200, b"OK\n")
            else:
                self.fail(405, "", ((b"allow", b"GET, HEAD"),))
            return
        authorizer = core.authorizer
        if authorizer.handles(self.host, path):
            if self.method == b"POST" and self.body_kind and not self.request_done:
                self.internal_body = bytearray()  # answered at request_complete
                return
            if self._internal(b""):
                return
        plan, known = core.plan.lookup(self.host, path)
        sni, certificate, store = self.sink.tls_info()
        if sni and store is not None:
            name = _hostname(self.host)
            if (plan is None and name != sni) or (
                    certificate is not None and not store.covers(certificate, name)):
                # An HTTP/2 connection reused for a host it was not set up for.
                self.fail(421, f"this connection cannot serve {name}")
                return
        if path == "/robots.txt" and (plan is None or not plan.public):
            self.local(200, ROBOTS)
            return
        if plan is None:
            detail = "no route matches this path" if known else f"{self.host} route unknown"
            self.fail(404, detail)
            return
        self.plan = plan
        if plan.client_cert is not None:
            problem = self.sink.client_cert_problem(plan.client_cert)
            if problem is not None:
                self.detail = problem
                self.fail(495, "invalid client certificate")
                return
        if path == "/.gateway" or path.startswith("/.gateway/"):
            self.fail(404, "not found")
            return
        route = plan.route
        if route.redirect is not None:
            location = redirect_location(route, core.scheme, self.host, path,
                                         self.query.decode("latin-1"))
            self.local(route.redirect.response_code, b"",
                       ((b"location", location.encode("latin-1")),))
            return
        if self.upgrade and not self._upgrade_allowed(route):
            token = self.upgrade.decode("latin-1")
            self.keep_alive = False
            self.fail(403, f"{token} upgrades are not enabled on this route")
            return
        if plan.public:
            self.dispatch()
            return
        decision = core.authorizer.authorize(self._info(), plan)
        if isinstance(decision, Deferred):
            self.sink.pause_reading("authorize")
            decision.addCallbacks(self._decided, self._decision_failed)
            return
        self._apply(decision)

    def _internal(self, body: bytes) -> bool:
        """Let the identity layer answer its own endpoints; True when it did."""
        result = self.core.authorizer.internal(self._info(), body)
        if result is None:
            return False
        if isinstance(result, Deferred):
            self.sink.pause_reading("authorize")
            result.addCallbacks(self._decided_local, self._decision_failed)
        else:
            self._apply(result)
        return True

    def _decided_local(self, decision: Allow | Deny) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            self._apply(decision)

    def _upgrade_allowed(self, route: Any) -> bool:
        token = self.upgrade.lower()
        if token == b"websocket":
            return bool(route.allow_websockets)
        if token.startswith(b"spdy/"):
            return bool(route.allow_spdy)
        return False

    def client_address(self) -> str:
        """The client as policy and logs see it: the peer, or with
        ``xff_num_trusted_hops`` N the Nth address from the right of X-Forwarded-For."""
        hops = self.core.xff_trusted_hops
        if not hops:
            return self.sink.client_ip
        incoming = b", ".join(v for n, v in self.headers if n.lower() == b"x-forwarded-for")
        return forwarded_for(incoming or None, self.sink.client_ip, hops, True)[1]

    def _info(self) -> RequestInfo:
        return RequestInfo(self.method, self.core.scheme, self.host, self.path, self.query,
                           self.headers, self.client_address())

    def _decided(self, decision: Allow | Deny) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            self._apply(decision)

    def _apply(self, decision: Allow | Deny) -> None:
        if isinstance(decision, Deny):
            self._deny(decision)
            return
        self.allow = decision
        self.dispatch()

    def _decision_failed(self, failure: Failure) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            access_log.failure("authorization failed", failure)
            self.fail(500, "")

    def _deny(self, decision: Deny) -> None:
        self.detail = decision.reason
        self.local(decision.status, decision.body, decision.headers)

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
        self.host_state = host
        host.active += 1
        # The route timeout runs from the end of the request (as Envoy's does).
        self.deadline = now + plan.timeout if self.request_done else 0.0
        self.waiting_upstream = True
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
        conn.send(self, self._upstream_head(), self.method == b"HEAD")
        if self.pending:
            for chunk in self.pending:
                conn.write(chunk)
            self.pending = []
            self.pending_size = 0
            self.sink.resume_reading("connect")
        if self.body_kind and not self.request_done and conn.transport is not None:
            conn.transport.registerProducer(_UploadThrottle(self.sink), True)  # type: ignore

    def _connect_failed(self, failure: Failure) -> None:
        self.connecting = None
        if self.finished:
            return
        self.waiting_upstream = False
        self._release_host(failed=True)
        if failure.check(TimeoutError, CancelledError, ConnectingCancelledError):
            self.fail(504, "upstream connect timeout")
        elif failure.check(DNSLookupError, socket.gaierror):
            self.fail(503, "upstream name resolution failed")
        elif failure.check(ConnectError, OSError):
            self.fail(503, "upstream connect error")
        else:
            self.fail(502, "upstream TLS or connect error")
        self.detail = failure.getErrorMessage()

    def _upstream_head(self) -> bytes:
        plan = self.plan
        host = self.host_state
        assert plan is not None and host is not None
        route = plan.route
        upstream = host.upstream
        core = self.core
        path = upstream_path(route, upstream, self.path).encode("latin-1")
        drop = plan.request_drop
        named = self.connection_tokens
        parts = [self.method, b" ", path, self.query, b" HTTP/1.1\r\n"]
        incoming_host = b""
        xff: bytes | None = None
        xfp: bytes | None = None
        xfh: bytes | None = None
        rewrite_from: bytes | None = None
        extra_remove = self.allow.remove if self.allow is not None else frozenset()
        for name, value in self.headers:
            low = name.lower()
            if low == b"host":
                incoming_host = value
                continue
            if low in HOP_BY_HOP or low in named:
                if self.upgrade and low in (b"upgrade", b"connection"):
                    continue  # re-added below
                continue
            if low.startswith(IDENTITY_PREFIX) or low in drop or low in extra_remove:
                continue
            if low == b"x-forwarded-for":
                xff = value if xff is None else xff + b", " + value
                continue
            if low == b"x-forwarded-proto":
                xfp = value
                continue
            if low == b"x-forwarded-host":
                xfh = value
                continue
            if low == b"cookie" and self.allow is not None and self.allow.strip_cookie:
                value = strip_cookie(value, self.allow.strip_cookie)
                if not value:
                    continue
            if low == plan.host_header_name:
                rewrite_from = value
            parts += (name, b": ", value, b"\r\n")
        if not incoming_host:
            incoming_host = self.host.encode("latin-1")
        # Host
        if route.preserve_host_header:
            host_value = incoming_host
        elif route.host_rewrite:
            host_value = route.host_rewrite.encode("latin-1")
        elif rewrite_from is not None:
            host_value = rewrite_from
        elif route.host_path_regex is not None and route.host_path_regex.search(self.path):
            host_value = route.host_path_regex.sub(
                route.host_path_regex_rewrite_substitution, self.path, count=1
            ).encode("latin-1")
        else:
            default = 443 if upstream.scheme == "https" else 80
            host_value = (upstream.host if upstream.port == default
                          else f"{_bracket(upstream.host)}:{upstream.port}").encode("latin-1")
        parts += (b"host: ", host_value, b"\r\n")
        trusted = core.xff_trusted_hops
        if not core.skip_xff_append:
            ip = self.sink.client_ip.encode()
            xff = xff + b", " + ip if xff else ip
        if xff:
            parts += (b"x-forwarded-for: ", xff, b"\r\n")
        if not (trusted and xfp):
            xfp = core.scheme_bytes
        parts += (b"x-forwarded-proto: ", xfp, b"\r\n")
        if not (trusted and xfh):
            xfh = incoming_host
        parts += (b"x-forwarded-host: ", xfh, b"\r\n")
        for name, value in plan.request_headers:
            parts += (name, b": ", value, b"\r\n")
        if self.allow is not None:
            for name, value in self.allow.headers:
                parts += (name, b": ", value, b"\r\n")
        if self.body_kind == BODY_CHUNKED:
            parts.append(b"transfer-encoding: chunked\r\n")
        if self.upgrade:
            parts += (b"connection: upgrade\r\nupgrade: ", self.upgrade, b"\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    # -- response side (UpstreamListener)

    def upstream_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                      keep_alive: bool) -> None:
        if self.finished:
            return
        plan = self.plan
        assert plan is not None
        self.waiting_upstream = False
        self.deadline = self.core.reactor.seconds() + plan.timeout
        self.status = status
        out: list[tuple[bytes, bytes]] = []
        upstream_conn = self.upstream
        named = connection_tokens(headers) if upstream_conn is not None and \
            upstream_conn.saw_connection else frozenset()
        overridden = plan.response_header_names
        rewrites = plan.response_rewrites
        has_length = False
        upgrading = status == 101
        for name, value in headers:
            low = name.lower()
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
                    if low == header and value.startswith(prefix):
                        value = replacement + value[len(prefix):]
            out.append((name, value))
        out.extend(plan.response_headers)
        no_body = (self.method == b"HEAD" or status in (204, 304) or upgrading)
        self.chunked_out = not no_body and not has_length and self.sink.chunked_framing
        if self.chunked_out:
            out.append((b"transfer-encoding", b"chunked"))
        self.response_started = True
        close = not self.keep_alive and not upgrading
        # Held until the first body bytes or the end of this read, so head and body
        # usually leave in one send.
        self.head_pending = (status, reason, out, not no_body, close)
        if upgrading:
            self.flush_head()
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None and not upgrading:
            self.sink.start_response_flow(upstream.transport)

    def flush_head(self) -> None:
        """Write a response head still held back (called after each upstream read)."""
        head, self.head_pending = self.head_pending, None
        if head is not None:
            self.sink.write_head(*head)
        self.sink.flush()

    def upstream_body(self, data: bytes) -> None:
        if self.finished:
            return
        self.deadline = self.core.reactor.seconds() + (self.plan.timeout if self.plan else 30)
        self.sent += len(data)
        if self.chunked_out:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        head, self.head_pending = self.head_pending, None
        if head is not None:
            self.sink.write_head(*head, first_body=data)
        else:
            self.sink.write_body(data)

    def upstream_complete(self) -> None:
        if self.finished:
            return
        upstream, self.upstream = self.upstream, None
        self.sink.stop_response_flow()
        if upstream is not None:
            if not self.request_done:
                upstream.reusable = False  # answered before the body was sent
            self.core.pool.release(upstream)
        self._release_host(failed=self.status >= 500)
        if self.chunked_out:
            self.upstream_body_end()
        else:
            self.flush_head()
        self.sink.end_body()
        self._finish()

    def upstream_body_end(self) -> None:
        head, self.head_pending = self.head_pending, None
        if head is not None:
            self.sink.write_head(*head, first_body=b"0\r\n\r\n")
        else:
            self.sink.write_body(b"0\r\n\r\n")

    def upstream_upgraded(self, rest: bytes) -> None:
        upstream, self.upstream = self.upstream, None
        if self.finished or upstream is None or self.plan is None:
            return
        self._release_host(failed=False)
        self.finished = True
        self._log(101)
        self.sink.start_tunnel(self, upstream, rest, self.plan.timeout)

    def upstream_failed(self, reason: str, before_response: bool) -> None:
        if self.finished:
            return
        upstream, self.upstream = self.upstream, None
        self.waiting_upstream = False
        if upstream is not None:
            upstream.abort()
        if before_response and self.reused and not self.retried and not self.body_sent \
                and self.method in _IDEMPOTENT:
            # A pooled connection the upstream had just closed: try once on a fresh one.
            self.retried = True
            self._release_host(failed=False)
            self.dispatch()
            return
        self._release_host(failed=True)
        self.detail = reason
        if self.head_pending is not None:
            self.head_pending = None  # nothing was written yet: answer cleanly instead
            self.response_started = False
            before_response = True
        if before_response and not self.response_started:
            self.fail(502, "upstream connection closed before the response")
        else:
            self.finished = True
            self.sink.stop_response_flow()
            self.sink.abort()
            self._log(self.status or 502)

    def timed_out(self) -> None:
        """The route timeout passed while waiting for (more of) the response."""
        if self.finished:
            return
        if self.connecting is not None:
            self.connecting.cancel()  # -> _connect_failed -> 504
            return
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.abort()
        self._release_host(failed=True)
        self.detail = "route timeout"
        if self.head_pending is not None:
            self.head_pending = None
            self.response_started = False
        if not self.response_started:
            self.fail(504, "upstream request timeout")
        else:
            self.finished = True
            self.sink.stop_response_flow()
            self.sink.abort()
            self._log(self.status)

    # -- answers of our own

    def fail(self, status: int, detail: str, headers: Pairs = ()) -> None:
        """An error answered by the gateway, shaped for the client (HTML page for
        browsers, JSON on request, plain text otherwise)."""
        body, ctype = error_page(status, detail, self.headers)
        self.local(status, body, (*headers, (b"content-type", ctype)))

    def local(self, status: int, body: bytes, headers: Pairs = ()) -> None:
        """Answer without the upstream (also used for every error)."""
        if self.finished:
            return
        self.waiting_upstream = False
        self.status = status
        self.response_started = True
        out = list(self.core.plan.response_headers)
        if self.plan is not None:
            out = list(self.plan.response_headers)
        out.extend(headers)
        if body and not any(name == b"content-type" for name, _ in headers):
            out.extend(_PLAIN)
        out.append((b"content-length", b"%d" % len(body)))
        close = not self.keep_alive or not self.request_done
        if not self.request_done:
            self.keep_alive = False
        self.sink.write_head(status, b"", out, True, close)
        if body and self.method != b"HEAD":
            self.sink.write_body(body)
            self.sent = len(body)
        self.sink.end_body()
        self._finish()

    def _release_host(self, failed: bool) -> None:
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

    def _finish(self) -> None:
        self.finished = True
        self._log(self.status)
        self.sink.exchange_done(self)

    def _log(self, status: int) -> None:
        if not self.core.access_enabled():
            return
        plan = self.plan
        access_log.info(
            "{method} {host}{path} {status}",
            method=self.method.decode("latin-1"), host=self.host, path=self.path,
            query=self.query.decode("latin-1"), status=status, bytes=self.sent,
            duration_ms=round((self.core.reactor.seconds() - self.started) * 1000, 3),
            client=self.client_address(),
            route=(plan.route.name or str(plan.route.index)) if plan else None,
            detail=self.detail or None,
        )


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


def _hostname(host: str) -> str:
    """The Host value without its port (IPv6 literals keep their brackets)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
