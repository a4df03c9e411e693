"""The request side of an MCP route (a route with ``mcp``): its ``Origin``, its body read
whole and parsed, its metadata headers against the body, then each message decided.

``begin`` is asked once routing found an MCP route (``Exchange.begin``; a route without
``mcp`` never comes here and pays one attribute test):

- ``Origin`` present and not the route's own: 403 (``mcp.headers.origin_refusal``).
- POST: first the route's authorization is asked whether the caller may send MCP
  messages here at all (a request of no message: someone signed in may, nobody only
  where the policy lets someone not signed in in), so that the sign-in answer comes
  before the gateway reads and parses a large body for nobody; then the body is read
  whole (``body_piece``, ``body_complete``: the exchange's ``internal_body`` buffer, as
  for the gateway's own endpoints), up to the route's
  ``mcp.max_request_bytes`` (a larger ``Content-Length`` is refused before any of it is
  read, a body that grows past it when it does: 413; never a prefix; and bounded
  together, see "Budgets" below), then read into
  its messages (``mcp.jsonrpc``) and checked against the headers (``mcp.headers``);
  each refusal a JSON-RPC error (``mcp.errors``). The messages go on the exchange
  (``exchange.mcp``, an ``McpDecided``), the body into its ``pending`` pieces, and the
  route's authorization decides as for any request, with the messages in
  ``RequestInfo.mcp``: the decider decides each (``authorize.http_requests``) and
  answers either an ``Allow`` holding a verdict for every message, or the JSON-RPC
  errors refusing the request (nothing of it forwarded). An allowed body is forwarded
  exactly as it was read.
- GET and DELETE (the 2025 transports' server stream and end of session) carry no
  message: they are decided as one message with the method ``""``, which the decider
  allows when the policy lets the person send some message on the route
  (``policy.any_message``; docs/how-to/mcp-policy.md says why).
- Any other method carries no MCP message and is decided as any request is (both MCP
  criteria false).

Budgets. A body is held until it has all come, and HTTP/2 acknowledges DATA as it
arrives with up to 128 streams at once: one client sending many large bodies it never
ends would have the gateway hold 128 x ``max_request_bytes`` on one connection, and
any number of connections so. So the bytes of bodies being read are counted, each
body's as long as its buffer lives (``_Held``: released when the buffer is dropped,
however the exchange ends: read whole, refused, reset, timed out), per connection and
per process. A piece that would take the connection past ``connection_budget`` (four
bodies of the route's limit, at most ``CONNECTION_BUDGET``, never less than one body)
is refused with 413, and one that would take the process past ``PROCESS_BUDGET`` (or
one body of the route's limit, the larger) with 503: a JSON-RPC error, the rest of that
body not read. Refusing rather than stopping flow control: streams stopped with their
bodies half read hold the budget while they wait for each other, so an honest client
sending a few large bodies at once could wait forever; refused, it is told why and
can send them one after another.

``decided`` keeps the verdicts on the exchange for the response side and the audit
event (``McpDecided.verdicts``) and refuses an ``Allow`` without a verdict for each
message, which only an authorizer that does not know MCP (a split deployment's older
authorize service) would answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.authorize.hook import Allow, Reply
from gateway.dataplane.exchange.stage import AUTHORIZING
from gateway.mcp.errors import (
    INTERNAL_ERROR,
    JSON_HEADERS,
    Refusal,
    too_large,
    too_much_held,
    unknown_session,
)
from gateway.mcp.headers import McpHeaders, check_agreement, origin_refusal, read_headers
from gateway.mcp.jsonrpc import read_request
from gateway.mcp.messages import McpCall, McpDecided, McpRequest, McpVerdict
from gateway.mcp.session_ids import HEADER as SESSION_HEADER

if TYPE_CHECKING:
    from gateway.authorize.caller import Caller
    from gateway.dataplane.exchange.exchange import Exchange
    from gateway.dataplane.exchange.head import ConnectionFacts
    from gateway.dataplane.exchange.relay import UpstreamRelay
    from gateway.dataplane.routing.plan import RoutePlan

_NO_MESSAGE = McpCall(None, "")
# asked before a POST's body is read: may this caller send messages here at all
# (``authorize.http_requests.Decider._admit_mcp``)
_ADMISSION = McpRequest(())
log = Logger()
_BODILESS = frozenset({b"GET", b"DELETE"})
# the MCP request bytes being read at once, on one connection and in one process
CONNECTION_BUDGET = 64 * 1024 * 1024
PROCESS_BUDGET = 256 * 1024 * 1024


class _Process:
    """The bytes of the process's MCP request bodies being read (``_Held``)."""

    held = 0


class _Held(bytearray):
    """A body being read, counted against its connection's and the process's budget
    from the moment it holds a byte until it is dropped (``__del__``: CPython frees it
    as the last reference goes, whichever way its exchange ended)."""

    __slots__ = ("facts",)

    def __init__(self, facts: ConnectionFacts, early: bytes) -> None:
        super().__init__(early)
        self.facts = facts
        facts.mcp_buffered += len(early)
        _Process.held += len(early)

    def grow(self, data: bytes) -> None:
        self += data
        self.facts.mcp_buffered += len(data)
        _Process.held += len(data)

    def __del__(self) -> None:
        size = len(self)
        self.facts.mcp_buffered -= size
        _Process.held -= size


def connection_budget(limit: int) -> int:
    """What the MCP bodies being read on one connection may hold together, for a route
    whose bodies may be ``limit`` bytes."""
    return max(limit, min(4 * limit, CONNECTION_BUDGET))


def _over_budget(facts: ConnectionFacts, limit: int, adding: int) -> Refusal | None:
    """The refusal of ``adding`` more bytes to a body being read, or ``None``."""
    budget = connection_budget(limit)
    if facts.mcp_buffered + adding > budget:
        return too_much_held(413, "on this connection", budget)
    budget = max(limit, PROCESS_BUDGET)
    if _Process.held + adding > budget:
        return too_much_held(503, "in this gateway process", budget)
    return None


def begin(exchange: Exchange, plan: RoutePlan) -> bool:
    """True when the request was answered or its body is being read; False when the
    route's authorization decides it now (with ``exchange.mcp`` set when it carries a
    message)."""
    mcp = plan.mcp
    assert mcp is not None
    head = exchange.head
    refusal = origin_refusal(head.headers, exchange.core.scheme, head.host)
    if refusal is not None:
        answer(exchange, refusal)
        return True
    method = head.method
    if method in _BODILESS:
        found = read_headers(head.headers)
        version = found.protocol_version if isinstance(found, McpHeaders) else ""
        _carry(exchange, plan, McpRequest((_NO_MESSAGE,), False, version))
        return False
    if method != b"POST":
        _drop_session(exchange)
        return False
    early = _early_body(exchange)
    if exchange.request_done:  # the whole body came before its turn, or there is none
        return not read(exchange, plan, early)
    length = _content_length(head.headers)
    if (length is not None and length > mcp.max_request_bytes) or \
            len(early) > mcp.max_request_bytes:
        answer(exchange, too_large(mcp.max_request_bytes))
        return True
    refusal = _over_budget(exchange.facts, mcp.max_request_bytes, len(early))
    if refusal is not None:
        exchange.keep_alive = False
        answer(exchange, refusal)
        return True
    # what comes while admission is asked waits here, after what came before
    exchange.internal_body = _Held(exchange.facts, early)
    if plan.public:
        _read_body(exchange)
        return True
    exchange.mcp = McpDecided(_ADMISSION)
    decision = exchange.core.authorizer.authorize(exchange.request_info(), plan.route)
    if isinstance(decision, Allow | Reply):
        _admitted(exchange, decision)
        return True
    exchange.enter(AUTHORIZING)
    exchange.sink.pause_reading("authorize")
    decision.addCallbacks(_admitted_later, _admission_failed, (exchange,),
                          errbackArgs=(exchange,))
    return True


def _early_body(exchange: Exchange) -> bytes:
    """The body's pieces that came before the request's turn (a pipelined HTTP/1.1
    request: the exchange held them in ``pending`` for the upstream), taken back to be
    read with the rest (they were parsed as no body at all: 400 for a whole body, and
    a body forwarded without its first piece for one that came in parts)."""
    if not exchange.pending:
        return b""
    early = b"".join(exchange.pending)
    exchange.pending = []
    exchange.pending_size = 0
    exchange.body_sent = False
    exchange.sink.resume_reading("connect")
    return early


def _admitted(exchange: Exchange, decision: Allow | Reply) -> None:
    """The answer to ``_ADMISSION``: a refusal (sign in, mostly) answered before the
    body is read; else the body is read."""
    exchange.mcp = None
    if isinstance(decision, Reply):
        exchange.internal_body = None
        exchange.caller = decision.caller
        exchange.decision_reason = exchange.detail = decision.reason
        exchange.local(decision.status, decision.body, decision.headers)
        return
    _read_body(exchange)


def _admitted_later(decision: Allow | Reply, exchange: Exchange) -> None:
    exchange.sink.resume_reading("authorize")
    if not exchange.finished:
        _admitted(exchange, decision)


def _admission_failed(failure: Failure, exchange: Exchange) -> None:
    exchange.sink.resume_reading("authorize")
    if not exchange.finished:
        log.failure("MCP admission failed", failure)
        answer(exchange, Refusal(500, INTERNAL_ERROR, "the authorization failed"))


def _read_body(exchange: Exchange) -> None:
    """Go on reading the body (a client that asked waits for 100 Continue until now);
    one that already came whole is decided."""
    if exchange.expect_continue:
        exchange.expect_continue = False
        exchange.sink.send_continue()
    if exchange.request_done and exchange.internal_body is not None:
        plan = exchange.plan
        assert plan is not None
        if body_complete(exchange):
            exchange.decide_route(plan)


def admission_pending(exchange: Exchange) -> bool:
    """The route's answer to ``_ADMISSION`` has not come yet (the body waits for it).
    Not the stage: after an admission decided later the exchange stays AUTHORIZING
    while the rest of the body comes."""
    carried = exchange.mcp
    return carried is not None and carried.request is _ADMISSION


def body_piece(exchange: Exchange, data: bytes) -> None:
    """A piece of an MCP route's body, held until the whole has come (413 past the
    route's limit or the connection's budget, 503 past the process's: the rest is not
    read, and the connection is not kept)."""
    buffer = exchange.internal_body
    plan = exchange.plan
    assert buffer is not None and plan is not None and plan.mcp is not None
    limit = plan.mcp.max_request_bytes
    refusal = too_large(limit) if len(buffer) + len(data) > limit else \
        _over_budget(exchange.facts, limit, len(data))
    if refusal is not None:
        exchange.internal_body = None
        exchange.keep_alive = False
        answer(exchange, refusal)
        return
    assert isinstance(buffer, _Held)
    buffer.grow(data)


def body_complete(exchange: Exchange) -> bool:
    """The whole body came: True when it is to be decided now."""
    buffer, exchange.internal_body = exchange.internal_body, None
    plan = exchange.plan
    assert buffer is not None and plan is not None
    return read(exchange, plan, bytes(buffer))


def read(exchange: Exchange, plan: RoutePlan, body: bytes) -> bool:
    """``body`` read into its messages and checked against the headers (False: answered
    with the error); the messages kept on the exchange, the body in its ``pending``
    pieces, sent to the upstream as it is once the connection is there."""
    headers = exchange.head.headers
    found = read_headers(headers)
    if isinstance(found, Refusal):
        answer(exchange, found)
        return False
    request = read_request(body, found.protocol_version)
    if isinstance(request, Refusal):
        answer(exchange, request)
        return False
    mismatch = check_agreement(found, request)
    if mismatch is not None:
        answer(exchange, mismatch)
        return False
    _carry(exchange, plan, request)
    exchange.pending = [body]
    exchange.pending_size = len(body)
    exchange.body_sent = True
    return True


def _carry(exchange: Exchange, plan: RoutePlan, request: McpRequest) -> None:
    """Keep ``request`` on the exchange; on a public route, which is not decided, every
    message is allowed as public."""
    decided = exchange.mcp = McpDecided(request)
    if plan.public:
        decided.verdicts = tuple(McpVerdict(call, True, "public", ("public",))
                                 for call in request.calls)


def decided(exchange: Exchange, decision: Allow | Reply) -> bool:
    """The authorization's answer to a request carrying MCP messages: its verdicts kept
    on the exchange; False when an ``Allow`` lacks them (answered 500 instead)."""
    carried = exchange.mcp
    assert carried is not None
    carried.verdicts = decision.mcp
    if isinstance(decision, Reply):
        return True
    if len(decision.mcp) != len(carried.request.calls):
        answer(exchange, Refusal(500, INTERNAL_ERROR,
                                 "the authorization service decided no MCP message of this "
                                 "request; it may be older than this proxy"))
        return False
    return _session(exchange, decision.caller)


def _session(exchange: Exchange, caller: Caller | None) -> bool:
    """The request's ``Mcp-Session-Id`` given back to the upstream as the server's id
    when the gateway bound it to this caller on this route (``mcp.session_ids``); False
    when it did not (answered 404, as for a session the server does not know)."""
    plan = exchange.plan
    sessions = plan.mcp_sessions if plan is not None else None
    if sessions is None:
        return True  # a public route: nobody to bind it to
    headers = exchange.head.headers
    found = [i for i, (name, _) in enumerate(headers) if name.lower() == SESSION_HEADER]
    if not found:
        return True
    provider, user_id = (caller.provider, caller.user_id) if caller is not None else ("", "")
    server_id = sessions.unbind(headers[found[0]][1].strip(b" \t"), provider, user_id) \
        if len(found) == 1 else None
    if server_id is None:
        answer(exchange, unknown_session())
        return False
    headers[found[0]] = (headers[found[0]][0], server_id)
    return True


def _drop_session(exchange: Exchange) -> None:
    """A request of an MCP route that carries no MCP message (``OPTIONS``, ``PUT``, ...)
    is no part of a session: the server never gets a session id with it (it would be
    one nobody checked)."""
    headers = exchange.head.headers
    if any(name.lower() == SESSION_HEADER for name, _ in headers):
        headers[:] = [pair for pair in headers if pair[0].lower() != SESSION_HEADER]


def bound_session(exchange: UpstreamRelay, headers: list[tuple[bytes, bytes]]
                  ) -> list[tuple[bytes, bytes]]:
    """The response head's ``headers`` with the server's ``Mcp-Session-Id`` bound to the
    exchange's caller (``mcp.session_ids``): what the client gets, and must send back."""
    plan = exchange.plan
    sessions = plan.mcp_sessions if plan is not None else None
    if sessions is None or not any(name.lower() == SESSION_HEADER for name, _ in headers):
        return headers
    caller = exchange.caller
    provider, user_id = (caller.provider, caller.user_id) if caller is not None else ("", "")
    return [(name, sessions.bind(value.strip(b" \t"), provider, user_id))
            if name.lower() == SESSION_HEADER else (name, value) for name, value in headers]


def answer(exchange: Exchange, refusal: Refusal) -> None:
    """``refusal`` as the JSON-RPC error the client reads (its message also the access
    log's ``detail``)."""
    exchange.detail = f"mcp: {refusal.message}"
    exchange.local(refusal.status, refusal.body(), JSON_HEADERS)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            value = value.strip()
            return int(value) if value.isdigit() else None
    return None
