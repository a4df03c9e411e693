#!/usr/bin/env python3
"""A TCP service behind tunnel tests: stdlib only, one thread per connection.

Usage: python tcp_echo.py [--host 127.0.0.1] [--port 0]

Prints ``READY <port>`` once listening and ``ACCEPT <n>`` for every connection (so a
test can tell that a refused tunnel never reached it). The first line a client sends
picks the mode; anything else is echoed back chunk by chunk:

* ``SHUT``: answer ``server done``, close the sending side, then count what still
  arrives until the client's EOF and print ``RECEIVED_AFTER_SHUT <n>`` (half-close
  toward the client, with the client still sending).
* ``SOURCE <n>``: send n bytes (byte i is ``i % 256``), then close.
* ``SINK``: read until EOF; answer ``SINK <n> <sha256 hex>`` and close.
* ``RESET``: answer ``bye``, then reset the connection (RST, not FIN).

In echo mode the client's EOF is answered with ``EOF after <n> bytes`` before the
close (half-close toward the service, which still answers).
"""

from __future__ import annotations

import argparse
import hashlib
import signal
import socket
import struct
import sys
import threading
import time
from types import FrameType

CHUNK = 256 * 1024
PATTERN = bytes(range(256)) * (CHUNK // 256)
IO_TIMEOUT = 120.0
_accepts = 0
_lock = threading.Lock()


def say(line: str) -> None:
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def read_line(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\n" not in data and len(data) < 4096:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line.strip(), rest


def serve(conn: socket.socket) -> None:
    conn.settimeout(IO_TIMEOUT)
    try:
        line, rest = read_line(conn)
        if line == b"SHUT":
            conn.sendall(b"server done\n")
            conn.shutdown(socket.SHUT_WR)
            count = len(rest)
            while chunk := conn.recv(CHUNK):
                count += len(chunk)
            say(f"RECEIVED_AFTER_SHUT {count}")
        elif line.startswith(b"SOURCE "):
            remaining = int(line.split()[1])
            while remaining > 0:
                piece = PATTERN[:min(CHUNK, remaining)]
                conn.sendall(piece)
                remaining -= len(piece)
        elif line == b"RESET":
            conn.sendall(b"bye\n")
            time.sleep(0.2)  # let "bye" leave before the RST discards it
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif line == b"SINK":
            digest = hashlib.sha256(rest)
            count = len(rest)
            while chunk := conn.recv(CHUNK):
                digest.update(chunk)
                count += len(chunk)
            conn.sendall(f"SINK {count} {digest.hexdigest()}\n".encode())
        else:
            received = 0
            data = line + (b"\n" if rest or line else b"") + rest
            while data:
                received += len(data)
                conn.sendall(data)
                data = conn.recv(CHUNK)
            conn.sendall(f"EOF after {received} bytes\n".encode())
    except OSError:
        pass
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("tcp_echo listens on loopback only")

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((args.host, args.port))
    server.listen(128)
    say(f"READY {server.getsockname()[1]}")
    global _accepts
    try:
        while True:
            conn, _ = server.accept()
            _accepts += 1
            say(f"ACCEPT {_accepts}")
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    except (SystemExit, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main())
