"""Active health check probes: one short connection per probe, bounded by ``timeout``.

Each kind is a sans-io session (``start()`` gives the bytes to send, ``feed(data)`` the
bytes to answer, ``verdict`` becomes ``True``/``False`` once decided); one small protocol
moves the bytes. ``run_probe`` connects (TLS for https upstreams), closes the connection
once the session decided, aborts it (or the connection attempt) at the deadline, and
fires its Deferred only when the connection is gone, so nothing outlives a probe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any
from typing import Protocol as TypingProtocol

import httptools
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
)
from h2.exceptions import H2Error
from OpenSSL import SSL
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.config.upstreams import HealthCheck, Upstream
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.net.endpoints import client_endpoint
from gateway.tls.client import TLSClientConfig, connection_creator
from gateway.twisted_ext.connect import connect_protocol

#: ``probe(reactor, host, check, tls)``: fires True (healthy) or False, never fails.
Probe = Callable[[Any, UpstreamHost, HealthCheck, "TLSClientConfig | None"], "Deferred[bool]"]

USER_AGENT = b"gateway-health-check"
GRPC_PATH = b"/grpc.health.v1.Health/Check"
GRPC_SERVING = 1
MAX_RESPONSE = 64 * 1024  # bytes read at most before a probe gives up
_DEFAULT_PORTS = {"http": 80, "https": 443}


class ProbeSession(TypingProtocol):
    """What ``run_probe`` drives: bytes out, bytes in, a verdict when decided."""

    verdict: bool | None

    def start(self) -> bytes: ...
    def feed(self, data: bytes) -> bytes: ...


def _authority(upstream: Upstream, always_port: bool) -> str:
    host = upstream.host if upstream.host.isascii() else upstream.host.encode("idna").decode()
    host = f"[{host}]" if ":" in host else host
    if not always_port and _DEFAULT_PORTS.get(upstream.scheme) == upstream.port:
        return host
    return f"{host}:{upstream.port}"


def _token(value: str, what: str) -> bytes:
    data = value.encode("ascii", errors="replace")
    if not data or any(b <= 0x20 or b == 0x7F for b in data):
        raise ValueError(f"health check {what} {value!r} cannot be sent in a request")
    return data


# -- http


def http_request(host: UpstreamHost, check: HealthCheck) -> bytes:
    """``GET <path>`` with Host, User-Agent and ``Connection: close``."""
    path = _token(check.path, "path")
    authority = _token(check.host or _authority(host.upstream, always_port=False), "host")
    return (b"GET " + path + b" HTTP/1.1\r\nHost: " + authority + b"\r\nUser-Agent: "
            + USER_AGENT + b"\r\nAccept: */*\r\nConnection: close\r\n\r\n")


class HttpStatusSession:
    """Healthy when the response status is in one of the (start, end) ranges."""

    def __init__(self, request: bytes, expected: tuple[tuple[int, int], ...]) -> None:
        self.verdict: bool | None = None
        self.status = 0
        self._request = request
        self._expected = expected
        self._parser = httptools.HttpResponseParser(self)
        self._read = 0

    def start(self) -> bytes:
        return self._request

    def feed(self, data: bytes) -> bytes:
        if self.verdict is not None:
            return b""
        self._read += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # a 101: decided in on_headers_complete
        except httptools.HttpParserError:
            self.verdict = self.verdict or False  # not HTTP: a failure (unless decided)
        if self.verdict is None and self._read > MAX_RESPONSE:
            self.verdict = False
        return b""

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            return  # 100 Continue and friends: the final response follows
        self.status = status
        self.verdict = any(start <= status < end for start, end in self._expected)


# -- tcp


class TcpPayloadSession:
    """Writes ``send``; healthy when every ``receive`` block was read, in order (Envoy's
    fuzzy match: blocks need not be contiguous, so reading their concatenation passes).
    Without ``receive`` the probe is healthy once connected."""

    def __init__(self, send: bytes, receive: tuple[bytes, ...]) -> None:
        self.verdict: bool | None = None if receive else True
        self._send = send
        self._blocks = receive
        self._next = 0
        self._position = 0
        self._buffer = bytearray()

    def start(self) -> bytes:
        return self._send

    def feed(self, data: bytes) -> bytes:
        if self.verdict is not None:
            return b""
        self._buffer += data
        while self._next < len(self._blocks):
            found = self._buffer.find(self._blocks[self._next], self._position)
            if found < 0:
                break
            self._position = found + len(self._blocks[self._next])
            self._next += 1
        if self._next == len(self._blocks):
            self.verdict = True
        elif len(self._buffer) > MAX_RESPONSE:
            self.verdict = False
        return b""


# -- grpc


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint too long")


def health_request(service: str) -> bytes:
    """``HealthCheckRequest{service}`` as protobuf (field 1, string; empty is omitted)."""
    name = service.encode()
    return b"\x0a" + encode_varint(len(name)) + name if name else b""


def serving_status(message: bytes) -> int:
    """Field 1 (``status``) of a ``HealthCheckResponse``; 0 (UNKNOWN) when absent."""
    status, pos = 0, 0
    while pos < len(message):
        key, pos = _varint(message, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(message, pos)
            if field == 1:
                status = value
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            length, pos = _varint(message, pos)
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > len(message):
            raise ValueError("truncated protobuf field")
    return status


def grpc_frame(message: bytes) -> bytes:
    """The gRPC length-prefixed message (not compressed)."""
    return b"\x00" + struct.pack(">I", len(message)) + message


class GrpcHealthSession:
    """One ``grpc.health.v1.Health/Check`` call over HTTP/2 (client side, prior knowledge)."""

    def __init__(self, scheme: bytes, authority: bytes, service: str) -> None:
        self.verdict: bool | None = None
        self.status: int | None = None
        self.grpc_status: bytes | None = None
        self._conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self._headers = [(b":method", b"POST"), (b":scheme", scheme), (b":path", GRPC_PATH),
                         (b":authority", authority), (b"content-type", b"application/grpc"),
                         (b"te", b"trailers"), (b"user-agent", USER_AGENT)]
        self._request = grpc_frame(health_request(service))
        self._http_ok = False
        self._body = bytearray()
        self._stream = 0
        self._head = b""  # the first bytes read: must be a SETTINGS frame (server preface)
        self._read = 0

    def start(self) -> bytes:
        self._conn.initiate_connection()
        self._stream = self._conn.get_next_available_stream_id()
        self._conn.send_headers(self._stream, self._headers)
        self._conn.send_data(self._stream, self._request, end_stream=True)
        return self._conn.data_to_send()

    def feed(self, data: bytes) -> bytes:
        if self.verdict is not None:
            return b""
        self._read += len(data)
        if len(self._head) < 9:
            self._head += data[:9 - len(self._head)]
        if (len(self._head) == 9 and self._head[3] != 0x04) or self._read > MAX_RESPONSE:
            self.verdict = False  # not HTTP/2 (h2 would wait for a frame of any size)
            return b""
        try:
            events = self._conn.receive_data(data)
        except H2Error:
            self.verdict = False
            return b""
        for event in events:
            if isinstance(event, ResponseReceived | TrailersReceived):
                self._on_fields(event.headers or [])
            elif isinstance(event, DataReceived) and event.data is not None:
                self._body += event.data
                self._conn.acknowledge_received_data(event.flow_controlled_length or 0,
                                                     self._stream)
            elif isinstance(event, StreamEnded):
                self.verdict = self._decide()
            elif isinstance(event, StreamReset | ConnectionTerminated):
                self.verdict = False
            if self.verdict is not None:
                break
        return self._conn.data_to_send()

    def _on_fields(self, fields: Any) -> None:
        for name, value in fields:
            name = name.encode() if isinstance(name, str) else name
            value = value.encode() if isinstance(value, str) else value
            if name == b":status":
                self._http_ok = value == b"200"
            elif name == b"grpc-status":
                self.grpc_status = value

    def _decide(self) -> bool:
        if not self._http_ok or self.grpc_status != b"0" or len(self._body) < 5:
            return False
        compressed, length = self._body[0], struct.unpack(">I", self._body[1:5])[0]
        if compressed or len(self._body) < 5 + length:
            return False
        try:
            self.status = serving_status(bytes(self._body[5:5 + length]))
        except ValueError:
            return False
        return self.status == GRPC_SERVING


# -- running a probe


class _ProbeProtocol(Protocol):
    def __init__(self, session: ProbeSession, lost: Callable[[bool], None]) -> None:
        self.session = session
        self._lost = lost
        self._closing = False

    def connectionMade(self) -> None:
        self._write(self.session.start())

    def dataReceived(self, data: bytes) -> None:
        self._write(self.session.feed(data))

    def _write(self, data: bytes) -> None:
        if data and not self._closing:
            self.transport.write(data)  # type: ignore[union-attr]
        if self.session.verdict is not None and not self._closing:
            self._closing = True
            self.transport.loseConnection()  # type: ignore[union-attr]

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self._lost(self.session.verdict is True)


class _Attempt:
    """One connection for one session; the deadline aborts whatever is still open."""

    def __init__(self, reactor: Any, endpoint: Any, session: ProbeSession, timeout: float
                 ) -> None:
        self.result: Deferred[bool] = Deferred(lambda _: self._abort())
        self._protocol = _ProbeProtocol(session, self._finish)
        self._connected = False
        self._timer = reactor.callLater(timeout, self._abort)
        self._connecting: Deferred[Any] = connect_protocol(endpoint, self._protocol)
        self._connecting.addCallbacks(self._on_connected, lambda _: self._finish(False))

    def _on_connected(self, _: object) -> None:
        self._connected = True

    def _abort(self) -> None:
        if self._connected:
            self._protocol.abort()
        else:
            self._connecting.cancel()

    def _finish(self, healthy: bool) -> None:
        if self._timer.active():
            self._timer.cancel()
        if not self.result.called:
            self.result.callback(healthy)


def run_probe(reactor: Any, host: UpstreamHost, timeout: float, session: ProbeSession,
              tls: IOpenSSLClientConnectionCreator | None = None) -> Deferred[bool]:
    """Connect to ``host``, let ``session`` talk, fire its verdict (False on any error or
    at ``timeout``). Cancelling the Deferred aborts the probe."""
    up = host.upstream
    endpoint = client_endpoint(reactor, up.host, up.port, timeout)
    if tls is not None:
        endpoint = wrapClientTLS(tls, endpoint)
    return _Attempt(reactor, endpoint, session, timeout).result


@implementer(IOpenSSLClientConnectionCreator)
class _WithALPN:
    """Another creator's connections, offering ``protocols`` in ALPN instead."""

    def __init__(self, inner: IOpenSSLClientConnectionCreator, protocols: list[bytes]) -> None:
        self._inner = inner
        self._protocols = protocols

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        connection = self._inner.clientConnectionForTLS(tlsProtocol)
        connection.set_alpn_protos(self._protocols)
        return connection


def _tls_for(host: UpstreamHost, tls: TLSClientConfig | None, alpn: list[bytes] | None = None
             ) -> IOpenSSLClientConnectionCreator | None:
    if host.upstream.scheme != "https":
        return None
    creator = connection_creator(tls or TLSClientConfig("", False, None, None, None),
                                 host.upstream.host)
    return _WithALPN(creator, alpn) if alpn else creator


def probe_http(reactor: Any, host: UpstreamHost, check: HealthCheck,
               tls: TLSClientConfig | None) -> Deferred[bool]:
    session = HttpStatusSession(http_request(host, check), check.expected_statuses)
    return run_probe(reactor, host, check.timeout, session, _tls_for(host, tls))


def probe_tcp(reactor: Any, host: UpstreamHost, check: HealthCheck,
              tls: TLSClientConfig | None) -> Deferred[bool]:
    """Plain TCP, also toward https upstreams (the payloads are the bytes on the wire)."""
    return run_probe(reactor, host, check.timeout, TcpPayloadSession(check.send, check.receive))


def probe_grpc(reactor: Any, host: UpstreamHost, check: HealthCheck,
               tls: TLSClientConfig | None) -> Deferred[bool]:
    creator = _tls_for(host, tls, [b"h2"])
    authority = _token(check.authority or _authority(host.upstream, always_port=True), "host")
    session = GrpcHealthSession(b"https" if creator else b"http", authority, check.service_name)
    return run_probe(reactor, host, check.timeout, session, creator)


PROBES: dict[str, Probe] = {"http": probe_http, "tcp": probe_tcp, "grpc": probe_grpc}
