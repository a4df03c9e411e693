"""PROXY protocol v1/v2 in front of the listener (``use_proxy_protocol``).

Twisted's wrapper parses the header and makes ``getPeer`` return the client it names;
this adds a deadline: a connection that has not sent a complete header within
``HEADER_TIMEOUT`` seconds is dropped, so idle sockets cannot pile up unparsed.

It also reads the header more carefully than Twisted's wrapper (found by fuzzing): a
first read too short to tell the version (under 16 bytes) waits for more instead of
closing; a v1 header whose port is not a number or whose address is not ASCII closes the
connection instead of raising out of ``dataReceived``; and addresses that are not IP
addresses of the named family, or ports outside 0-65535, are refused instead of becoming
the client address in logs and ``X-Forwarded-For``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IDelayedCall
from twisted.protocols.haproxy._exceptions import InvalidProxyHeader
from twisted.protocols.haproxy._info import ProxyInfo
from twisted.protocols.haproxy._v1parser import V1Parser
from twisted.protocols.haproxy._v2parser import V2Parser
from twisted.protocols.haproxy._wrapper import HAProxyProtocolWrapper, HAProxyWrappingFactory
from twisted.protocols.policies import ProtocolWrapper
from twisted.python.failure import Failure

HEADER_TIMEOUT = 5.0
_V2_HEAD = 16  # signature, version/command, family, length


def _parser_for(head: bytes) -> V1Parser | V2Parser | bool | None:
    """The parser for a connection starting with ``head``; None while too few bytes
    have arrived to tell, False when it is no PROXY header."""
    if head.startswith(V1Parser.PROXYSTR):
        return V1Parser()
    if len(head) >= _V2_HEAD and head.startswith(V2Parser.PREFIX) and head[12] & 0xF0 == 0x20:
        return V2Parser()
    if V1Parser.PROXYSTR.startswith(head) or (
            len(head) < _V2_HEAD and V2Parser.PREFIX.startswith(head[:12])
            and (len(head) <= 12 or head[12] & 0xF0 == 0x20)):
        return None
    return False


def _valid(info: ProxyInfo) -> bool:
    """Both addresses of a TCP header are IP addresses of their family with real ports."""
    addresses: tuple[Any, ...] = (info.source, info.destination)
    for address in addresses:
        if isinstance(address, IPv4Address | IPv6Address):
            family = ipaddress.IPv4Address if isinstance(address, IPv4Address) \
                else ipaddress.IPv6Address
            try:
                family(address.host)
            except ValueError:
                return False
            if not 0 <= address.port <= 65535:
                return False
    return True


class DeadlineProxyProtocol(HAProxyProtocolWrapper):
    _deadline: IDelayedCall | None = None
    _head = b""  # the first bytes, until they tell the header's version
    _refused = False

    def makeConnection(self, transport: Any) -> None:
        clock = self.factory.clock
        self._deadline = clock.callLater(HEADER_TIMEOUT, self._expired)
        ProtocolWrapper.makeConnection(self, transport)

    def dataReceived(self, data: bytes) -> None:
        if self._proxyInfo is not None:
            self.wrappedProtocol.dataReceived(data)
            return
        if self._refused:
            return
        parser = self._parser
        if parser is None:
            self._head += data
            found = _parser_for(self._head)
            if found is None:
                return
            if found is False:
                self._refuse()
                return
            assert not isinstance(found, bool)
            self._parser = parser = found
            data, self._head = self._head, b""
        try:
            info, remaining = parser.feed(data)
        except (InvalidProxyHeader, ValueError):  # UnicodeDecodeError is a ValueError
            self._refuse()
            return
        if info is None:
            return
        if not _valid(info):
            self._refuse()
            return
        self._proxyInfo = info
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None
        if remaining:
            self.wrappedProtocol.dataReceived(remaining)

    def _refuse(self) -> None:
        self._refused = True
        self.loseConnection()  # type: ignore[no-untyped-call]

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
