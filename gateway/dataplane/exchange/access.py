"""The access log: one structured event per exchange, in the ``gateway.access`` namespace.

Written once when the exchange ends (answered, abandoned, upgraded to a tunnel), with what
was sent and why; a ``proxy_log_level`` above ``info`` turns it off.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from twisted.logger import Logger, LogLevel

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import RoutePlan
from gateway.observability.logging import LEVELS

access_log = Logger(namespace="gateway.access")
# Query parameters that carry credentials: the session hand-off at the end of sign-in and
# the provider's authorization code (also inside a forward-auth question's ``uri``).
_SECRET_PARAMS = re.compile(rb"((?:^|[?&])(?:gateway_session|code)=)[^&]*", re.IGNORECASE)


def loggable_query(query: bytes) -> str:
    """The query string as logged: credential values replaced by ``[redacted]``."""
    return _SECRET_PARAMS.sub(rb"\1[redacted]", query).decode("latin-1")


class Logged(Protocol):
    """What the access log reads of an exchange (an ``ExchangeBase``)."""

    method: bytes
    host: str
    path: str
    query: bytes
    sent: int
    started: float
    detail: str
    plan: RoutePlan | None
    core: ProxyCore
    trace: Any  # tracer.RequestTrace | None

    def client_address(self) -> str: ...


def access_enabled() -> bool:
    return bool(LogLevel.info >= LEVELS.proxy_log_level)


def log_access(exchange: Logged, status: int, **extra: object) -> None:
    """``extra``: further fields of this kind of exchange (a tunnel's bytes upstream).
    Also where a traced exchange's spans end: every way an exchange ends is logged here."""
    trace = exchange.trace
    if trace is not None:
        exchange.trace = None
        trace.end(exchange, status)
    if not access_enabled():
        return
    plan = exchange.plan
    access_log.info(
        "{method} {host}{path} {status}",
        method=exchange.method.decode("latin-1"), host=exchange.host, path=exchange.path,
        query=loggable_query(exchange.query), status=status, bytes=exchange.sent,
        duration_ms=round((exchange.core.reactor.seconds() - exchange.started) * 1000, 3),
        client=exchange.client_address(),
        route=(plan.route.name or str(plan.route.index)) if plan else None,
        detail=exchange.detail or None, **extra,
    )
