"""Single requests that check a server before it is measured: the upstream's body over
HTTP and TLS, and whether a port speaks h2c."""

from __future__ import annotations

import http.client
import re
import socket
from typing import Any

from .certs import client_context
from .nginx import BODY_LEN


def check_body(port: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``GET /`` (redirects not followed): must be 200 with the upstream's body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    info = {"status": resp.status, "body_len": len(body), "headers": resp.getheaders()}
    if resp.status != 200 or len(body) != BODY_LEN:
        host = (headers or {}).get("Host", f"127.0.0.1:{port}")
        location = resp.getheader("Location")
        raise RuntimeError(
            f"GET http://{host}/ (on 127.0.0.1:{port}): expected 200 with the upstream's "
            f"{BODY_LEN} bytes, got {resp.status} with {len(body)} bytes"
            + (f", Location: {location}" if location else "")
            + (f", body {body[:200]!r}" if resp.status != 200 else ""))
    return info


def check_body_tls(port: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``GET /`` over TLS: must be 200 with the upstream's body."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=client_context())
    try:
        conn.request("GET", "/", headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        version = conn.sock.version() if conn.sock is not None else None  # type: ignore[union-attr]
    finally:
        conn.close()
    if resp.status != 200 or len(body) != BODY_LEN:
        raise RuntimeError(f"GET https://127.0.0.1:{port}/ {headers or ''}: expected 200 with "
                           f"{BODY_LEN} bytes, got {resp.status} with {len(body)} bytes")
    return {"status": resp.status, "body_len": len(body), "tls_version": version}


def h2c_probe(port: int, timeout: float = 3.0) -> tuple[bool, str]:
    """Whether the port speaks h2c with prior knowledge (answers the preface with SETTINGS)."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout) as s:
            s.sendall(preface)
            data = b""
            while len(data) < 9:
                chunk = s.recv(9 - len(data))
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if len(data) == 9 and data[3] == 0x04:
        return True, "answered the h2c preface with SETTINGS"
    if not data:
        return False, "closed the connection on the h2c preface"
    return False, f"answered the h2c preface with {data[:40]!r} (not HTTP/2)"


def response_complete(buf: bytes) -> tuple[bool, int, bool]:
    """(complete, status, the response asked to close the connection)."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return False, 0, False
    head = buf[:head_end].decode("latin-1")
    status = int(head.split(" ", 2)[1])
    close = re.search(r"(?im)^connection:.*\bclose\b", head) is not None
    m = re.search(r"(?im)^content-length:\s*(\d+)\s*$", head)
    if m:
        return len(buf) - head_end - 4 >= int(m.group(1)), status, close
    if re.search(r"(?im)^transfer-encoding:.*chunked", head):
        return buf.endswith(b"0\r\n\r\n"), status, close
    return True, status, close  # no body (e.g. 204/304)
