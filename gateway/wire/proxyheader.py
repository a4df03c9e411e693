"""Parsing the PROXY protocol header (v1 text, v2 binary), without sockets.

``read_header(buffer)`` answers once the buffer holds a whole header: the client address
it carries (None when the real connection's peer stands: v2 LOCAL, v1 UNKNOWN, v2
UNSPEC or UNIX families) and how many bytes it took. It waits (returns None) while the
bytes are a prefix of a valid header, however they are split into reads, and raises
``BadProxyHeader`` as soon as they cannot become one: another protocol, a v1 line
longer than 107 bytes, a v2 block over ``MAX_V2_BLOCK``, unknown versions, commands
or families, addresses that are not IP literals, ports out of range.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest valid v1 line, CRLF included (the spec's figure)
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16
MAX_V2_BLOCK = 4096  # addresses plus TLVs; real proxies send a few hundred bytes at most
_FAMILIES = {0x0: None, 0x1: (4, "!4s4sHH"), 0x2: (6, "!16s16sHH"), 0x3: None}


class BadProxyHeader(Exception):
    """The bytes are not (and cannot become) a valid PROXY protocol header."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    source: tuple[str, int] | None  # (ip, port) of the client, None: use the real peer
    destination: tuple[str, int] | None
    version: int


def read_header(buffer: bytes) -> tuple[ProxyHeader, int] | None:
    """(header, bytes used) once ``buffer`` starts with a whole header, None while it
    is an incomplete one; ``BadProxyHeader`` otherwise."""
    if buffer[:12] == V2_SIGNATURE[: len(buffer)] and len(buffer) < 12:
        return None  # a prefix of the v2 signature (empty included): wait
    if buffer.startswith(V2_SIGNATURE):
        return _read_v2(buffer)
    if V1_PREFIX.startswith(buffer[:6]):
        return _read_v1(buffer)
    raise BadProxyHeader("not a PROXY protocol header")


def _read_v1(buffer: bytes) -> tuple[ProxyHeader, int] | None:
    end = buffer.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(buffer) >= V1_MAX or b"\n" in buffer:
            raise BadProxyHeader("v1 header without CRLF within 107 bytes")
        if len(buffer) >= 6 and not buffer.startswith(V1_PREFIX):
            raise BadProxyHeader("not a PROXY protocol header")
        return None
    fields = buffer[:end].split(b" ")
    if fields[0] != b"PROXY" or len(fields) < 2:
        raise BadProxyHeader("not a PROXY protocol header")
    if fields[1] == b"UNKNOWN":
        return ProxyHeader(None, None, 1), end + 2  # the rest of the line is ignored
    if fields[1] not in (b"TCP4", b"TCP6") or len(fields) != 6:
        raise BadProxyHeader("v1 header needs TCP4/TCP6 and four address fields")
    version = 4 if fields[1] == b"TCP4" else 6
    source = (_ip(fields[2], version), _port(fields[4]))
    destination = (_ip(fields[3], version), _port(fields[5]))
    return ProxyHeader(source, destination, 1), end + 2


def _ip(raw: bytes, version: int) -> str:
    try:
        address = ipaddress.ip_address(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise BadProxyHeader("v1 address is not an IP literal") from None
    if address.version != version:
        raise BadProxyHeader("v1 address does not match its family")
    return str(address)


def _port(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 5 or (len(raw) > 1 and raw.startswith(b"0")):
        raise BadProxyHeader("v1 port is not a decimal number")
    port = int(raw)
    if port > 65535:
        raise BadProxyHeader("v1 port out of range")
    return port


def _read_v2(buffer: bytes) -> tuple[ProxyHeader, int] | None:
    if len(buffer) < V2_FIXED:
        return None
    version_command, family_protocol, length = struct.unpack("!BBH", buffer[12:16])
    if version_command >> 4 != 2 or version_command & 0xF not in (0, 1):
        raise BadProxyHeader("v2 header with an unknown version or command")
    family, protocol = family_protocol >> 4, family_protocol & 0xF
    if family not in _FAMILIES or protocol > 2:
        raise BadProxyHeader("v2 header with an unknown address family or protocol")
    if length > MAX_V2_BLOCK:
        raise BadProxyHeader(f"v2 header longer than {MAX_V2_BLOCK} bytes")
    total = V2_FIXED + length
    if len(buffer) < total:
        return None
    layout = _FAMILIES[family]
    if version_command & 0xF == 0 or layout is None or protocol == 0:
        # LOCAL (health checks of the proxy itself), or an address the gateway cannot
        # use: the real connection's endpoints stand, the block is skipped.
        return ProxyHeader(None, None, 2), total
    ip_version, fmt = layout
    if length < struct.calcsize(fmt):
        raise BadProxyHeader("v2 header too short for its address family")
    source, destination, source_port, destination_port = struct.unpack_from(fmt, buffer,
                                                                          V2_FIXED)
    make = ipaddress.IPv4Address if ip_version == 4 else ipaddress.IPv6Address
    return ProxyHeader((str(make(source)), source_port),
                       (str(make(destination)), destination_port), 2), total
