"""Fuzz target: the HPACK decoder (``gateway.dataplane.http2.hpack``) against
``hpack.Decoder`` (``h2``'s), differential.

Input: one settings byte (its low bits choose our advertised table size, 4096, 256, 64
or 0, and header list size, 65536 or 512: small ones reach the bounds with small
inputs), then header blocks, each behind a 2-byte big-endian length (a last one cut
short is the rest of the input); the blocks are decoded in order by one decoder, as a
connection's are.

Contract (``tests/support/hpack_differential.py``): both decoders, given the same
limits, decode each block to the same header list, or both refuse it with the same
class of error (``compression_error``, ``header_table_size``,
``max_header_list_size``); ours raises nothing but ``HpackError`` and its dynamic table
never outgrows the size it may use.
"""

from __future__ import annotations

from tests.fuzz.harness import fuzz, instrumented

with instrumented("gateway", "hpack"):
    from tests.support.hpack_differential import compare

TABLE_SIZES = (4096, 256, 64, 0)
LIST_SIZES = (65536, 512)


def blocks(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    position = 0
    while position < len(data):
        length = int.from_bytes(data[position:position + 2], "big")
        out.append(data[position + 2:position + 2 + length])
        position += 2 + length
    return out


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    table_size = TABLE_SIZES[data[0] & 0x3]
    max_list = LIST_SIZES[(data[0] >> 2) & 0x1]
    compare(blocks(data[1:]), table_size, max_list)


if __name__ == "__main__":
    fuzz(TestOneInput)
