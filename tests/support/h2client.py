"""A blocking HTTP/2 client over one connection (h2c prior knowledge or TLS with ALPN).

curl 7.88 (Debian 12) cannot reuse an h2c connection for a second URL ("Error in the
HTTP2 framing layer", against nginx too), and h2load cannot read slowly, so tests that
need several requests on one HTTP/2 connection, or a slow reader, use this.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events

from .processes import is_loopback


@dataclass
class H2Response:
    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    reset: int | None = None


def _h2_context(given: ssl.SSLContext) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = given.check_hostname
    context.verify_mode = given.verify_mode
    for cert in given.get_ca_certs(binary_form=True):
        context.load_verify_locations(cadata=cert)
    context.set_alpn_protocols(["h2"])
    return context


class H2Client:
    """Requests one at a time on one connection. ``slow`` delays each window update
    (the server's sending stalls on flow control, as behind a slow reader);
    ``validate=False`` lets a test send what h2 would refuse to (malformed requests)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, *,
                 tls: ssl.SSLContext | None = None, server_name: str | None = None,
                 validate: bool = True, source: str = "", tls_as_given: bool = False
                 ) -> None:
        if not is_loopback(host) or (source and not is_loopback(source)):
            raise ValueError("tests only talk to loopback")
        sock = socket.create_connection((host, port), timeout=timeout,
                                        source_address=(source, 0) if source else None)
        if tls is not None:
            # ALPN is a property of the context: setting it on the caller's would make
            # their later HTTP/1.1 connections negotiate h2 (and then fail). A context of
            # our own, trusting what theirs trusts, is used instead, unless the caller
            # made theirs for this (``tls_as_given``: it offers h2, and may carry a
            # client certificate, which a copy would not).
            if not tls_as_given:
                tls = _h2_context(tls)
            sock = tls.wrap_socket(sock, server_hostname=server_name or host)
            if sock.selected_alpn_protocol() != "h2":
                raise ConnectionError("the server did not negotiate h2")
        self.scheme = "https" if tls is not None else "http"
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                      validate_outbound_headers=validate))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def request(self, method: str, path: str, authority: str,
                headers: list[tuple[str, str]] | None = None, body: bytes = b"",
                slow: float = 0.0) -> H2Response:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", method), (":scheme", self.scheme),
                                     (":authority", authority), (":path", path),
                                     *(headers or [])], end_stream=not body)
        if body:
            self.conn.send_data(sid, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        response = H2Response()
        chunks: list[bytes] = []
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            ended = False
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                    response.headers = [(str(k), str(v)) for k, v in event.headers]
                    response.status = int(dict(response.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived):
                    if event.stream_id == sid:
                        chunks.append(event.data)
                    if slow:
                        time.sleep(slow)
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    ended = True
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    response.reset = int(event.error_code)
                    ended = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise ConnectionError(f"GOAWAY {event.error_code!r}")
            self.sock.sendall(self.conn.data_to_send())
            if ended:
                response.body = b"".join(chunks)
                return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
