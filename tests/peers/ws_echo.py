#!/usr/bin/env python3
"""Websocket echo upstream (stdlib only): RFC 6455 handshake, then every text or binary
frame is sent back; close frames are answered and end the connection.

Usage: python ws_echo.py --port 0   (prints ``READY <port>``)
Requests without ``Upgrade: websocket`` get a plain 200 ``not a websocket request``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import signal
import socket
import socketserver
import struct
import sys
from types import FrameType

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_FRAME = 16 * 1024 * 1024


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


class Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk or len(head) > 65536:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"upgrade", b"").lower() != b"websocket":
            body = b"not a websocket request\n"
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            return
        accept = base64.b64encode(hashlib.sha1(headers[b"sec-websocket-key"] + GUID).digest())
        sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                     b"connection: Upgrade\r\nsec-websocket-accept: " + accept + b"\r\n\r\n")
        while True:
            try:
                b1, b2 = read_exact(sock, 2)
            except (ConnectionError, TimeoutError, OSError):
                return
            opcode = b1 & 0x0F
            length = b2 & 0x7F
            if length == 126:
                length = struct.unpack("!H", read_exact(sock, 2))[0]
            elif length == 127:
                length = struct.unpack("!Q", read_exact(sock, 8))[0]
            if length > MAX_FRAME:
                return
            mask = read_exact(sock, 4) if b2 & 0x80 else b"\0\0\0\0"
            payload = bytes(c ^ mask[i % 4] for i, c in enumerate(read_exact(sock, length)))
            sock.sendall(frame(opcode, payload))
            if opcode == 8:
                return


def frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One final frame (server frames unmasked; pass ``mask`` for client frames)."""
    head = bytes([0x80 | opcode])
    bit = 0x80 if mask is not None else 0
    n = len(payload)
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if mask is not None:
        payload = mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + payload


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _exit(signum: int, frame_: FrameType | None) -> None:
    raise SystemExit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    signal.signal(signal.SIGTERM, _exit)
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
