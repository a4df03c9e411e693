"""Listening sockets shared between processes (``workers``).

The supervisor binds every listener once per worker (``SO_REUSEPORT`` when there are
several, so the kernel spreads new connections evenly over the workers' sockets) and
hands each worker its descriptors; a worker adopts them instead of binding. A worker
that dies leaves its socket open in the supervisor: connections queued on it wait for
the restarted worker instead of being reset.

Binding in the supervisor keeps the single-process behaviour operators rely on: a port
in use (by anyone) or a privileged port fails at start-up, once, with one message.
"""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from zope.interface import implementer

from gateway.config.values import parse_address

BACKLOG = 511  # nginx's: bursts of new connections wait in the kernel, not refused


def bind_shared(address: str, count: int) -> list[socket.socket]:
    """``count`` listening sockets on ``address`` (one per worker), non-blocking and
    inheritable. Raises ``CannotListenError`` as Twisted's ``listenTCP`` does."""
    host, port = parse_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if count > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise CannotListenError(host, port, exc) from None
            if port == 0:  # every worker's socket on the port the first one got
                host, port = sock.getsockname()[:2]
            sock.listen(BACKLOG)
            sock.setblocking(False)
            sock.set_inheritable(True)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


@implementer(IStreamServerEndpoint)
class AdoptedEndpoint:
    """An endpoint whose ``listen`` adopts an already listening descriptor."""

    def __init__(self, reactor: Any, fd: int) -> None:
        self.reactor = reactor
        self.fd = fd

    def listen(self, protocolFactory: IProtocolFactory) -> defer.Deferred[IListeningPort]:
        try:
            probe = socket.socket(fileno=self.fd)
        except OSError as exc:
            return defer.fail(CannotListenError("", self.fd, exc))
        family = probe.family
        try:
            # adoptStreamPort listens on a duplicate: the original is closed, so the
            # socket lives exactly as long as the port
            port = self.reactor.adoptStreamPort(self.fd, family, protocolFactory)
        finally:
            probe.close()
        return defer.succeed(port)
