"""Client endpoints toward a host and port, and how a failed connection is reported.

Shared by the proxy's upstream pool, tunnels and health probes, and by the ``gateway
tcp`` client; ``dns_lookup_family`` is applied here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
)
from twisted.internet.error import (
    ConnectError,
    ConnectingCancelledError,
    DNSLookupError,
    TimeoutError,
)
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.python.failure import Failure


def client_endpoint(reactor: Any, host: str, port: int, timeout: float) -> IStreamClientEndpoint:
    """A TCP endpoint for an upstream: an address literal directly, a name through
    ``HostnameEndpoint`` (both address families, happy eyeballs)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return HostnameEndpoint(reactor, host, port, timeout=timeout)
    if address.version == 4:
        return TCP4ClientEndpoint(reactor, host, port, timeout=timeout)
    return TCP6ClientEndpoint(reactor, host, port, timeout=timeout)


def connect_failure(failure: Failure) -> tuple[int, str]:
    """The status a failed upstream connection answers, and what kind of failure it
    was: 504 timed out, 503 unresolvable or refused, 502 anything else (TLS)."""
    if failure.check(TimeoutError, CancelledError, ConnectingCancelledError):
        return 504, "timeout"
    if failure.check(DNSLookupError, socket.gaierror):
        return 503, "name resolution failed"
    if failure.check(ConnectError, OSError):
        return 503, "connection refused or unreachable"
    return 502, "TLS or connect error"


def family_resolver(reactor: Any, family: str) -> Callable[[str, int], Deferred[str]] | None:
    """``dns_lookup_family``: ``V4_ONLY``/``V6_ONLY`` resolve names to that family only
    (in a thread, as getaddrinfo blocks); ``AUTO`` leaves it to ``HostnameEndpoint``,
    which tries both families (happy eyeballs)."""
    if family not in ("V4_ONLY", "V6_ONLY"):
        return None
    import socket

    from twisted.internet.threads import deferToThreadPool

    wanted = socket.AF_INET if family == "V4_ONLY" else socket.AF_INET6

    def lookup(host: str, port: int) -> str:
        infos = socket.getaddrinfo(host, port, wanted, socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"no {family} address for {host}")
        return str(infos[0][4][0])

    def resolve(host: str, port: int) -> Deferred[str]:
        return deferToThreadPool(reactor, reactor.getThreadPool(), lookup, host, port)

    return resolve
