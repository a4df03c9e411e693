"""txredisapi past its public API: a connection handler's factory, and Sentinel over TLS.

- ``handler_factory``: the pool's ``RedisFactory`` behind a ``ConnectionHandler`` (the
  object every txredisapi connection function returns); the databroker reads its pool
  size and makes it keep reconnecting. Bound once (``attrgetter``): no Python frame.
- ``TLSSentinel``: txredisapi's ``Sentinel`` connects to the master the sentinels name
  in plain TCP; this one adds TLS to that connection too, by overriding the two private
  steps that open it (``Sentinel._connect_factory_and_return_handler`` and
  ``_SentinelEndpoint._connect``, with ``_makeEndpoint`` as txredisapi's own does).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import txredisapi

RELIES_ON = (
    ("txredisapi", "", ("_SentinelEndpoint", "_makeEndpoint")),
    ("txredisapi", "_SentinelEndpoint", ("_connect",)),
    ("txredisapi", "Sentinel", ("_connect_factory_and_return_handler",)),
)
RELIES_ON_INSTANCE = (
    ("txredisapi", "ConnectionHandler", ("_factory",)),
)

TLSFor = Callable[[str], Any]  # host -> connection creator (``ssl_context_factory``)

handler_factory: Callable[[Any], Any] = attrgetter("_factory")


class _TLSSentinelEndpoint(txredisapi._SentinelEndpoint):  # type: ignore[misc]
    """txredisapi connects to the master Sentinel names in plain TCP; this adds TLS."""

    def __init__(self, factory: Any, tls_for: TLSFor) -> None:
        super().__init__(factory)
        self.tls_for = tls_for

    def _connect(self, addr: tuple[str, int], protocol_factory: Any) -> Any:
        host, port = addr
        endpoint = txredisapi._makeEndpoint(host, port, self.factory.maxDelay,
                                            self.tls_for(host))
        return endpoint.connect(protocol_factory)


class TLSSentinel(txredisapi.Sentinel):  # type: ignore[misc]
    """``kvstores+sentinel://``: TLS to the sentinels and to the master they name."""

    def __init__(self, addresses: list[tuple[str, int]], tls_for: TLSFor,
                 **connection_kwargs: Any) -> None:
        self.tls_for = tls_for
        self.sentinels = [
            txredisapi.lazyConnection(host, port, ssl_context_factory=tls_for(host),
                                      **connection_kwargs)
            for host, port in addresses]
        self.min_other_sentinels = 0

    def _connect_factory_and_return_handler(self, factory: Any) -> Any:
        factory.startConnecting(_TLSSentinelEndpoint(factory, self.tls_for))
        return factory.handler
