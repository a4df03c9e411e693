#!/usr/bin/env python3
"""gRPC health peer for the gateway's tests: ``grpc.health.v1.Health/Check`` over HTTP/2
(cleartext, prior knowledge), stdlib plus ``h2``.

Usage: python grpc_health.py [--host 127.0.0.1] [--port 0] [--serving a,b]
       [--tls-cert FILE]

``Check`` answers SERVING (1) for the empty service name and every name listed in
``--serving``, NOT_SERVING (2) for any other name, always with ``grpc-status: 0``. Other
paths get a trailers-only response with ``grpc-status: 12`` (UNIMPLEMENTED). A
connection that does not start with the HTTP/2 preface is answered as HTTP/1.1 with
``200 grpc-health peer`` and closed, so the peer can also stand in as a plain upstream.
``--tls-cert FILE`` (PEM chain and key) serves TLS with ALPN ``h2`` instead.

Port 0 lets the kernel pick the port. Once listening it prints ``READY <port>`` on
stdout (flushed). SIGTERM/SIGINT end it with exit status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import socketserver
import ssl
import struct
import sys
from types import FrameType
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded
from h2.exceptions import H2Error

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CHECK_PATH = b"/grpc.health.v1.Health/Check"
IO_TIMEOUT = 30.0
MAX_BODY = 64 * 1024
HTTP1_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 16\r\n"
                b"X-Upstream-Name: grpc-health\r\nConnection: close\r\n\r\ngrpc-health peer")


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64 and pos < len(data):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("bad varint")


def service_name(message: bytes) -> str:
    """Field 1 (string) of a ``HealthCheckRequest``; other fields are skipped."""
    name, pos = b"", 0
    while pos < len(message):
        key, pos = read_varint(message, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = read_varint(message, pos)
        elif wire == 2:
            length, pos = read_varint(message, pos)
            if field == 1:
                name = message[pos:pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    return name.decode()


def grpc_message(frame: bytes) -> bytes:
    if len(frame) < 5 or frame[0] != 0:
        raise ValueError("not an uncompressed gRPC message")
    (length,) = struct.unpack(">I", frame[1:5])
    return frame[5:5 + length]


class Handler(socketserver.BaseRequestHandler):
    serving: frozenset[str] = frozenset({""})

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(IO_TIMEOUT)
        first = b""
        while len(first) < len(PREFACE):
            chunk = sock.recv(len(PREFACE) - len(first))
            if not chunk:
                return
            first += chunk
            if not PREFACE.startswith(first):
                self.answer_http1(sock, first)
                return
        conn = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        conn.initiate_connection()
        bodies: dict[int, bytearray] = {}
        paths: dict[int, bytes] = {}
        events = conn.receive_data(first)
        while True:
            for event in events:
                if isinstance(event, RequestReceived):
                    paths[event.stream_id] = dict(event.headers or []).get(b":path", b"")
                    bodies[event.stream_id] = bytearray()
                elif isinstance(event, DataReceived) and event.stream_id in bodies:
                    bodies[event.stream_id] += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length or 0,
                                                   event.stream_id)
                    if len(bodies[event.stream_id]) > MAX_BODY:
                        conn.close_connection()
                elif isinstance(event, StreamEnded) and event.stream_id in paths:
                    self.respond(conn, event.stream_id, paths.pop(event.stream_id),
                                 bytes(bodies.pop(event.stream_id)))
                elif isinstance(event, ConnectionTerminated):
                    sock.sendall(conn.data_to_send())
                    return
            sock.sendall(conn.data_to_send())
            data = sock.recv(65536)
            if not data:
                return
            try:
                events = conn.receive_data(data)
            except H2Error:
                sock.sendall(conn.data_to_send())
                return

    def answer_http1(self, sock: socket.socket, data: bytes) -> None:
        """Read the request head, answer, then drain so closing does not reset."""
        while b"\r\n\r\n" not in data and len(data) < MAX_BODY:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        sock.sendall(HTTP1_ANSWER)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(2.0)
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass

    def respond(self, conn: H2Connection, stream: int, path: bytes, body: bytes) -> None:
        head = [(b":status", b"200"), (b"content-type", b"application/grpc")]
        if path != CHECK_PATH:
            conn.send_headers(stream, [*head, (b"grpc-status", b"12")], end_stream=True)
            return
        try:
            name = service_name(grpc_message(body))
        except (ValueError, UnicodeDecodeError):
            conn.send_headers(stream, [*head, (b"grpc-status", b"13")], end_stream=True)
            return
        status = 1 if name in self.serving else 2
        if not self.server.quiet:  # type: ignore[attr-defined]
            print(f"check service={name!r} status={status}", flush=True)
        reply = b"\x08" + bytes([status])
        conn.send_headers(stream, head)
        conn.send_data(stream, b"\x00" + struct.pack(">I", len(reply)) + reply)
        conn.send_headers(stream, [(b"grpc-status", b"0")], end_stream=True)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    quiet = False
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = super().get_request()
        if self.tls is not None:
            sock.settimeout(IO_TIMEOUT)
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not self.quiet:
            super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--serving", default="", help="comma-separated service names")
    parser.add_argument("--tls-cert", default=None, help="PEM file with chain and key")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    Handler.serving = frozenset({"", *filter(None, args.serving.split(","))})
    server = Server((args.host, args.port), Handler)
    server.quiet = args.quiet
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert)
        context.set_alpn_protocols(["h2"])
        server.tls = context

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
