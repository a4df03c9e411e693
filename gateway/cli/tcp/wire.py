"""The bytes of a tunnel request and the parsing of the gateway's answer, without sockets.

The client sends ``CONNECT host:port HTTP/1.1`` with ``Host`` naming the same authority
and, once signed in, ``Authorization: Gateway <token>``. The gateway answers ``200`` and
from then on the connection is the tunnel (bytes after the answer's head already belong
to the TCP service), or an error status with a short body: JSON, because the request
asks for it, so the client can quote the gateway's reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway import __version__

MAX_HEAD = 64 * 1024  # an answer head longer than this is not from a gateway
MAX_BODY = 64 * 1024  # error bodies are a line or two; more is cut off


@dataclass(frozen=True)
class Refused:
    """The gateway answered CONNECT with an error status, for ``detail``."""

    status: int
    detail: str


class BadResponse(Exception):
    """What came back is not an HTTP/1.1 answer (wrong port, wrong scheme, not a gateway)."""


def connect_request(authority: str, token: str | None) -> bytes:
    """The CONNECT request head for ``authority`` (``host:port``)."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if token:
        lines.append(f"Authorization: Gateway {token}")
    lines += ["Accept: application/json", f"User-Agent: gateway-tcp/{__version__}", "", ""]
    return "\r\n".join(lines).encode("latin-1")


@dataclass
class ResponseHead:
    """Collects an answer's head from ``feed`` calls; once ``done``, ``rest`` holds the
    bytes that followed it (the tunnel's first bytes, or the start of an error body)."""

    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False
    rest: bytes = b""
    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> bool:
        """Add bytes; True once the head is complete. Raises ``BadResponse``."""
        if self.done:
            self.rest += data
            return True
        self._buffer += data
        if len(self._buffer) >= 5 and not self._buffer.startswith(b"HTTP/"):
            raise BadResponse("the answer is not HTTP")
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                raise BadResponse("the answer's head is too long")
            return False
        head = bytes(self._buffer[:end]).decode("latin-1")
        self.rest = bytes(self._buffer[end + 4:])
        self._buffer.clear()
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[0] not in ("HTTP/1.1", "HTTP/1.0") or \
                not (parts[1].isdigit() and len(parts[1]) == 3):
            raise BadResponse(f"bad status line {status_line[:80]!r}")
        self.status = int(parts[1])
        self.reason = parts[2] if len(parts) > 2 else ""
        for line in header_lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise BadResponse(f"bad header line {line[:80]!r}")
            self.headers.append((name.lower(), value.strip()))
        self.done = True
        return True

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def body_length(self) -> int | None:
        """Content-Length, or None (the body ends when the connection does)."""
        value = self.header("content-length")
        if value is None or not value.isdigit():
            return None
        return int(value)


def error_detail(body: bytes, content_type: str | None) -> str:
    """The gateway's reason in an error body: the JSON ``error``, or the text's first
    line; printable characters only, at most 300 of them."""
    text = ""
    if content_type and content_type.startswith("application/json"):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            text = doc["error"]
    if not text:
        text = body.decode("utf-8", "replace").strip().split("\n", 1)[0]
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return text[:297] + "..." if len(text) > 300 else text
