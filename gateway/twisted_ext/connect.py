"""``connect_protocol``: Twisted's ``connectProtocol`` without its reference cycles.

Twisted's makes a factory class per call (a class is a cycle) whose instance keeps the
protocol, and the connector keeps that factory for the connection's life: each closed
connection then waited for the next full garbage collection instead of being freed
when it closed. Here one module-level factory hands its protocol out once.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol

# read with getattr: the canary test is what notices a rename
RELIES_ON_INSTANCE = (
    ("twisted.internet.endpoints", "_WrappingProtocol", ("_wrappedProtocol",)),
)


class _OneProtocol(Factory):
    """A factory handing out one protocol already built."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol_built: Protocol | None = protocol

    def buildProtocol(self, addr: Any) -> Protocol | None:
        # handed out once, and forgotten: the connector keeps this factory, and the
        # protocol keeps the connection (its transport) that holds the connector
        protocol, self.protocol_built = self.protocol_built, None
        return protocol


P = TypeVar("P", bound=Protocol)


def connect_protocol(endpoint: IStreamClientEndpoint, protocol: P) -> Deferred[P]:
    """Connect ``protocol`` through ``endpoint``, as ``connectProtocol`` does."""
    connected = cast(Deferred[P], endpoint.connect(_OneProtocol(protocol)))
    return connected.addCallback(_called_directly)


def _called_directly(protocol: P) -> P:
    """Once connected, the endpoint's wrapper (Twisted's ``_WrappingProtocol``) only
    forwards each event: the TCP connection calls the protocol itself from then on, one
    call less on every read. (Under TLS the wrapper holds the TLS layer, not this
    protocol, and stays.)"""
    transport: Any = protocol.transport
    if getattr(getattr(transport, "protocol", None), "_wrappedProtocol", None) is protocol:
        transport.protocol = protocol
    return protocol
