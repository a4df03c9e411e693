"""Responses the gateway writes itself: status lines and short plain-text bodies."""

from __future__ import annotations

from http import HTTPStatus

_REASONS: dict[int, bytes] = {s.value: s.phrase.encode() for s in HTTPStatus}
_REASONS[421] = b"Misdirected Request"
_REASONS[495] = b"SSL Certificate Error"
_REASONS[496] = b"SSL Certificate Required"
_STATUS_LINES: dict[int, bytes] = {}


def reason(status: int) -> bytes:
    return _REASONS.get(status, b"Unknown")


def status_line(status: int, phrase: bytes | None = None) -> bytes:
    """``HTTP/1.1 200 OK\\r\\n`` (cached for the standard phrases)."""
    if phrase:
        return b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, reason(status))
    return line


def error_body(status: int, detail: str = "") -> bytes:
    """``502 Bad Gateway: <detail>`` on one line; details never carry internals."""
    text = f"{status} {reason(status).decode()}"
    if detail:
        text += f": {detail}"
    return (text + "\n").encode()


def wants_html(headers: list[tuple[bytes, bytes]]) -> bool:
    """A browser navigation: Accept mentions text/html and it is not an XHR."""
    accept = b""
    for name, value in headers:
        low = name.lower()
        if low == b"x-requested-with" and value.lower() == b"xmlhttprequest":
            return False
        if low == b"accept":
            accept += value
    return b"text/html" in accept


def wants_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(n.lower() == b"accept" and b"application/json" in v for n, v in headers)
