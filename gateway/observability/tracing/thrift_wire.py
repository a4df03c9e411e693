"""Apache Thrift's binary and compact protocols, the little that Jaeger's span format
needs: structs of bool, i32, i64, double, string and lists of structs, and the compact
one-way message the Jaeger agent reads over UDP.

A struct is a sequence of ``(field id, type, value)``; a ``None`` value is an absent
optional field. A list value is ``(element type, items)``. The ``thrift`` package (a test
dependency) decodes what this writes, independently, in the tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

BOOL, I32, I64, DOUBLE, STRING, STRUCT, LIST = 2, 8, 10, 4, 11, 12, 15
ONEWAY = 4  # message type of a one-way call
Field = tuple[int, int, Any]
Struct = Sequence[Field]
_COMPACT = {BOOL: 1, I32: 5, I64: 6, DOUBLE: 7, STRING: 8, LIST: 9, STRUCT: 12}
_COMPACT_TRUE, _COMPACT_FALSE = 1, 2


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def signed64(value: int) -> int:
    """An unsigned 64-bit id as Thrift's (signed) i64."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


# -- binary protocol (TBinaryProtocol)

def binary_struct(fields: Struct) -> bytes:
    out = bytearray()
    _binary_struct(out, fields)
    return bytes(out)


def _binary_struct(out: bytearray, fields: Struct) -> None:
    for fid, ttype, value in fields:
        if value is None:
            continue
        out += struct.pack(">bh", ttype, fid)
        _binary_value(out, ttype, value)
    out.append(0)  # STOP


def _binary_value(out: bytearray, ttype: int, value: Any) -> None:
    if ttype == BOOL:
        out.append(1 if value else 0)
    elif ttype == I32:
        out += struct.pack(">i", value)
    elif ttype == I64:
        out += struct.pack(">q", value)
    elif ttype == DOUBLE:
        out += struct.pack(">d", value)
    elif ttype == STRING:
        data = _bytes(value)
        out += struct.pack(">i", len(data)) + data
    elif ttype == STRUCT:
        _binary_struct(out, value)
    elif ttype == LIST:
        etype, items = value
        out += struct.pack(">bi", etype, len(items))
        for item in items:
            _binary_value(out, etype, item)
    else:
        raise ValueError(f"unsupported thrift type {ttype}")


# -- compact protocol (TCompactProtocol)

def _varint(out: bytearray, n: int) -> None:
    while True:
        if n & ~0x7F == 0:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def compact_struct(fields: Struct) -> bytes:
    out = bytearray()
    _compact_struct(out, fields)
    return bytes(out)


def _compact_struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for fid, ttype, value in fields:
        if value is None:
            continue
        ctype = (_COMPACT_TRUE if value else _COMPACT_FALSE) if ttype == BOOL else \
            _COMPACT[ttype]
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ctype)
        else:
            out.append(ctype)
            _varint(out, _zigzag(fid, 16))
        last = fid
        if ttype != BOOL:  # a bool field's value is its type nibble
            _compact_value(out, ttype, value)
    out.append(0)  # STOP


def _compact_value(out: bytearray, ttype: int, value: Any) -> None:
    if ttype == BOOL:  # inside a list
        out.append(_COMPACT_TRUE if value else _COMPACT_FALSE)
    elif ttype == I32:
        _varint(out, _zigzag(value, 32))
    elif ttype == I64:
        _varint(out, _zigzag(value, 64))
    elif ttype == DOUBLE:
        out += struct.pack("<d", value)
    elif ttype == STRING:
        data = _bytes(value)
        _varint(out, len(data))
        out += data
    elif ttype == STRUCT:
        _compact_struct(out, value)
    elif ttype == LIST:
        etype, items = value
        ctype = _COMPACT[etype]
        if len(items) < 15:
            out.append((len(items) << 4) | ctype)
        else:
            out.append(0xF0 | ctype)
            _varint(out, len(items))
        for item in items:
            _compact_value(out, etype, item)
    else:
        raise ValueError(f"unsupported thrift type {ttype}")


def compact_message(name: str, message_type: int, seqid: int, args: Struct) -> bytes:
    """A call: protocol id, version and type, sequence id, name, then the arguments."""
    out = bytearray((0x82, (message_type << 5) | 1))
    _varint(out, seqid & 0xFFFFFFFF)
    data = name.encode("utf-8")
    _varint(out, len(data))
    out += data
    _compact_struct(out, args)
    return bytes(out)
