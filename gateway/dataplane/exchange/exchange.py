"""One request/response through the proxy, independent of the downstream codec.

The codec (HTTP/1.1 here; HTTP/2 shares this) hands the exchange its request head
(``head.RequestHead``) and connection facts (``head.ConnectionFacts``), calls ``begin``
when it may be served, feeds the body with ``request_body`` /
``request_complete``, and implements ``Sink`` for the response. The exchange routes,
answers the gateway's own endpoints, forward-auth requests (``forward_auth``) and redirect
routes, and asks the authorization hook; an allowed request goes to the upstream relay
(``relay.UpstreamRelay``), everything else is answered locally (``base.ExchangeBase.local``).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.exchange import mcp_request
from gateway.dataplane.exchange.access import access_log, log_access
from gateway.dataplane.exchange.base import policy_certificate
from gateway.dataplane.exchange.forward_auth import serve_forward_auth
from gateway.dataplane.exchange.head import BODY_CHUNKED, RequestHead
from gateway.dataplane.exchange.relay import UpstreamRelay
from gateway.dataplane.exchange.stage import (
    AUTHORIZING,
    DONE,
    READY,
    ROUTING,
    UPSTREAM_BOUND,
)
from gateway.dataplane.exchange.traced import end_decision_span
from gateway.dataplane.exchange.tunnel import open_tunnel
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.routing.redirect import redirect_location
from gateway.dataplane.routing.router import own_path
from gateway.observability.tracing.active import active
from gateway.wire.request_id import checked_request_id

ROBOTS = b"User-agent: *\nDisallow: /"


class Exchange(UpstreamRelay):
    """One request/response: made by the codec with its connection's facts, and with
    the request head or (HTTP/1.1) given it by ``head_read`` before ``begin``."""

    __slots__ = ()

    # -- request side (codec calls)

    def request_body(self, data: bytes) -> None:
        self.received += len(data)
        if self.finished or not data:
            # nothing to send; and a chunked upload's empty piece (HTTP/2 allows an
            # empty DATA frame) would be the last-chunk, ending the body upstream early
            return
        if self.internal_body is not None:
            if self.plan is not None and self.plan.mcp is not None:
                mcp_request.body_piece(self, data)
                return
            if len(self.internal_body) + len(data) > 16384:
                self.internal_body = None
                self.keep_alive = False
                self.fail(413, "request body too large")
                return
            self.internal_body += data
            return
        self._send_body(data)

    def request_complete(self) -> None:
        self.request_done = True
        if self.finished:
            return
        if self.internal_body is not None:
            plan = self.plan
            if plan is not None and plan.mcp is not None:
                if not mcp_request.admission_pending(self) and \
                        mcp_request.body_complete(self):
                    self.decide_route(plan)
                return
            body, self.internal_body = bytes(self.internal_body), None
            if not self._internal(body):
                self.fail(404, "not found")
            return
        head = self.head
        if self.stage in UPSTREAM_BOUND and self.plan is not None and not head.connect:
            self.deadline = self.core.reactor.seconds() + self.plan.response_timeout
        if not head.framing:
            return
        if head.framing == BODY_CHUNKED:
            # its end is bytes on the wire: a request that sent them is not retried
            self.body_sent = True
        upstream = self.upstream
        if upstream is not None:  # (else ``attach`` ends the body)
            upstream.end_body()
            if upstream.transport is not None:
                upstream.transport.unregisterProducer()  # type: ignore[attr-defined]
                self.sink.resume_reading("upload")

    def abandon(self, detail: str) -> None:
        """The gateway gives up on the client (e.g. ``timeout_write``): log what was
        sent and why, then drop the upstream side; the caller closes the connection."""
        if self.finished:
            return
        self.detail = detail
        self.downstream_lost(self.status or 499)

    def downstream_lost(self, status: int = 499, detail: str = "") -> None:
        """The client went away (or the codec refused the request, ``status``, saying
        why in ``detail``): abort whatever is in flight upstream."""
        if self.finished:
            return
        if detail:
            self.detail = detail
        self.enter(DONE)
        if self.connecting is not None:
            self.connecting.cancel()
        if self.upstream is not None:
            self.upstream.abort()
            self.upstream = None
        self.release_host(failed=False)
        log_access(self, status)

    # -- routing

    def head_complete(self, head: RequestHead | None = None) -> None:
        """The codec has read the request head (``head``: of an exchange made before
        it, see ``head_read``), which waits for its turn: ``begin`` comes later. (A
        request the codec begins at once is begun from HEAD.)"""
        if head is not None:
            self.head_read(head)
        self.enter(READY)

    def begin(self, head: RequestHead | None = None) -> None:
        """The request's turn: route it. ``head``: the head of an exchange made before
        it (HTTP/1.1), taken here as ``head_read`` would, inline: one call less for
        every HTTP/1.1 request."""
        if head is not None:
            self.head = head
            self.keep_alive = head.keep_alive
            self.expect_continue = head.expect_continue
            self.request_done = head.complete
            if head.request_id is not None:
                self.rid = checked_request_id(head.request_id)
        self.stage = ROUTING  # (a plain write: see ``stage.MOVED_BY``)
        tracer = self.core.tracer
        if tracer is not None:
            tracer.begin(self)
        if self.core.underscores_reject and self._refuse_underscores():
            return
        head = self.head
        if head.connect:
            self._begin_connect()
            return
        core = self.core
        path = head.path
        host = head.host
        if path == "/ping" or path == "/healthz":
            if head.method in (b"GET", b"HEAD") and core.draining:
                self.local(503, b"draining\n")  # stopping: a load balancer sends no more
            elif head.method in (b"GET", b"HEAD"):
                self.local(200, b"OK\n")
            else:
                self.fail(405, "", ((b"allow", b"GET, HEAD"),))
            return
        if core.sign_in_app.handles(host, path):
            if head.method == b"POST" and head.framing and not self.request_done:
                self.internal_body = bytearray()  # answered at request_complete
                return
            if self._internal(b""):
                return
        if core.plan.is_forward_auth(host):
            serve_forward_auth(self)
            return
        plan, known = core.plan.lookup(host, path)
        facts = self.facts
        # (the usual: a routed host this connection was already found to serve, no call)
        misdirected = "" if plan is not None and host == facts.served \
            else facts.misdirected(host, plan is not None)
        if misdirected:
            # An HTTP/2 connection reused for a host it was not set up for.
            self.fail(421, f"this connection cannot serve {misdirected}")
            return
        if path == "/robots.txt" and (plan is None or not plan.public):
            self.local(200, ROBOTS)
            return
        if plan is None:
            detail = "no route matches this path" if known else f"{host} route unknown"
            self.fail(404, detail)
            return
        self.plan = plan
        if plan.client_cert is not None and not self._client_cert_ok(plan):
            return
        if own_path(path):
            self.fail(404, "not found")
            return
        route = plan.route
        if plan.tcp:
            self.fail(405, f"{host} is a TCP route: connect to it with CONNECT "
                           "(for example `gateway tcp`)", ((b"allow", b"CONNECT"),))
            return
        if route.redirect is not None:
            location = redirect_location(route, core.scheme, host, path,
                                         head.query.decode("latin-1"))
            self.local(route.redirect.response_code, b"",
                       ((b"location", location.encode("latin-1")),))
            return
        if head.upgrade and not self._upgrade_allowed(route):
            token = head.upgrade.decode("latin-1")
            self.keep_alive = False
            self.fail(403, f"{token} upgrades are not enabled on this route")
            return
        if plan.mcp is not None and mcp_request.begin(self, plan):
            return
        if plan.public:
            self.dispatch()
            return
        self._authorize(plan)

    def decide_route(self, plan: RoutePlan) -> None:
        """An MCP route's request, its body read: decided (or, public, forwarded) as
        ``begin`` does any request."""
        if plan.public:
            self.dispatch()
        else:
            self._authorize(plan)

    def _refuse_underscores(self) -> bool:
        """``headers_with_underscores_action: reject``: 400 naming the first such header."""
        for name, _ in self.head.headers:
            if b"_" in name:
                self.fail(400, f"header names with '_' are refused here: "
                               f"{name.decode('latin-1')}")
                return True
        return False

    def _begin_connect(self) -> None:
        """CONNECT host:port: only a tcp+https route of exactly that authority; then the
        route's client-certificate and authorization checks, as for any request."""
        plan, known = self.core.plan.lookup_tcp(self.host)
        if plan is None and known:
            self.fail(405, f"{self.host} is not a TCP route; CONNECT is only for "
                           "tcp+https routes")
            return
        if plan is None:
            self.fail(404, f"no TCP route for {self.host}")
            return
        # No 421 here: the authority names the tunnel's target, not an origin served
        # over this TLS connection, so a client may reach every TCP route through the
        # gateway's own name (`gateway tcp --gateway-url https://gateway.example.com`).
        self.plan = plan
        if plan.client_cert is not None and not self._client_cert_ok(plan):
            return
        if plan.public:
            open_tunnel(self)
            return
        self._authorize(plan)

    def _client_cert_ok(self, plan: RoutePlan) -> bool:
        """The route's client-certificate policy (``plan.client_cert``, which the
        caller has found set: most routes have none, and are not asked with a call);
        False when it answered 495."""
        assert plan.client_cert is not None
        problem = self.facts.client_cert_problem(plan.client_cert)
        if problem is None:
            return True
        self.detail = problem
        self.fail(495, "invalid client certificate")
        return False

    def _authorize(self, plan: RoutePlan) -> None:
        """Ask the authorization hook; ``_apply`` forwards, tunnels or answers."""
        if self.trace is not None:
            self._authorize_traced(plan)
            return
        decision = self.core.authorizer.authorize(self.request_info(), plan.route)
        if isinstance(decision, (Allow, Reply)):  # (Deferred's isinstance goes through abc)
            self._apply(decision)
            return
        self.enter(AUTHORIZING)
        self.sink.pause_reading("authorize")
        decision.addCallbacks(self._decided, self._decision_failed)

    def _authorize_traced(self, plan: RoutePlan) -> None:
        """``_authorize`` with the decision as a span (the session lookup and any
        databroker call in it become its children)."""
        assert self.trace is not None
        span = self.trace.authorize_span()
        with active(span):
            decision = self.core.authorizer.authorize(self.request_info(), plan.route)
        if isinstance(decision, Deferred):
            self.enter(AUTHORIZING)
            self.sink.pause_reading("authorize")
            decision.addBoth(end_decision_span, span)
            decision.addCallbacks(self._decided, self._decision_failed)
            return
        end_decision_span(decision, span)
        self._apply(decision)

    def _internal(self, body: bytes) -> bool:
        """Let the identity layer answer its own endpoints; True when it did."""
        if self.trace is not None:
            with active(self.trace.server):  # sign-in: the provider's and storage calls
                result = self.core.sign_in_app.internal(self.request_info(), body)
        else:
            result = self.core.sign_in_app.internal(self.request_info(), body)
        if result is None:
            return False
        if isinstance(result, Deferred):
            self.enter(AUTHORIZING)
            self.sink.pause_reading("authorize")
            result.addCallbacks(self._decided_local, self._decision_failed)
        else:
            self._apply(result)
        return True

    def _decided_local(self, decision: Allow | Reply) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            self._apply(decision)

    def _upgrade_allowed(self, route: Route) -> bool:
        token = self.head.upgrade.lower()
        if token == b"websocket":
            return bool(route.allow_websockets)
        if token.startswith(b"spdy/"):
            return bool(route.allow_spdy)
        return False

    def request_info(self, plan: RoutePlan | None = None) -> RequestInfo:
        """The request as decisions see it, for ``plan`` (default: the exchange's; a
        tunnel checked again passes the route as the configuration now has it)."""
        if plan is None:
            plan = self.plan
        # (most routes check no client certificate: no call to find none)
        certificate = b"" if plan is None or plan.client_cert is None \
            else policy_certificate(self.facts, plan)
        head = self.head
        mcp = self.mcp
        return RequestInfo(head.method, self.core.scheme, head.host, head.path, head.query,
                           head.headers, self.decision_address(), certificate,
                           mcp.request if mcp is not None else None)

    def _decided(self, decision: Allow | Reply) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            self._apply(decision)

    def _apply(self, decision: Allow | Reply) -> None:
        self.caller = decision.caller
        self.decision_reason = decision.reason
        if self.mcp is not None and not mcp_request.decided(self, decision):
            return
        if isinstance(decision, Reply):
            self._reply(decision)
            return
        self.allow = decision
        if self.head.connect:
            open_tunnel(self)
        else:
            self.dispatch()

    def _decision_failed(self, failure: Failure) -> None:
        self.sink.resume_reading("authorize")
        if not self.finished:
            access_log.failure("authorization failed", failure)
            self.fail(500, "")

    def _reply(self, decision: Reply) -> None:
        self.detail = decision.reason
        if self.head.connect and (decision.status == 401 or 300 <= decision.status < 400):
            # A tunnel client cannot follow a sign-in redirect: 401, and how to sign in.
            self.fail(401, f"sign-in required for {self.host}: run `gateway tcp {self.host}`"
                           " (it opens the sign-in page), or send `Authorization: Gateway "
                           "<token>` with a token from /.gateway/api/v1/login")
            return
        self.local(decision.status, decision.body, decision.headers)
