"""The request metrics of an exchange: one ``http_server_*`` observation when it ends, one
``http_client_*`` observation per upstream attempt (``observe_upstream``).

Labels come from the matched route (``RoutePlan.metric_labels``, computed once per
configuration), so what a client sends cannot add series: an unrouted request is counted
under the host ``unknown`` and the route ``none``.
"""

from __future__ import annotations

from typing import Protocol

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.observability.request_metrics import (
    METHODS,
    NO_ROUTE,
    OTHER_METHOD,
    REQUESTS,
    UNKNOWN_HOST,
)


class Measured(Protocol):
    """What the metrics read of an exchange (an ``ExchangeBase``)."""

    core: ProxyCore
    plan: RoutePlan | None
    method: bytes
    started: float
    received: int
    sent: int
    upstream_host: UpstreamHost | None
    upstream_started: float
    upstream_status: int

_NO_ROUTE_LABELS = (UNKNOWN_HOST, NO_ROUTE)
_server = REQUESTS.server.observe
_client = REQUESTS.client.observe


def observe_exchange(exchange: Measured, status: int, now: float) -> None:
    """The request the gateway answered (or gave up on) with ``status``."""
    if exchange.upstream_started:
        observe_upstream(exchange, now)
    plan = exchange.plan
    host, route = plan.metric_labels if plan is not None else _NO_ROUTE_LABELS
    _server((host, METHODS.get(exchange.method, OTHER_METHOD), status, route),
            (now - exchange.started) * 1000, exchange.received, exchange.sent)


def observe_upstream(exchange: Measured, now: float | None = None) -> None:
    """The upstream request in flight ended (answered, failed, abandoned): status is the
    upstream's, ``0`` when no response head arrived."""
    started = exchange.upstream_started
    host = exchange.upstream_host
    plan = exchange.plan
    if not (started and REQUESTS.enabled) or host is None or plan is None:
        return
    if now is None:
        now = exchange.core.reactor.seconds()
    exchange.upstream_started = 0.0
    _client((host.address, METHODS.get(exchange.method, OTHER_METHOD),
             exchange.upstream_status, plan.metric_labels[1]),
            (now - started) * 1000, exchange.received, exchange.sent)
