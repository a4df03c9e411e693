"""The request metrics of an exchange: one ``http_server_*`` observation when it ends, one
``http_client_*`` observation per upstream attempt.

Labels come from the matched route (``RoutePlan.metric_labels``, computed once per
configuration), so what a client sends cannot add series: an unrouted request is counted
under the host ``unknown`` and the route ``none``, a method outside the known set as
``OTHER``. Each route plan keeps the rows it counted into, keyed by what the request
carries (method bytes, status; and the upstream host for the client side), so the common
case is one small dict lookup and a few additions; only known methods are kept there.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Protocol

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import RoutePlan
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.observability.request_metrics import (
    DURATION_AT,
    DURATION_BUCKETS_MS,
    METHODS,
    NO_ROUTE,
    OTHER_METHOD,
    REQUEST_SIZE_AT,
    REQUESTS,
    RESPONSE_SIZE_AT,
    SIZE_BUCKETS,
    UNKNOWN_HOST,
    UPSTREAM_DURATION_AT,
    UPSTREAM_DURATION_SUM,
    RequestFamilies,
    Row,
    count,
)

_ROWS_KEPT = 2048  # per route plan: known methods times the statuses seen


class Measured(Protocol):
    """What the metrics read of an exchange (an ``ExchangeBase``)."""

    core: ProxyCore
    plan: RoutePlan | None
    @property
    def method(self) -> bytes: ...
    started: float
    received: int
    sent: int
    upstream_host: UpstreamHost | None
    upstream_started: float | None
    upstream_status: int


def _row(rows: dict[Any, Row], family: RequestFamilies, cache_key: tuple[Any, ...],
         host: str, method: bytes, status: int, route: str) -> Row:
    label = METHODS.get(method)
    row = family.row((host, label or OTHER_METHOD, status, route))
    if label is not None and len(rows) < _ROWS_KEPT:
        rows[cache_key] = row
    return row


def _pair_row(rows: dict[Any, Row], cache_key: tuple[Any, ...], plan: RoutePlan,
              upstream: UpstreamHost, method: bytes, status: int, upstream_status: int
              ) -> Row:
    label = METHODS.get(method)
    host, route = plan.metric_labels
    method_label = label or OTHER_METHOD
    row = REQUESTS.pair_row((host, method_label, status, route),
                            (upstream.address, method_label, upstream_status, route))
    if label is not None and len(rows) < _ROWS_KEPT:
        rows[cache_key] = row
    return row


def observe_exchange(exchange: Measured, status: int, now: float) -> None:
    """The request the gateway answered (or gave up on) with ``status``, and the upstream
    request still in flight, if any (both into one pair row: they share the method and
    the body sizes).

    The counting is ``request_metrics.count`` written out: this runs for every request,
    and on the 2-core reference machine every microsecond here is ~2 % of the public
    route's throughput."""
    plan = exchange.plan
    if plan is None:
        _unrouted(exchange, status, now)
        return
    method = exchange.method
    received = exchange.received
    sent = exchange.sent
    rows = plan.metric_rows
    started = exchange.upstream_started
    upstream = exchange.upstream_host
    if started is not None and upstream is not None:
        exchange.upstream_started = None
        upstream_status = exchange.upstream_status
        key: tuple[Any, ...] = (upstream, method, status, upstream_status)
        row = rows.get(key) or _pair_row(rows, key, plan, upstream, method, status,
                                         upstream_status)
        ms = (now - started) * 1000
        row[UPSTREAM_DURATION_SUM] += ms
        row[UPSTREAM_DURATION_AT + bisect_left(DURATION_BUCKETS_MS, ms)] += 1
    else:
        key = (method, status)
        row = rows.get(key) or _row(rows, REQUESTS.server, key, plan.metric_labels[0],
                                    method, status, plan.metric_labels[1])
    ms = (now - exchange.started) * 1000
    row[0] += ms
    row[DURATION_AT + bisect_left(DURATION_BUCKETS_MS, ms)] += 1
    if received:
        row[1] += received
        row[REQUEST_SIZE_AT + bisect_left(SIZE_BUCKETS, received)] += 1
    if sent:
        row[2] += sent
        row[RESPONSE_SIZE_AT + bisect_left(SIZE_BUCKETS, sent)] += 1


def _unrouted(exchange: Measured, status: int, now: float) -> None:
    rows = exchange.core.plan.unrouted_rows
    key = (exchange.method, status)
    row = rows.get(key) or _row(rows, REQUESTS.server, key, UNKNOWN_HOST, exchange.method,
                                status, NO_ROUTE)
    count(row, (now - exchange.started) * 1000, exchange.received, exchange.sent)


def observe_upstream(exchange: Measured) -> None:
    """An upstream attempt ended before the exchange did (a pooled connection the
    upstream had closed, retried): counted with its status, ``0`` without a response."""
    started = exchange.upstream_started
    upstream = exchange.upstream_host
    plan = exchange.plan
    exchange.upstream_started = None
    if started is None or not REQUESTS.enabled or upstream is None or plan is None:
        return
    rows = plan.metric_rows
    key = (upstream, exchange.method, exchange.upstream_status)
    row = rows.get(key) or _row(rows, REQUESTS.client, key, upstream.address,
                                exchange.method, exchange.upstream_status,
                                plan.metric_labels[1])
    count(row, (exchange.core.reactor.seconds() - started) * 1000, exchange.received,
          exchange.sent)
