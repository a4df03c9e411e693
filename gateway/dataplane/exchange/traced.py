"""The authorization decision as a span: what was decided and why, on its span."""

from __future__ import annotations

from typing import TypeVar

from twisted.python.failure import Failure

from gateway.authorize.hook import Allow, Reply
from gateway.observability.tracing.active import ChildSpan

T = TypeVar("T")


def end_decision_span(result: T, span: ChildSpan) -> T:
    """Record ``result`` (an ``Allow``, a ``Reply`` or a failure) and end ``span``;
    ``result`` is passed on unchanged (a Deferred callback)."""
    if isinstance(result, Allow):
        span.set("gateway.decision", "allow")
        span.end()
    elif isinstance(result, Reply):
        span.set("gateway.decision", "deny")
        span.set("gateway.reason", result.reason)
        span.set("http.response.status_code", result.status)
        span.end()
    elif isinstance(result, Failure):
        kind = result.type.__name__ if result.type is not None else "error"
        span.end(f"{kind}: {result.getErrorMessage()}")
    else:
        span.end()
    return result
