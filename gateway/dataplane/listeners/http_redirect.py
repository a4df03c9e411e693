"""The ``http_redirect_addr`` listener: every request gets a 301 to the same host and
target on https, with the security headers, and the connection is closed.

Its connections count against ``max_connections`` (``live``), and each must have sent
its request within ``timeout()`` seconds of the accept (the main listener's setup
deadline, min(timeout_read, 10 s)), or it is aborted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httptools
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from gateway.wire.responses import error_body, status_line

Pairs = tuple[tuple[bytes, bytes], ...]
_MAX_HEAD = 16 * 1024


class RedirectProtocol(Protocol):
    _deadline: IDelayedCall | None = None

    def __init__(self, headers: Callable[[], Pairs], owner: RedirectFactory) -> None:
        self.headers = headers
        self.owner = owner
        self.parser = httptools.HttpRequestParser(self)
        self.target = b""
        self.host = b""
        self.size = 0
        self.done = False

    def connectionMade(self) -> None:
        self.owner.live.add(self)
        self._deadline = self.owner.clock.callLater(self.owner.timeout(), self._expired)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.owner.live.discard(self)
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.done:
            return
        self.size += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.on_message_complete()
        except httptools.HttpParserError:
            self._answer(400, b"", error_body(400, "malformed request"))
            return
        if not self.done and self.size > _MAX_HEAD:
            self._answer(431, b"", error_body(431))

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"host":
            self.host = value

    def on_headers_complete(self) -> None:
        host = self.host.strip()
        if not host:
            self._answer(400, b"", error_body(400, "the Host header is required"))
            return
        name = host[: host.index(b"]") + 1] if host.startswith(b"[") else host.split(b":")[0]
        target = self.target if self.target.startswith(b"/") else b"/"
        self._answer(301, b"https://" + name + target, b"")

    def on_message_complete(self) -> None:
        pass

    def _answer(self, status: int, location: bytes, body: bytes) -> None:
        if self.done:
            return
        self.done = True
        parts = [status_line(status)]
        for name, value in self.headers():
            parts += (name, b": ", value, b"\r\n")
        if location:
            parts += (b"location: ", location, b"\r\n")
        parts.append(b"content-type: text/plain; charset=utf-8\r\n"
                     b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        parts.append(body)
        transport: Any = self.transport
        transport.write(b"".join(parts))
        transport.loseConnection()


class RedirectFactory(Factory):
    noisy = False

    def __init__(self, headers: Callable[[], Pairs], clock: Any,
                 timeout: Callable[[], float]) -> None:
        self.headers = headers
        self.clock = clock
        self.timeout = timeout
        self.live: set[RedirectProtocol] = set()

    def buildProtocol(self, addr: Any) -> RedirectProtocol:
        return RedirectProtocol(self.headers, self)
