#!/usr/bin/env python3
"""A misbehaving HTTP/1.1 upstream for the soak test (stdlib only, one thread per connection).

Usage: python soak_fault_upstream.py --port N   (0: the kernel picks; prints ``READY <port>``)

What each path does is fixed, so the client that asked knows which failure it provoked:

* ``/ok/<n>``                    200, n bytes with Content-Length (byte i is ``i % 256``),
                                 keep-alive: the control case on the same upstream.
* ``/close-mid-body/<n>``        200 with Content-Length n, n // 2 bytes, then FIN.
* ``/reset-mid-body/<n>``        200 with Content-Length n, n // 2 bytes, then RST.
* ``/chunked-mid-body/<n>``      200 chunked, n // 2 bytes in chunks, then FIN without the
                                 last chunk.
* ``/close-before-headers``      FIN as soon as the request has been read.
* ``/reset-before-headers``      RST as soon as the request has been read.
* ``/hang``                      reads the request and never answers; the connection is
                                 held until the peer closes it (at most HOLD_MAX seconds).

Anything else gets 404. Request bodies (Content-Length or chunked) are read and dropped.
Only loopback addresses are accepted for ``--host``. SIGTERM/SIGINT end it with status 0.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import struct
import sys
import threading
from types import FrameType

CHUNK = 64 * 1024
PATTERN = bytes(range(256)) * (CHUNK // 256)
MAX_HEAD = 64 * 1024
MAX_BYTES = 1 << 30
HOLD_MAX = 3600.0
IO_TIMEOUT = 120.0


class Closed(Exception):
    pass


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise Closed
        self.buf += data

    def read_until(self, marker: bytes, limit: int) -> bytes:
        while marker not in self.buf:
            if len(self.buf) > limit:
                raise Closed
            self._fill()
        head, _, self.buf = self.buf.partition(marker)
        return head

    def read_exact(self, n: int) -> None:
        while n > 0:
            if not self.buf:
                self._fill()
            take = min(n, len(self.buf))
            self.buf = self.buf[take:]
            n -= take

    def read_request(self) -> tuple[str, str, dict[str, str]]:
        head = self.read_until(b"\r\n\r\n", MAX_HEAD).decode("latin-1")
        lines = head.split("\r\n")
        method, target, _ = [*lines[0].split(" ", 2), "", ""][:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size = int(self.read_until(b"\r\n", 4096).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.read_until(b"\r\n", 4096):
                        pass  # trailers up to the empty line
                    break
                self.read_exact(size + 2)
        elif headers.get("content-length", "").isdigit():
            self.read_exact(int(headers["content-length"]))
        return method, target, headers

    def send_pattern(self, n: int, chunked: bool = False) -> None:
        sent = 0
        while sent < n:
            piece = PATTERN[: min(CHUNK, n - sent)]
            if chunked:
                self.sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.sock.sendall(piece)
            sent += len(piece)

    def reset(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def head(status: str, headers: list[str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", "X-Upstream-Name: fault", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def size_of(arg: str) -> int:
    n = int(arg)
    if not 0 <= n <= MAX_BYTES:
        raise ValueError(arg)
    return n


def serve(sock: socket.socket) -> None:
    conn = Conn(sock)
    sock.settimeout(IO_TIMEOUT)
    try:
        while True:
            method, target, _ = conn.read_request()
            parts = target.split("?", 1)[0].split("/")
            kind = parts[1] if len(parts) > 1 else ""
            arg = parts[2] if len(parts) > 2 else "0"
            if kind == "ok":
                n = size_of(arg)
                sock.sendall(head("200 OK", ["Content-Type: application/octet-stream",
                                             f"Content-Length: {n}"]))
                if method != "HEAD":
                    conn.send_pattern(n)
                continue
            if kind in ("close-mid-body", "reset-mid-body"):
                n = size_of(arg)
                sock.sendall(head("200 OK", ["Content-Type: application/octet-stream",
                                             f"Content-Length: {n}"]))
                conn.send_pattern(n // 2)
                if kind == "reset-mid-body":
                    conn.reset()
                return
            if kind == "chunked-mid-body":
                n = size_of(arg)
                sock.sendall(head("200 OK", ["Content-Type: application/octet-stream",
                                             "Transfer-Encoding: chunked"]))
                conn.send_pattern(n // 2, chunked=True)
                return
            if kind == "close-before-headers":
                return
            if kind == "reset-before-headers":
                conn.reset()
                return
            if kind == "hang":
                sock.settimeout(HOLD_MAX)
                while sock.recv(65536):
                    pass  # hold until the peer closes
                return
            body = b"not found\n"
            sock.sendall(head("404 Not Found", [f"Content-Length: {len(body)}"]) + body)
    except (Closed, OSError, ValueError):
        return
    finally:
        sock.close()


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if not ipaddress.ip_address(args.host).is_loopback:
        parser.error("only loopback addresses")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(256)
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    sys.stdout.write(f"READY {listener.getsockname()[1]}\n")
    sys.stdout.flush()
    try:
        while True:
            sock, _ = listener.accept()
            threading.Thread(target=serve, args=(sock,), daemon=True).start()
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(main())
