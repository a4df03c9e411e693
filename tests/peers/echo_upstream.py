#!/usr/bin/env python3
"""Echo upstream for the gateway's tests: a stdlib-only HTTP/1.1 server.

Usage: python echo_upstream.py --port N [--host 127.0.0.1] [--name NAME] [--quiet]

Every method on every path answers 200 with a JSON body describing the request::

    {"name": NAME, "method": "POST", "path": "/raw/target?q=1", "version": "HTTP/1.1",
     "headers": [["Host", "..."], ["X-A", "1"], ["X-A", "2"]],
     "body_length": 3, "body_sha256": "<hex>", "client": ["127.0.0.1", 54321]}

``path`` is the raw request target exactly as received; ``headers`` keeps order, case
and duplicates. Request bodies may use Content-Length or chunked transfer encoding.

Special paths (matched on the path part of the target, query ignored):

* ``/status/<code>``  answer with that status (200..599); body as above unless the status
  forbids one (204, 304) or the method is HEAD.
* ``/delay/<seconds>`` sleep (float, capped at 30 s), then answer as above.
* ``/bytes/<n>``      stream n bytes (capped at 1 GiB) with Content-Length, in 64 KiB
  chunks; byte i of the body is ``i % 256``.
* ``/mcp-session/<id>`` answer as above with ``Mcp-Session-Id: <id>`` (an MCP server
  starting a session).

``--tls-cert FILE`` serves HTTPS with that PEM (chain and key); ``--client-ca FILE``
then requires client certificates signed by that CA.

Port 0 lets the kernel pick the port. Once listening it prints ``READY <port>`` on
stdout (flushed). SIGTERM/SIGINT end it with exit status 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

MAX_DELAY = 30.0
MAX_BYTES = 1 << 30
CHUNK = 64 * 1024
PATTERN = bytes(range(256)) * (CHUNK // 256)
NO_BODY_STATUSES = frozenset({204, 304})
MAX_CHUNK_LINE = 4096
MAX_TRAILERS = 100
MAX_CHUNKS = 10_000_000
IO_TIMEOUT = 60.0  # seconds a connection may sit idle / stall mid-request


class BadRequest(Exception):
    pass


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are written apart: with Nagle's algorithm the body waited for
    # the peer's delayed ACK of the head, 40 ms on every keep-alive request after the
    # first (the gateway keeps its upstream connections alive).
    disable_nagle_algorithm = True
    server_version = "echo-upstream/1"
    upstream_name = "echo"
    quiet = False
    timeout = IO_TIMEOUT

    # Every method name dispatches to the same handler.
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("do_"):
            return self._handle
        raise AttributeError(attr)

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)

    # -- body reading ------------------------------------------------------------

    def _read_exact(self, n: int, digest: Any) -> int:
        total = 0
        while total < n:
            data = self.rfile.read(min(CHUNK, n - total))
            if not data:
                raise BadRequest("body ended early")
            digest.update(data)
            total += len(data)
        return total

    def _read_line(self) -> bytes:
        line = self.rfile.readline(MAX_CHUNK_LINE + 1)
        if len(line) > MAX_CHUNK_LINE or not line.endswith(b"\n"):
            raise BadRequest("bad chunk framing")
        return line

    def _read_body(self) -> tuple[int, str]:
        digest = hashlib.sha256()
        te = ",".join(self.headers.get_all("Transfer-Encoding") or []).lower()
        if te:
            codings = [c.strip() for c in te.split(",") if c.strip()]
            if codings[-1:] != ["chunked"]:
                raise BadRequest(f"unsupported transfer-encoding {te!r}")
            total = 0
            for _ in range(MAX_CHUNKS):
                size_line = self._read_line().split(b";", 1)[0].strip()
                try:
                    size = int(size_line, 16)
                except ValueError as exc:
                    raise BadRequest("bad chunk size") from exc
                if size < 0:
                    raise BadRequest("bad chunk size")
                if size == 0:
                    break
                total += self._read_exact(size, digest)
                if self.rfile.read(2) != b"\r\n":
                    raise BadRequest("missing CRLF after chunk")
            else:
                raise BadRequest("too many chunks")
            for _ in range(MAX_TRAILERS):
                if self._read_line() in (b"\r\n", b"\n"):
                    break
            else:
                raise BadRequest("too many trailers")
            return total, digest.hexdigest()
        lengths = set(self.headers.get_all("Content-Length") or [])
        if len(lengths) > 1:
            raise BadRequest("conflicting Content-Length")
        if lengths:
            raw = lengths.pop().strip()
            if not raw.isdigit():
                raise BadRequest("bad Content-Length")
            return self._read_exact(int(raw), digest), digest.hexdigest()
        return 0, digest.hexdigest()

    # -- responses ---------------------------------------------------------------

    def _raw_target(self) -> str:
        words = self.requestline.split()
        return words[1] if len(words) >= 2 else self.path

    def _send(self, status: int, body: bytes, content_type: str,
              extra: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        for name, value in extra or ():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("X-Upstream-Name", self.upstream_name)
        if status not in NO_BODY_STATUSES:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status not in NO_BODY_STATUSES:
            self.wfile.write(body)

    def _fail(self, status: int, message: str) -> None:
        self.close_connection = True
        body = json.dumps({"name": self.upstream_name, "error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _stream_bytes(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("X-Upstream-Name", self.upstream_name)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command == "HEAD":
            return
        sent = 0
        while sent < n:
            piece = PATTERN[: min(CHUNK, n - sent)]
            self.wfile.write(piece)
            sent += len(piece)

    def _handle(self) -> None:
        target = self._raw_target()
        try:
            body_length, body_sha256 = self._read_body()
        except BadRequest as exc:
            self._fail(400, str(exc))
            return
        path = urlsplit(target).path
        parts = path.split("/")
        status = 200
        extra: list[tuple[str, str]] = []
        if len(parts) == 3 and parts[0] == "":
            kind, arg = parts[1], parts[2]
            try:
                if kind == "status":
                    status = int(arg)
                    if not 200 <= status <= 599:
                        raise ValueError(arg)
                elif kind == "delay":
                    delay = float(arg)
                    if not delay >= 0:  # also rejects NaN
                        raise ValueError(arg)
                    time.sleep(min(delay, MAX_DELAY))
                elif kind == "mcp-session":
                    extra.append(("Mcp-Session-Id", arg))
                elif kind == "bytes":
                    count = int(arg)
                    if count < 0:
                        raise ValueError(arg)
                    self._stream_bytes(min(count, MAX_BYTES))
                    return
            except ValueError:
                self._fail(400, f"bad argument {arg!r} for /{kind}/")
                return
        client = list(self.client_address[:2])
        description = {
            "name": self.upstream_name,
            "method": self.command,
            "path": target,
            "version": self.request_version,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_length": body_length,
            "body_sha256": body_sha256,
            "client": client,
        }
        body = json.dumps(description).encode() + b"\n"
        self._send(status, body, "application/json", extra)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class Server6(Server):
    address_family = socket.AF_INET6


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True, help="0 = pick a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", default="echo")
    parser.add_argument("--quiet", action="store_true", help="no access log on stderr")
    parser.add_argument("--tls-cert", help="PEM file with certificate chain and key: serve HTTPS")
    parser.add_argument("--client-ca", help="with --tls-cert: require client certificates "
                        "signed by this CA (PEM file)")
    args = parser.parse_args(argv)

    handler = type("Handler", (EchoHandler,), {"upstream_name": args.name, "quiet": args.quiet})
    server_cls = Server6 if ":" in args.host else Server
    server = server_cls((args.host.strip("[]"), args.port), handler)
    if args.tls_cert:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert)
        if args.client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(args.client_ca)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    try:
        port = server.server_address[1]
        sys.stdout.write(f"READY {port}\n")
        sys.stdout.flush()
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
