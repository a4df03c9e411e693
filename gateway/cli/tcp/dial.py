"""One tunnel request: connect to the gateway, send CONNECT, read the answer.

``200`` gives the ``GatewayConnection`` itself, held paused (with whatever followed
the answer's head) until the local side joins it to a pipe. Any other status gives a
``Refused`` with the gateway's reason. A gateway that cannot be reached, fails TLS
verification or does not answer in time raises ``TunnelError`` with the message to
show; a cancelled dial (the local connection went away) raises ``CancelledError``.
"""

from __future__ import annotations

import socket
from typing import Any

from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import defer
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import (
    ConnectError,
    ConnectionRefusedError,
    DNSLookupError,
    TCPTimedOutError,
    TimeoutError,
)
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.cli.tcp import messages
from gateway.cli.tcp.endpoints import CONNECT_TIMEOUT, GatewayEndpoints
from gateway.cli.tcp.wire import (
    MAX_BODY,
    BadResponse,
    Refused,
    ResponseHead,
    connect_request,
    error_detail,
)
from gateway.net.pipe import Pipe
from gateway.twisted_ext.connect import connect_protocol

ANSWER_TIMEOUT = 30.0  # seconds from connecting to the answer's head (TLS included)


@implementer(IHalfCloseableProtocol)
class GatewayConnection(Protocol):
    """The gateway's end of one tunnel: first the CONNECT exchange, then the pipe's
    ``b`` side (bytes from the gateway go to the local connection)."""

    transport: Any  # TCP or TLS: a transport that is also a push producer

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.head = ResponseHead()
        self.body = bytearray()
        self.answered: Deferred[GatewayConnection | Refused] = Deferred(self._cancel)
        self.pipe: Pipe | None = None
        self.early: list[bytes] = []  # tunnel bytes that came before the pipe
        self.read_ended = False  # the gateway finished sending before the pipe
        self.lost = False

    # -- the CONNECT exchange

    def connectionMade(self) -> None:
        self.transport.write(self.request)

    def dataReceived(self, data: bytes) -> None:
        if self.pipe is not None:
            self.pipe.from_b(data)
        elif self.head.done and self.head.status == 200:
            self.early.append(data)
        elif self.head.done:
            self._body(data)
        else:
            try:
                if not self.head.feed(data):
                    return
            except BadResponse as exc:
                self._fail(Failure(exc))
                self.transport.abortConnection()
                return
            rest, self.head.rest = self.head.rest, b""
            if self.head.status == 200:
                self.transport.pauseProducing()  # until the local side is ready
                if rest:
                    self.early.append(rest)
                self._answer(self)
            else:
                self._body(rest)

    def _body(self, data: bytes) -> None:
        self.body += data[: MAX_BODY - len(self.body)]
        length = self.head.body_length()
        if (length is not None and len(self.body) >= min(length, MAX_BODY)) or \
                len(self.body) >= MAX_BODY:
            self._refused()
            self.transport.loseConnection()

    def _refused(self) -> None:
        detail = error_detail(bytes(self.body), self.head.header("content-type"))
        self._answer(Refused(self.head.status, detail))

    def _answer(self, result: GatewayConnection | Refused) -> None:
        if not self.answered.called:
            self.answered.callback(result)

    def _fail(self, failure: Failure) -> None:
        if not self.answered.called:
            self.answered.errback(failure)

    def _cancel(self, _: Deferred[Any]) -> None:
        if self.transport is not None:
            self.transport.abortConnection()

    # -- the end of the connection, before and after the pipe

    def readConnectionLost(self) -> None:
        """The gateway finished sending (plain TCP only; TLS ends the whole connection)."""
        if self.pipe is not None:
            self.pipe.eof_from(self.transport)
        elif self.head.done and self.head.status == 200:
            self.read_ended = True
        else:
            self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        pass  # the pipe closes the connection once both directions have ended

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.lost = True
        if self.pipe is not None:
            self.pipe.lost("the gateway closed the tunnel")
        elif self.head.done and self.head.status != 200:
            self._refused()  # a body without Content-Length ends with the connection
        else:
            self._fail(reason)

    def join(self, pipe: Pipe) -> None:
        """The local side is ready: replay what came early, then let bytes flow."""
        self.pipe = pipe
        early, self.early = self.early, []
        for data in early:
            pipe.from_b(data)
        if self.lost:
            pipe.lost("the gateway closed the tunnel")
        elif self.read_ended:
            pipe.eof_from(self.transport)
        else:
            self.transport.resumeProducing()


async def dial(reactor: Any, endpoints: GatewayEndpoints, authority: str,
               token: str | None) -> GatewayConnection | Refused:
    """Ask the gateway for a tunnel to ``authority``; ``TunnelError`` if it cannot."""
    gateway = endpoints.gateway
    protocol = GatewayConnection(connect_request(authority, token))
    try:
        await connect_protocol(endpoints.endpoint(), protocol)
    except CancelledError:
        raise
    except Exception as exc:
        raise messages.TunnelError(messages.unreachable(gateway, _why(exc))) from None
    answered = protocol.answered
    answered.addTimeout(ANSWER_TIMEOUT, reactor)
    try:
        return await answered
    except CancelledError:
        raise
    except defer.TimeoutError:
        raise messages.TunnelError(messages.unreachable(
            gateway, f"connected, but no answer within {ANSWER_TIMEOUT:.0f} s")) from None
    except VerificationError as exc:
        raise messages.TunnelError(messages.tls_failed(
            gateway, f"the certificate is not valid for {gateway.host}: {exc}")) from None
    except SSL.Error as exc:
        why = ssl_reason(exc)
        if "certificate verify failed" in why:
            raise messages.TunnelError(messages.tls_failed(gateway, why)) from None
        raise messages.TunnelError(messages.tls_broken(gateway, why)) from None
    except BadResponse as exc:
        raise messages.TunnelError(messages.not_a_gateway(gateway, str(exc))) from None
    except Exception:
        raise messages.TunnelError(messages.not_a_gateway(
            gateway, "it closed the connection without answering")) from None


def ssl_reason(exc: SSL.Error) -> str:
    """OpenSSL's reasons (``certificate verify failed``) without the library names."""
    reasons = []
    for item in exc.args[0] if exc.args and isinstance(exc.args[0], list) else []:
        if isinstance(item, tuple) and item:
            reasons.append(str(item[-1]))
    return ", ".join(reasons) or str(exc) or type(exc).__name__


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, DNSLookupError | socket.gaierror):
        return "its name does not resolve"
    if isinstance(exc, TimeoutError | TCPTimedOutError):
        return f"no connection within {CONNECT_TIMEOUT:.0f} s"
    if isinstance(exc, ConnectError) and exc.osError is not None:
        return str(exc.osError)
    return str(exc) or type(exc).__name__
