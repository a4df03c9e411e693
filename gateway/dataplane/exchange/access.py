"""The end of an exchange: its request metrics, and its access-log line (one structured
event in the ``gateway.access`` namespace).

Written once when the exchange ends (answered, abandoned, upgraded to a tunnel), with what
was sent and why; a ``proxy_log_level`` above ``info`` turns the log line off (the
metrics stay). The fields, as a log shipper reads them from the JSON line (``time``,
``level``, ``namespace`` and ``message`` come with every event):

``request_id``, ``client``, ``method``, ``host``, ``path``, ``query`` (credential values
redacted), ``status``, ``bytes_in`` / ``bytes_out`` (body bytes read from the client /
sent to it; a tunnel's bytes each way), ``duration_ms``, ``upstream`` (host:port, when one
was picked), ``route``, ``user_id`` and ``email`` (when signed in), ``reason`` (the
authorization decision's reason code, ``public`` for a public route), ``detail`` (why the
gateway answered itself), ``trace_id`` (when tracing set one). Fields without a value are
left out.

An exchange that was decided (a route that is not public, the authorization hook
answered) is also one event of the audit stream (``observability.audit``), unless the
stream is off; an MCP route's request is one event per JSON-RPC message (``via: mcp``,
``mcp_record``).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from twisted.logger import Logger

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Allow, Reply
from gateway.dataplane.exchange.mcp_record import audit_fields, verdicts_of
from gateway.dataplane.exchange.mcp_record import observe as observe_mcp
from gateway.dataplane.exchange.measure import Measured, observe_exchange
from gateway.dataplane.routing.plan import RoutePlan
from gateway.mcp.messages import McpDecided
from gateway.observability.audit import AUDIT, McpFields, credential_of
from gateway.observability.logging import LEVELS
from gateway.observability.request_metrics import REQUESTS

access_log = Logger(namespace="gateway.access")
# Query parameters that carry credentials: the session hand-off at the end of sign-in, the
# provider's authorization code (also inside a forward-auth question's ``uri``), and the
# programmatic sign-in's token.
_SECRET_PARAMS = re.compile(
    rb"((?:^|[?&])(?:gateway_session|gateway_jwt|code|id_token|access_token|"
    rb"refresh_token|token)=)[^&]*", re.IGNORECASE)


def loggable_query(query: bytes) -> str:
    """The query string as logged: credential values replaced by ``[redacted]``."""
    return _SECRET_PARAMS.sub(rb"\1[redacted]", query).decode("latin-1")


def access_enabled() -> bool:
    return LEVELS.access_logged


class Logged(Measured, Protocol):
    """What the access log reads of an exchange (an ``ExchangeBase``)."""

    @property
    def host(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def query(self) -> bytes: ...
    detail: str
    allow: Allow | None
    caller: Caller | None
    decision_reason: str
    trace_id: str
    @property
    def connect(self) -> bool: ...
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...
    trace: Any  # tracer.RequestTrace | None
    mcp: McpDecided | None

    @property
    def request_id(self) -> str: ...

    def client_address(self) -> str: ...


class Audited(Protocol):
    """What an audit event reads of the exchange that decided (forward auth's too)."""

    @property
    def plan(self) -> RoutePlan | None: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def request_id(self) -> str: ...

    def client_address(self) -> str: ...


def log_access(exchange: Logged, status: int) -> None:
    """Count and log the exchange, which ended with ``status``. Also where a traced
    exchange's spans end: every way an exchange ends is logged here."""
    trace = exchange.trace
    mcp = exchange.mcp
    if mcp is not None:  # (an MCP route's request: its messages' spans and counts)
        observe_mcp(exchange, mcp, trace)
    if trace is not None:
        exchange.trace = None
        trace.end(exchange, status)
    now = exchange.core.reactor.seconds()
    if REQUESTS.enabled:
        observe_exchange(exchange, status, now)
    if AUDIT.enabled and exchange.plan is not None and (
            exchange.allow is not None or exchange.decision_reason):
        audit(exchange, status, now)
    if not access_enabled():
        return
    plan = exchange.plan
    allow = exchange.allow
    caller = exchange.caller
    upstream = exchange.upstream_host
    fields: dict[str, object] = {
        "request_id": exchange.request_id,
        "client": exchange.client_address(),
        "method": exchange.method.decode("latin-1"),
        "host": exchange.host,
        "path": exchange.path,
        "query": loggable_query(exchange.query),
        "status": status,
        "bytes_in": exchange.received,
        "bytes_out": exchange.sent,
        "duration_ms": round((now - exchange.started) * 1000, 3),
        "upstream": upstream.address if upstream is not None else None,
        "route": plan.metric_labels[1] if plan is not None else None,
        "user_id": (caller.user_id or None) if caller is not None else None,
        "email": (caller.email or None) if caller is not None else None,
        "provider": (caller.provider or None) if caller is not None else None,
        "reason": (exchange.decision_reason or (allow.reason if allow else "")
                   or ("public" if plan is not None and plan.public else "")) or None,
        "detail": exchange.detail or None,
        "trace_id": exchange.trace_id or None,
    }
    access_log.info("{method} {host}{path} {status}",
                    **{k: v for k, v in fields.items() if v is not None})


def audit(exchange: Logged, status: int, now: float) -> None:
    """The decision of an HTTP request or CONNECT (forward auth's is written when it
    answers, with the forwarded request: ``audit_event`` for both)."""
    plan = exchange.plan
    assert plan is not None
    allow = exchange.allow
    caller = exchange.caller
    user_id = caller.user_id if caller is not None else ""
    if bearer_caller(caller):
        credential = "bearer"
    elif allow is not None:  # (an allowed programmatic token is removed from upstream)
        credential = "token" if b"authorization" in allow.remove else \
            "cookie" if user_id else "none"
    else:
        credential = credential_of(exchange.headers, user_id)
    reason = exchange.decision_reason or (allow.reason if allow is not None else "")
    mcp = exchange.mcp
    if mcp is not None and mcp.request.calls:
        # an MCP request is one event per JSON-RPC message, each with its own decision
        client_id = caller.client_id if caller is not None else ""
        for verdict in verdicts_of(mcp, allow is not None, reason):
            audit_event(exchange, now, "mcp", exchange.method, exchange.host,
                        exchange.path, caller, credential, verdict.allowed, status, reason,
                        mcp=audit_fields(verdict, client_id))
        return
    audit_event(exchange, now, "connect" if exchange.connect else "http",
                exchange.method, exchange.host, exchange.path, caller,
                credential, allow is not None, status, reason)


def audit_revoked(exchange: Logged, decision: Reply) -> None:
    """An open tunnel or upgraded connection refused by its periodic check
    (``recheck.py``), and so closed: one event, ``via: recheck``, with the status the
    decision implies (the client gets no answer, the connection ends)."""
    if not AUDIT.enabled or exchange.plan is None:
        return
    caller = decision.caller or exchange.caller
    audit_event(exchange, exchange.core.reactor.seconds(), "recheck", exchange.method,
                exchange.host, exchange.path, caller,
                credential_of(exchange.headers, caller.user_id if caller else "",
                              bearer=bearer_caller(caller)), False,
                decision.status, decision.reason)


def bearer_caller(caller: Caller | None) -> bool:
    """Whether ``caller`` is a bearer token's (an outside issuer vouches, no session)."""
    return caller is not None and bool(caller.user_id) and not caller.session_id


def audit_event(exchange: Audited, when: float, via: str, method: bytes, host: str,
                path: str, caller: Caller | None, credential: str, allowed: bool,
                status: int, reason: str, mcp: McpFields | None = None) -> None:
    """The one writer of an HTTP decision's audit event (a request, a CONNECT, a
    forward-auth question, a recheck that closed a connection): the route, the request's
    ids and the client's address are the exchange's; what was decided about, the
    caller's (forward auth decides the forwarded request, not its own)."""
    plan = exchange.plan
    assert plan is not None
    AUDIT.decision(
        when, exchange.request_id, exchange.trace_id, plan.metric_labels[1],
        str(plan.route.from_url), caller.user_id if caller is not None else "",
        caller.email if caller is not None else "", exchange.client_address(),
        method.decode("latin-1"), host, path, via, credential, allowed, status, reason,
        provider=caller.provider if caller is not None else "", mcp=mcp)
