"""HPACK (RFC 7541) for the HTTP/2 codec: a decoder with the client's dynamic table and
our limits, and an encoder that keeps no table.

The decoder is the client's to drive, so every bound is ours: the table never grows
past the size we advertise (a size update above it is refused), and decoding stops as
soon as the header list passes ``MAX_HEADER_LIST_SIZE`` (an HPACK "bomb" of one big
entry referenced a thousand times is refused after the first 64 KiB, not after 4 MiB).

The encoder uses the static table and literals without indexing: nothing is kept per
connection, so it costs nothing against a client that offers a huge table, and each
header costs a dictionary lookup. Huffman coding is never used (pure Python, it costs
more than the bytes it saves). Its first header block starts with a table size update
to 0, and so does the first block after the client changes SETTINGS_HEADER_TABLE_SIZE:
a decoder that lowered its table (nghttp2 does) expects that update.
"""

from __future__ import annotations

from hpack import HPACKDecodingError

from gateway.adapters.hpack_tables import STATIC_TABLE, decode_huffman
from gateway.dataplane.http2.protocol import (
    HEADER_TABLE_SIZE,
    MAX_HEADER_LIST_SIZE,
    ErrorCode,
    H2Error,
)

Header = tuple[bytes, bytes]

STATIC: tuple[Header, ...] = STATIC_TABLE
_STATIC_COUNT = len(STATIC)  # 61
_ENTRY_OVERHEAD = 32  # RFC 7541 4.1
_MAX_INTEGER_SHIFT = 28  # integers above 2**28 are never legitimate here


class HpackError(H2Error):
    """A header block that cannot be decoded: a connection error like any other."""


def _bad(detail: str) -> HpackError:
    return HpackError("compression_error", ErrorCode.COMPRESSION_ERROR, detail)


def _integer(data: bytes, pos: int, mask: int) -> tuple[int, int]:
    """The prefix integer (RFC 7541 5.1) at ``data[pos]`` under ``mask``: (value, next)."""
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise _bad("a header block ends inside an integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > _MAX_INTEGER_SHIFT:
            raise _bad("an HPACK integer is too large")


def _string(data: bytes, pos: int) -> tuple[bytes, int]:
    if pos >= len(data):
        raise _bad("a header block ends before a string")
    huffman = data[pos] & 0x80
    length, pos = _integer(data, pos, 0x7F)
    end = pos + length
    if end > len(data):
        raise _bad("a header string runs past the end of its block")
    raw = data[pos:end]
    if huffman:
        try:
            raw = decode_huffman(raw)
        except HPACKDecodingError as exc:
            raise _bad(f"invalid Huffman coding ({exc})") from None
    return raw, end


class Decoder:
    """Decodes the client's header blocks, one per request (and trailers), in order."""

    __slots__ = ("max_list", "max_size", "settings_size", "size", "table")

    def __init__(self, settings_size: int = HEADER_TABLE_SIZE,
                 max_list: int = MAX_HEADER_LIST_SIZE) -> None:
        self.table: list[Header] = []  # newest last: index 62 is table[-1]
        self.size = 0
        self.settings_size = settings_size  # our SETTINGS_HEADER_TABLE_SIZE
        self.max_size = settings_size  # the current maximum (size updates lower it)
        self.max_list = max_list

    def decode(self, data: bytes) -> list[Header]:
        headers: list[Header] = []
        append = headers.append
        table = self.table
        listed = 0
        pos = 0
        end = len(data)
        max_list = self.max_list
        static = STATIC
        while pos < end:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                if 0x80 < byte < 0xFF:  # the common case (a 7-bit index), inline
                    pos += 1
                    if byte <= 0x80 + _STATIC_COUNT:
                        header = static[byte - 0x81]
                    elif byte - 0x80 - _STATIC_COUNT <= len(table):
                        header = table[_STATIC_COUNT - (byte - 0x80)]
                    else:
                        raise _bad(f"header index {byte - 0x80} is not in the table")
                else:
                    index, pos = _integer(data, pos, 0x7F)
                    header = self._entry(index, table)
            elif byte & 0x40:  # literal with incremental indexing
                header, pos = self._literal(data, pos, 0x3F, table)
                self._add(header)
            elif byte & 0x20:  # dynamic table size update
                if headers:
                    raise _bad("a table size update after a header field")
                size, pos = _integer(data, pos, 0x1F)
                if size > self.settings_size:
                    raise HpackError("header_table_size", ErrorCode.PROTOCOL_ERROR,
                                     f"a table size update to {size}, "
                                     f"{self.settings_size} advertised")
                self.max_size = size
                self._evict(0)
                continue
            else:  # literal without indexing (0000) or never indexed (0001)
                header, pos = self._literal(data, pos, 0x0F, table)
            listed += len(header[0]) + len(header[1]) + _ENTRY_OVERHEAD
            if listed > max_list:
                raise HpackError("max_header_list_size", ErrorCode.ENHANCE_YOUR_CALM,
                                 f"a header list over the advertised {max_list} bytes")
            append(header)
        return headers

    @classmethod
    def _literal(cls, data: bytes, pos: int, mask: int,
                 table: list[Header]) -> tuple[Header, int]:
        """A literal field: its name indexed (``mask`` bits) or a string, then its value."""
        index, pos = _integer(data, pos, mask)
        if index:
            name = cls._entry(index, table)[0]
        else:
            name, pos = _string(data, pos)
        value, pos = _string(data, pos)
        return (name, value), pos

    @staticmethod
    def _entry(index: int, table: list[Header]) -> Header:
        if 0 < index <= _STATIC_COUNT:
            return STATIC[index - 1]
        dynamic = index - _STATIC_COUNT
        if index == 0 or dynamic > len(table):
            raise _bad(f"header index {index} is not in the table")
        return table[-dynamic]

    def _add(self, header: Header) -> None:
        size = len(header[0]) + len(header[1]) + _ENTRY_OVERHEAD
        if size > self.max_size:  # RFC 7541 4.4: the table is emptied, nothing added
            self.table.clear()
            self.size = 0
            return
        self._evict(size)
        self.table.append(header)
        self.size += size

    def _evict(self, room: int) -> None:
        table = self.table
        while table and self.size + room > self.max_size:
            name, value = table.pop(0)
            self.size -= len(name) + len(value) + _ENTRY_OVERHEAD


def _encode_integer(value: int, prefix: int, flags: int) -> bytes:
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes((flags | value,))
    out = bytearray((flags | mask,))
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_FULL_MATCH: dict[Header, bytes] = {}
_NAME_MATCH: dict[bytes, bytes] = {}
for _i, (_name, _value) in enumerate(STATIC, 1):
    _FULL_MATCH.setdefault((_name, _value), _encode_integer(_i, 7, 0x80))
    _NAME_MATCH.setdefault(_name, _encode_integer(_i, 4, 0x00))
_LENGTHS = tuple(_encode_integer(n, 7, 0x00) for n in range(127))
TABLE_SIZE_ZERO = b"\x20"
# Encoded fields, shared by all connections (they hold no state): most response fields
# repeat (security headers, content types, lengths); a full cache is emptied, so fields
# that never repeat (request ids, dates) cost a refill now and then, never memory.
_FIELD_CACHE_MAX = 2048
_fields: dict[Header, bytes] = dict(_FULL_MATCH)
_names: dict[bytes, bytes] = dict(_NAME_MATCH)


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, its name from the static table if it is there."""
    prefix = _names.get(name)
    if prefix is None:
        size = len(name)
        prefix = b"\x00" + (_LENGTHS[size] if size < 127 else _encode_integer(size, 7, 0)) \
            + name
        if len(_names) < _FIELD_CACHE_MAX:
            _names[name] = prefix
    size = len(value)
    return prefix + (_LENGTHS[size] if size < 127 else _encode_integer(size, 7, 0)) + value


def _remember(header: Header) -> bytes:
    """The encoding of a field not in the cache, added to it (a full cache is emptied)."""
    encoded = _literal(*header)
    if len(_fields) >= _FIELD_CACHE_MAX:
        _fields.clear()
        _fields.update(_FULL_MATCH)
    _fields[header] = encoded
    return encoded


class Encoder:
    """Header blocks for our responses; no table, so no state but whether the next
    block must start with a table size update."""

    __slots__ = ("size_update_due",)

    def __init__(self) -> None:
        self.size_update_due = True

    def _opening(self) -> list[bytes]:
        """A block's first parts: the table size update to 0 in the first block."""
        if self.size_update_due:
            self.size_update_due = False
            return [TABLE_SIZE_ZERO]
        return []

    def encode_response(self, status: int, headers: list[Header],
                        skip: frozenset[bytes]) -> bytes:
        """``:status`` and ``headers`` (names lower-cased, those in ``skip`` left out)
        in one pass: a response head as the codec has it from the upstream."""
        parts = self._opening()
        append = parts.append
        fields = _fields
        head = (b":status", b"%d" % status)
        encoded = fields.get(head)
        append(encoded if encoded is not None else _literal(*head))
        for name, value in headers:
            name = name.lower()
            if name in skip:
                continue
            header = (name, value)
            encoded = fields.get(header)
            append(encoded if encoded is not None else _remember(header))
        return b"".join(parts)

    def encode(self, headers: list[Header]) -> bytes:
        parts = self._opening()
        append = parts.append
        fields = _fields
        for header in headers:
            encoded = fields.get(header)
            append(encoded if encoded is not None else _remember(header))
        return b"".join(parts)
