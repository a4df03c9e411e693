"""HTTP/2's numbers (RFC 9113), each defined once: frame types and flags, setting ids,
error codes, the windows, and the SETTINGS this server advertises with the bounds
derived from them. The engine, the abuse guard, the codec and the h2c detection all
read them from here.
"""

from __future__ import annotations

from enum import IntEnum

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = 9  # length (3), type, flags, stream id (4)

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, \
    WINDOW_UPDATE, CONTINUATION = range(10)
FLAG_END_STREAM = FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20

SETTING_HEADER_TABLE_SIZE = 0x1
SETTING_ENABLE_PUSH = 0x2
SETTING_MAX_CONCURRENT_STREAMS = 0x3
SETTING_INITIAL_WINDOW_SIZE = 0x4
SETTING_MAX_FRAME_SIZE = 0x5
SETTING_MAX_HEADER_LIST_SIZE = 0x6
SETTING_ENABLE_CONNECT_PROTOCOL = 0x8

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384
LARGEST_FRAME_SIZE = 2**24 - 1

# What this server advertises. The frame size is never raised from the RFC default,
# and the HPACK table is the RFC's default size.
MAX_CONCURRENT_STREAMS = 128
MAX_HEADER_LIST_SIZE = 64 * 1024
MAX_FRAME_SIZE = DEFAULT_FRAME_SIZE
HEADER_TABLE_SIZE = 4096
# Past this many open streams the engine closes the connection (PROTOCOL_ERROR); below
# it and above MAX_CONCURRENT_STREAMS the codec refuses streams with REFUSED_STREAM.
STREAMS_HARD_CAP = 2 * MAX_CONCURRENT_STREAMS
# One header block (HEADERS + CONTINUATIONs), encoded: HPACK does not make a legitimate
# block much longer than its decoded list.
HEADER_BLOCK_MAX_BYTES = 2 * MAX_HEADER_LIST_SIZE
HEADER_BLOCK_MAX_FRAMES = 32


class ErrorCode(IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class H2Error(Exception):
    """A connection error: GOAWAY with ``code`` is queued; ``limit`` names it for the log."""

    def __init__(self, limit: str, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        self.code = code
        self.detail = detail


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    length = len(payload)
    return bytes((length >> 16, (length >> 8) & 0xFF, length & 0xFF, kind, flags)) \
        + stream_id.to_bytes(4, "big") + payload


def settings_payload(pairs: tuple[tuple[int, int], ...]) -> bytes:
    return b"".join(ident.to_bytes(2, "big") + value.to_bytes(4, "big")
                    for ident, value in pairs)
