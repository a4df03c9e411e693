"""PROXY protocol v1/v2 in front of the listener (``use_proxy_protocol``).

Twisted's wrapper parses the header and makes ``getPeer`` return the client it names;
this adds a deadline: a connection that has not sent a complete header within
``HEADER_TIMEOUT`` seconds is dropped, so idle sockets cannot pile up unparsed.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IDelayedCall
from twisted.protocols.haproxy._wrapper import HAProxyProtocolWrapper, HAProxyWrappingFactory
from twisted.protocols.policies import ProtocolWrapper
from twisted.python.failure import Failure

HEADER_TIMEOUT = 5.0


class DeadlineProxyProtocol(HAProxyProtocolWrapper):
    _deadline: IDelayedCall | None = None

    def makeConnection(self, transport: Any) -> None:
        clock = self.factory.clock
        self._deadline = clock.callLater(HEADER_TIMEOUT, self._expired)
        ProtocolWrapper.makeConnection(self, transport)

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        if self._proxyInfo is not None and self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        ProtocolWrapper.connectionLost(self, reason)

    def _expired(self) -> None:
        self._deadline = None
        if self._proxyInfo is None and self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]


class DeadlineProxyFactory(HAProxyWrappingFactory):
    protocol = DeadlineProxyProtocol  # type: ignore[assignment]

    def __init__(self, wrapped: Any, clock: Any) -> None:
        HAProxyWrappingFactory.__init__(self, wrapped)  # type: ignore[arg-type]
        self.clock = clock
