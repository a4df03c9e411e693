"""The gateway's HPACK decoder (``http2.hpack``) against ``hpack.Decoder`` on header lists
``hpack.Encoder`` makes: random names and values, Huffman on and off, sensitive fields
(never indexed), dynamic table size updates (one past our limit among them), several
blocks through one decoder so the dynamic table fills and evicts. Both must decode what
was encoded; the same blocks mutated (a byte changed, the block cut short) must give
both decoders the same header list or the same class of error
(``tests/support/hpack_differential.py``)."""

from __future__ import annotations

from typing import Any

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dataplane.http2 import hpack as h2_hpack
from gateway.dataplane.http2.hpack import STATIC
from tests.support.hpack_differential import compare

# Bounded and deterministic (the same examples on every run): about 2 s each.
GENERATED = settings(max_examples=300, derandomize=True, database=None, deadline=None)
OUR_TABLE = 4096
ENTRY = 32  # RFC 7541 4.1: a field's size is its name, its value and 32

names = st.one_of(st.sampled_from(sorted({name for name, _ in STATIC})),
                  st.binary(max_size=12))
values = st.one_of(st.sampled_from([b"", b"GET", b"/", b"gzip, deflate", b"v" * 300]),
                   st.binary(max_size=24))
fields = st.tuples(names, values, st.booleans())  # the last: sensitive (never indexed)
blocks_plan = st.lists(
    st.tuples(st.lists(fields, max_size=8),
              st.booleans(),  # Huffman
              st.sampled_from([None, None, None, 0, 64, 256, OUR_TABLE, OUR_TABLE + 1])),
    min_size=1, max_size=6)


def encode(plan: list[Any]) -> tuple[list[bytes], list[list[tuple[bytes, bytes]]], int]:
    """The blocks, the header lists they hold, and how many blocks precede the first
    one a decoder must refuse (a table size update past ours)."""
    encoder = hpack.Encoder()
    blocks, lists, good = [], [], len(plan)
    for index, (headers, huffman, table_size) in enumerate(plan):
        if table_size is not None:
            encoder.header_table_size = table_size
            if table_size > OUR_TABLE:
                good = min(good, index)
        blocks.append(bytes(encoder.encode(headers, huffman=huffman)))
        lists.append([(name, value) for name, value, _ in headers])
    return blocks, lists, good


@GENERATED
@given(blocks_plan, st.sampled_from([65536, 512]))
def test_decoders_agree_on_what_an_encoder_makes(plan: list[Any], max_list: int) -> None:
    blocks, lists, good = encode(plan)
    results = compare(blocks, OUR_TABLE, max_list)
    for index, (result, expected) in enumerate(zip(results, lists, strict=False)):
        size = sum(len(name) + len(value) + ENTRY for name, value in expected)
        if index == good:
            assert result == "header_table_size", result
        elif size > max_list:
            assert result == "max_header_list_size", result
        else:
            assert result == expected, (index, result, expected)


@GENERATED
@given(blocks_plan, st.integers(min_value=0), st.integers(1, 255), st.booleans(),
       st.sampled_from([(OUR_TABLE, 65536), (256, 512), (0, 65536)]))
def test_decoders_agree_on_damaged_blocks(plan: list[Any], where: int, xor: int, cut: bool,
                                          limits: tuple[int, int]) -> None:
    blocks, _, _ = encode(plan)
    position = where % sum(len(b) + 1 for b in blocks)
    index = 0  # the block holding ``position`` (bounded: position < the sum)
    while position > len(blocks[index]):
        position -= len(blocks[index]) + 1
        index += 1
    block = blocks[index]
    if cut:
        blocks[index] = block[:position]
    elif position < len(block):
        blocks[index] = block[:position] + bytes((block[position] ^ xor,)) \
            + block[position + 1:]
    compare(blocks, *limits)


def test_a_planted_difference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a decoder whose static table has two entries swapped
    differs from ``hpack`` on a block naming one of them."""
    static = h2_hpack.STATIC
    swapped = (static[0], static[2], static[1], *static[3:])  # 2 and 3: GET and POST
    monkeypatch.setattr(h2_hpack, "STATIC", swapped)
    with pytest.raises(AssertionError, match="h2_hpack:"):
        compare([b"\x82"])
