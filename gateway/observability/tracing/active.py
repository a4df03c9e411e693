"""The span a piece of request work belongs to, for code far from the exchange.

The exchange sets ``ACTIVE`` around the synchronous calls it makes into the identity layer
(authorize, the gateway's own endpoints); coroutines started there copy it (Twisted runs
each coroutine in a copy of the context it was created in), so the identity provider's
and the databroker's calls deep inside still see it, however many reactor turns later.
Outside a traced request it is None, and ``start_child`` costs one ``ContextVar.get``.

No OpenTelemetry import here: the modules that call ``start_child`` load nothing when
tracing is off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class ChildSpan(Protocol):
    """A span started under the active one; ``end`` once."""

    def set(self, key: str, value: str | int | float | bool) -> None: ...
    def end(self, error: str | None = None) -> None: ...
    def context_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """``traceparent`` naming this span, for a request it makes."""
        ...


class SpanParent(Protocol):
    def child(self, name: str, client: bool,
              attributes: dict[str, str | int | float | bool]) -> ChildSpan: ...


ACTIVE: ContextVar[SpanParent | None] = ContextVar("gateway_active_span", default=None)


def start_child(name: str, attributes: dict[str, str | int | float | bool] | None = None,
                client: bool = True) -> ChildSpan | None:
    """A child of the active span, or None outside a traced request."""
    parent = ACTIVE.get()
    if parent is None:
        return None
    return parent.child(name, client, attributes or {})


@contextmanager
def active(parent: SpanParent | None) -> Iterator[None]:
    """Make ``parent`` the active span for the calls (and coroutines) inside."""
    token = ACTIVE.set(parent)
    try:
        yield
    finally:
        ACTIVE.reset(token)
