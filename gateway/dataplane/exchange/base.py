"""What every part of an exchange shares: its state, its downstream side, its own answers.

``ExchangeBase`` holds what the codec hands it (``head.RequestHead``, once the head is
read, and ``head.ConnectionFacts``) and the exchange's own state, whose life is its
``stage`` (``stage.Stage``; ``enter`` is the one place it changes);
``relay.UpstreamRelay`` adds the upstream side and ``exchange.Exchange`` the request side
and routing. ``Sink`` is what each codec implements for the response, ``TunnelSink``
what it implements to turn its connection (or stream) into a tunnel. ``local`` and
``fail`` answer without an upstream (every error, redirects, denials).

The parts are classes of one object, not objects of their own: a request allocates one
``Exchange`` and its calls go straight to the method that does the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Allow
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.access import log_access
from gateway.dataplane.exchange.head import BODY_LENGTH, NO_HEAD, ConnectionFacts, RequestHead
from gateway.dataplane.exchange.stage import DONE, FINAL, HEAD, RESPONDING, Stage
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.dataplane.upstream.http1_client import UpstreamConnection
from gateway.mcp.messages import McpDecided
from gateway.pages.answer import error_answer
from gateway.pages.layout import look_of
from gateway.policy import CLIENT_CERT
from gateway.wire.headers import trusted_hop
from gateway.wire.request_id import checked_request_id, request_id_for

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.internet.interfaces import ITransport

    from gateway.dataplane.exchange.tunnel import Tunnel
    from gateway.dataplane.routing.plan import Pairs
    from gateway.observability.tracing.tracer import RequestTrace

_PLAIN = ((b"content-type", b"text/plain; charset=utf-8"),)


class Sink(Protocol):
    """The downstream side of one exchange's response (implemented by each codec).

    ``write_head``'s ``framing`` says how the body that follows is delimited
    (``head.BODY_*``): none, by the ``content-length`` among ``headers``, or by the
    codec (HTTP/1.1 chunks it, HTTP/2 ends the stream); ``write_body`` and ``end_body``
    frame it accordingly."""

    def write_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]],
                   framing: int, close: bool, first_body: bytes = b"") -> None: ...
    def write_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...
    def flush(self) -> None: ...
    def exchange_done(self, exchange: ExchangeBase) -> None: ...
    def abort(self) -> None: ...
    def pause_reading(self, reason: str) -> None: ...
    def resume_reading(self, reason: str) -> None: ...
    def send_continue(self) -> None: ...
    def start_response_flow(self, producer: Any) -> None: ...
    def stop_response_flow(self) -> None: ...


class TunnelSink(Protocol):
    """A codec's side of a CONNECT tunnel (both codecs: the ``Sink`` of a CONNECT's
    exchange is also its ``TunnelSink``)."""

    def start_connect(self, tunnel: Tunnel, upstream: ITransport) -> None:
        """Answer 200 to a CONNECT and join ``upstream`` through a pipe whose idle
        timeout is the route's; ``tunnel.join(pipe)`` hands the pipe over,
        ``tunnel.closed`` is its ``on_close``."""
        ...


class UpgradeSink(Protocol):
    """A codec's side of an upgrade (websocket, SPDY): HTTP/1.1 only, whose ``Sink`` is
    also its ``UpgradeSink``."""

    def start_tunnel(self, exchange: ExchangeBase, upstream: UpstreamConnection,
                     rest: bytes, idle_timeout: float) -> None:
        """The upstream answered 101: join the client's connection to ``upstream``
        (``rest``: what it sent after the 101's head)."""
        ...


def policy_certificate(facts: ConnectionFacts, plan: RoutePlan | None) -> bytes:
    """The client certificate a route's policy may read: only one the route checks
    against its CA (``client_cert``, a 495 otherwise). A certificate nobody checked
    proves only that its sender holds the key, not what its names say."""
    if plan is None or plan.client_cert is None or CLIENT_CERT not in plan.route.policy.reads:
        return b""
    return facts.client_certificate()


class ExchangeBase:
    """The state all parts of an exchange share (only ``Exchange`` is instantiated).

    Slotted: an exchange has over 40 fields, and CPython (3.11) shares an instance
    dictionary's keys only up to 30, so each request built a full dictionary of its own,
    which cost more than a microsecond and made every field access a hashed lookup."""

    __slots__ = (
        "allow", "body_sent", "caller", "connecting", "core", "deadline",
        "decision_reason", "detail", "expect_continue", "facts", "finished", "head",
        "head_pending", "host_state", "internal_body", "keep_alive", "mcp", "pending",
        "pending_size", "plan", "received", "request_done", "retried",
        "reused", "rid", "sent", "sink", "stage", "started", "status", "trace", "trace_id",
        "upstream", "upstream_host", "upstream_started", "upstream_status",
    )

    def __init__(self, sink: Sink, core: ProxyCore, facts: ConnectionFacts,
                 head: RequestHead = NO_HEAD) -> None:
        # Observability state. The X-Request-Id: the client's when valid, else a new one,
        # chosen with the head (on first use for a head refused before it was read).
        self.rid = b"" if head.request_id is None else checked_request_id(head.request_id)
        self.received = 0  # request body bytes read from the client
        self.upstream_host: UpstreamHost | None = None  # picked (kept after release_host)
        self.upstream_started: float | None = None  # when the upstream request began
        self.upstream_status = 0  # the upstream's status code; 0 until a response head
        # who the authorization decision was about (``None``: nobody signed in)
        self.caller: Caller | None = None
        self.decision_reason = ""  # why the authorization decision denied or allowed
        # Tracing (``core.tracer``): the spans of a sampled exchange; the trace id of a
        # sampled one or of a caller's trace we pass on unsampled (logged when not empty).
        self.trace: RequestTrace | None = None
        self.trace_id = ""
        self.sink = sink
        self.facts = facts
        self.core = core
        self.stage = HEAD
        # over (answered, cut off, left by the client, or a tunnel): read often, so kept
        # beside the stage, and set only with it (``enter``)
        self.finished = False
        self.started = core.reactor.seconds()
        # The request as the codec read it. Three of its facts change with the exchange,
        # which keeps them: whether the connection stays open after it, whether a 100
        # Continue is still owed, whether the request side is over (the whole body came).
        self.head = head
        self.keep_alive = head.keep_alive
        self.expect_continue = head.expect_continue
        self.request_done = head.complete
        self.plan: RoutePlan | None = None
        self.host_state: UpstreamHost | None = None
        self.upstream: UpstreamConnection | None = None
        self.connecting: Deferred[UpstreamConnection] | None = None
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.allow: Allow | None = None
        self.deadline = 0.0
        self.head_pending: tuple[int, bytes, list[tuple[bytes, bytes]], int, bool] | None = None
        # the status of the response head made for the client, 0 while none is (and
        # again when a head held back, not written yet, is dropped for an answer of
        # the gateway's own): ``response_started``
        self.status = 0
        self.sent = 0
        self.reused = False
        self.retried = False
        self.body_sent = False
        self.detail = ""
        self.internal_body: bytearray | None = None
        # on an MCP route, its messages as read and their verdicts (mcp_request.py);
        # ``mcp_response`` filters its response by it, ``access`` audits each message;
        # ``None`` on every other route
        self.mcp: McpDecided | None = None

    def head_read(self, head: RequestHead) -> None:
        """The head of an exchange made before it was read (HTTP/1.1 makes one at the
        request's first byte): one the codec refuses, kept for its answer and its log
        line. The head of a request the codec goes on with is handed to ``begin`` or
        ``head_complete``, which take it the same way."""
        self.head = head
        self.keep_alive = head.keep_alive
        self.expect_continue = head.expect_continue
        self.request_done = head.complete
        if head.request_id is not None:
            self.rid = checked_request_id(head.request_id)

    def last_on_connection(self) -> None:
        """The connection closes after this exchange (the gateway is draining): its
        response says ``connection: close`` when it has not begun yet."""
        self.keep_alive = False

    # The request's own fields, read through the head (outside the hot path: the
    # exchange's own code reads ``self.head``).
    @property
    def method(self) -> bytes:
        return self.head.method

    @property
    def host(self) -> str:
        return self.head.host

    @property
    def path(self) -> str:
        return self.head.path

    @property
    def query(self) -> bytes:
        return self.head.query

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return self.head.headers

    @property
    def connect(self) -> bool:
        return self.head.connect

    @property
    def upgrade(self) -> bytes:
        return self.head.upgrade

    @property
    def tunnel_sink(self) -> TunnelSink | None:
        """The codec's side of a CONNECT's tunnel: its sink (both codecs implement it)."""
        return self.sink if self.head.connect else None  # type: ignore[return-value]

    @property
    def upgrade_sink(self) -> UpgradeSink | None:
        """The codec's side of an upgrade: its sink (HTTP/1.1 alone asks for one)."""
        return self.sink if self.head.upgrade and not self.head.connect \
            else None  # type: ignore[return-value]

    def enter(self, stage: Stage) -> None:
        """Move to ``stage``, keeping ``finished`` beside it: every move that may end
        the exchange (to ``DONE`` or ``TUNNEL``), and those off the common path (to
        READY, AUTHORIZING, a tunnel's CONNECTING), are made here; the four of every
        relayed request that cannot end it are plain writes by the methods
        ``stage.MOVED_BY`` names (``begin``, ``dispatch``, ``attach``, ``local`` and
        ``upstream_head``): as calls they cost 1.3 % of a request's CPU.

        ``finished`` is kept beside the stage rather than derived from it: the data
        plane reads it a dozen times a request, and a property would be a call each
        time. The test suite checks every write of ``stage`` against ``stage.NEXT``
        and ``stage.MOVED_BY`` (``tests/support/stage_check.py``), which also holds
        that only this method ends an exchange.

        An exchange that ends with a body still being read (an MCP route's: its
        client went away, its stream was reset) drops it here, so that the body's
        share of the connection's and the process's budget comes back now, not when
        the collector finds the connection's cycle of objects (``mcp_request``)."""
        self.stage = stage
        self.finished = stage >= FINAL
        if self.internal_body is not None and self.finished:
            self.internal_body = None

    @property
    def response_started(self) -> bool:
        """A response head was made for the client (it may be held back still). Not the
        stage, which says only that the exchange is over once DONE: the HTTP/1.1 codec
        asks then whether anything was answered. Read off the response's status, so
        not a flag of its own to keep beside the stage."""
        return self.status != 0

    @property
    def ready(self) -> bool:
        """The request head is complete (the codec has said so)."""
        return self.stage != HEAD

    @property
    def user_id(self) -> str:
        """The user id of the caller the decision was about (``""``: nobody signed in),
        for a traced exchange's span."""
        return self.caller.user_id if self.caller is not None else ""

    @property
    def request_id(self) -> str:
        """This request's ``X-Request-Id`` (the client's when valid, else a new one): sent
        upstream, on the response, in the access log and on error pages."""
        return self.request_id_bytes().decode("ascii")

    def request_id_bytes(self) -> bytes:
        rid = self.rid
        if not rid:
            rid = self.rid = request_id_for(self.head.headers)
        return rid

    def client_address(self) -> str:
        """The client as logs and load balancing see it: the peer, or with
        ``xff_num_trusted_hops`` N the Nth address from the right of X-Forwarded-For
        (the peer when it holds fewer)."""
        hops = self.core.xff_trusted_hops
        if not hops:
            return self.facts.peer
        return self._trusted_hop(hops) or self.facts.peer

    def decision_address(self) -> str:
        """The client address decisions read (``source_ip``): ``client_address``, but
        "" when ``xff_num_trusted_hops`` is N and X-Forwarded-For holds fewer than N
        addresses. The peer is then one of the trusted proxies (or someone who reached
        an inner one directly), not the client: an address it matched would be theirs."""
        hops = self.core.xff_trusted_hops
        if not hops:
            return self.facts.peer
        return self._trusted_hop(hops) or ""

    def _trusted_hop(self, hops: int) -> str | None:
        incoming = b", ".join(v for n, v in self.head.headers if n.lower() == b"x-forwarded-for")
        return trusted_hop(incoming, hops)

    # -- answers of our own

    def fail(self, status: int, detail: str, headers: Pairs = ()) -> None:
        """An error answered by the gateway, shaped for the client (HTML page for
        browsers, JSON on request, plain text otherwise), with the request id to quote."""
        head = self.head
        body, page = error_answer(status, detail, head.headers,
                                  look_of(self.core.plan.snapshot.options), host=head.host,
                                  rid=self.request_id)
        self.local(status, body, (*headers, *page))

    def local(self, status: int, body: bytes, headers: Pairs = ()) -> None:
        """Answer without the upstream (also used for every error)."""
        if self.finished:
            return
        # An upstream response may have begun (its head held back) and registered its
        # flow on the client transport: this answer replaces it, so that flow ends here.
        self.sink.stop_response_flow()
        self.stage = RESPONDING  # (a plain write: see ``stage.MOVED_BY``)
        self.status = status
        out = list((self.plan if self.plan is not None else self.core.plan).response_headers)
        if headers:  # the answer's own headers replace the configured ones of that name
            own = {name.lower() for name, _ in headers}
            out = [pair for pair in out if pair[0].lower() not in own]
        out.extend(headers)
        # one id: a page of the identity layer brings the one it showed (the request's
        # when valid, as ours; else one it made and added to the request's headers),
        # which the access log then names too
        shown = next((v for n, v in headers if n.lower() == b"x-request-id"), None)
        if shown is None:
            out.append((b"x-request-id", self.request_id_bytes()))
        else:
            self.rid = shown
        if body and not any(name == b"content-type" for name, _ in headers):
            out.extend(_PLAIN)
        out.append((b"content-length", b"%d" % len(body)))
        close = not self.keep_alive or not self.request_done
        if not self.request_done:
            self.keep_alive = False
        self.sink.write_head(status, b"", out, BODY_LENGTH, close)
        if body and self.head.method != b"HEAD":
            self.sink.write_body(body)
            self.sent = len(body)
        self.sink.end_body()
        self._finish()

    def _finish(self) -> None:
        self.enter(DONE)
        log_access(self, self.status)
        self.sink.exchange_done(self)
