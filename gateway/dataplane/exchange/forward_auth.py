"""Forward-auth requests on the exchange: find the request being asked about, find its
route, ask the authorization hook as if the gateway carried that request itself, answer
(``gateway.dataplane.forwardauth`` holds the pure parts and the wire rules).

The session comes from the forward-auth request's own headers: nginx ``auth_request``
passes the browser's headers to the subrequest and caddy and traefik copy them, so the
Cookie of the app's host (set there by the sign-in hand-off) is what is read.

A decision is one audit event (``observability.audit``) about the request asked about
(its method, host and path), with the status the proxy is answered; the access log
line names who was decided on too.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Allow, Authorizer, Decision, Reply, RequestInfo
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.access import access_log, audit_event, bearer_caller
from gateway.dataplane.exchange.base import Sink, policy_certificate
from gateway.dataplane.exchange.head import ConnectionFacts
from gateway.dataplane.exchange.stage import AUTHORIZING, Stage
from gateway.dataplane.forwardauth.answer import Mode, allowed, mode_of, outcome
from gateway.dataplane.forwardauth.target import CheckedRequest, TargetError, find_target, route_for
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.routing.router import own_path
from gateway.observability.audit import AUDIT, credential_of
from gateway.policy import METHOD

Pairs = tuple[tuple[bytes, bytes], ...]


class Exchange(Protocol):
    """What forward auth uses of its exchange (``exchange.Exchange``)."""

    sink: Sink
    facts: ConnectionFacts
    core: ProxyCore
    @property
    def method(self) -> bytes: ...
    @property
    def path(self) -> str: ...
    @property
    def query(self) -> bytes: ...
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...
    @property
    def finished(self) -> bool: ...
    detail: str
    plan: RoutePlan | None
    caller: Caller | None
    decision_reason: str
    trace_id: str

    @property
    def request_id(self) -> str: ...

    def enter(self, stage: Stage) -> None: ...
    def client_address(self) -> str: ...
    def decision_address(self) -> str: ...
    def fail(self, status: int, detail: str, headers: Pairs = ()) -> None: ...
    def local(self, status: int, body: bytes, headers: Pairs = ()) -> None: ...


def serve_forward_auth(exchange: Exchange) -> None:
    mode = mode_of(exchange.path, exchange.query)
    if exchange.method not in (b"GET", b"HEAD") and mode is not Mode.SIGN_IN:
        exchange.detail = "forward-auth: method"
        exchange.fail(405, "forward-auth requests use GET", ((b"allow", b"GET, HEAD"),))
        return
    try:
        target = find_target(exchange.query, exchange.headers, exchange.method,
                             exchange.core.reject_parameters)
    except TargetError as exc:
        exchange.detail = f"forward-auth {mode.value}: {exc.reason}"
        exchange.fail(exc.status, str(exc))
        return
    plan = route_for(exchange.core.plan, target)
    if plan is None:
        exchange.detail = f"forward-auth {mode.value}: no route for {target.origin}{target.path}"
        exchange.fail(404, f"no route serves {target.origin}{target.path}: the routes' from "
                           "must name the proxy's public URLs")
        return
    # The answer is about this route: the access log names it, and the route's response
    # headers go with it (caddy and traefik hand non-2xx answers to the browser).
    exchange.plan = plan
    if own_path(target.path):
        # The hand-off and sign-out live under /.gateway/ on route hosts; checking them
        # instead of passing them to the gateway would loop through sign-in for ever.
        exchange.detail = f"forward-auth {mode.value}: reserved path"
        exchange.fail(404, "/.gateway/ paths are the gateway's own: the proxy must send "
                           "them to the gateway, not check them")
        return
    authorizer: Authorizer = exchange.core.authorizer
    info = RequestInfo(target.method, target.scheme, target.host, target.path, target.query,
                       exchange.headers, exchange.decision_address(),
                       policy_certificate(exchange.facts, plan))
    if mode is Mode.SIGN_IN:
        _answer(exchange, mode, target, authorizer.sign_in(info))
        return
    if plan.client_cert is not None:
        problem = exchange.facts.client_cert_problem(plan.client_cert)
        if problem is not None:
            exchange.detail = f"forward-auth {mode.value}: {problem}"
            exchange.fail(495, "invalid client certificate")
            return
    if plan.public:
        _answer(exchange, mode, target, allowed(Allow()))
        return
    if METHOD in plan.route.policy.reads and not target.method_named:
        # The proxy asks with GET whatever the request was: without the header, a rule
        # about DELETE would be decided for a GET, and let the DELETE through.
        exchange.detail = f"forward-auth {mode.value}: no X-Forwarded-Method"
        exchange.fail(400, "this route's policy reads the request method: the proxy must "
                           "send X-Forwarded-Method (nginx: proxy_set_header "
                           "X-Forwarded-Method $request_method;)")
        return
    decision = authorizer.authorize(info, plan.route)
    if isinstance(decision, Deferred):
        exchange.enter(AUTHORIZING)
        exchange.sink.pause_reading("authorize")
        decision.addCallbacks(_later, _failed, (exchange, mode, target, authorizer, info),
                              errbackArgs=(exchange,))
        return
    _decided(decision, exchange, mode, target, authorizer, info)


def _later(decision: Decision, exchange: Exchange, mode: Mode, target: CheckedRequest,
           authorizer: Authorizer, info: RequestInfo) -> None:
    exchange.sink.resume_reading("authorize")
    if not exchange.finished:
        _decided(decision, exchange, mode, target, authorizer, info)


def _decided(decision: Decision, exchange: Exchange, mode: Mode, target: CheckedRequest,
             authorizer: Authorizer, info: RequestInfo) -> None:
    refused = outcome(mode, decision, exchange.headers)
    answer: Decision = authorizer.sign_in(info) if refused is None else refused
    exchange.caller = decision.caller
    if AUDIT.enabled:
        audit_event(exchange, exchange.core.reactor.seconds(), "forward-auth",
                    target.method, target.host, target.path, decision.caller,
                    credential_of(exchange.headers, decision.user_id,
                                  bearer=bearer_caller(decision.caller)),
                    isinstance(decision, Allow),
                    answer.status if isinstance(answer, Reply) else 200, decision.reason)
    _answer(exchange, mode, target, answer)


def _answer(exchange: Exchange, mode: Mode, target: CheckedRequest, decision: Decision) -> None:
    if isinstance(decision, Allow):  # sign_in never allows; kept total for the types
        decision = allowed(decision)
    exchange.detail = (f"forward-auth {mode.value}: {target.host}{target.path} "
                       f"{_reason(decision)}")
    exchange.local(decision.status, decision.body, decision.headers)


def _reason(decision: Reply) -> str:
    return decision.reason or str(decision.status)


def _failed(failure: Failure, exchange: Exchange) -> Any:
    exchange.sink.resume_reading("authorize")
    if not exchange.finished:
        access_log.failure("forward-auth authorization failed", failure)
        exchange.fail(500, "")
    return None
