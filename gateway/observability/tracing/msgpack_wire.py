"""A MessagePack encoder for what the trace agent's API takes: maps, arrays, strings,
integers, floats, booleans and nil. The ``msgpack`` package (a test dependency) decodes
it independently in the tests."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence


def packb(value: object) -> bytes:
    out = bytearray()
    _pack(out, value)
    return bytes(out)


def _pack(out: bytearray, value: object) -> None:
    if value is None:
        out.append(0xC0)
    elif value is True:
        out.append(0xC3)
    elif value is False:
        out.append(0xC2)
    elif isinstance(value, int):
        _int(out, value)
    elif isinstance(value, float):
        out += b"\xcb" + struct.pack(">d", value)
    elif isinstance(value, str):
        data = value.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 0x100:
            out += bytes((0xD9, n))
        elif n < 0x10000:
            out += b"\xda" + struct.pack(">H", n)
        else:
            out += b"\xdb" + struct.pack(">I", n)
        out += data
    elif isinstance(value, Mapping):
        _header(out, len(value), 0x80, 0xDE)
        for key, item in value.items():
            _pack(out, key)
            _pack(out, item)
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        _header(out, len(value), 0x90, 0xDC)
        for item in value:
            _pack(out, item)
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")


def _header(out: bytearray, n: int, fix: int, code16: int) -> None:
    if n < 16:
        out.append(fix | n)
    elif n < 0x10000:
        out += bytes((code16,)) + struct.pack(">H", n)
    else:
        out += bytes((code16 + 1,)) + struct.pack(">I", n)


def _int(out: bytearray, n: int) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        for code, fmt, limit in ((0xCC, ">B", 1 << 8), (0xCD, ">H", 1 << 16),
                                 (0xCE, ">I", 1 << 32), (0xCF, ">Q", 1 << 64)):
            if n < limit:
                out += bytes((code,)) + struct.pack(fmt, n)
                return
        raise OverflowError("integer above 2**64-1")
    else:
        for code, fmt, limit in ((0xD0, ">b", 1 << 7), (0xD1, ">h", 1 << 15),
                                 (0xD2, ">i", 1 << 31), (0xD3, ">q", 1 << 63)):
            if n >= -limit:
                out += bytes((code,)) + struct.pack(fmt, n)
                return
        raise OverflowError("integer below -2**63")
