"""The gateway's HPACK decoder (``http2.hpack.Decoder``) against ``hpack.Decoder``, the
decoder ``h2`` uses, on the same header blocks with the same limits (the table size we
advertise, the header list size). Both must decode each block to the same header list,
or both refuse it with the same class of error; the first error ends the sequence (a
connection error: the table is no longer shared with the peer).

Error classes, as the engine answers them:

- ``compression_error``: a block that does not decode (RFC 7541: an index not in the
  table, an integer or string running past the block, bad Huffman coding, a table size
  update after a field) — GOAWAY COMPRESSION_ERROR;
- ``header_table_size``: a table size update above the size we advertise — GOAWAY
  PROTOCOL_ERROR (docs/reference/http.md, "HTTP/2 limits");
- ``max_header_list_size``: a decoded list past the size we advertise — GOAWAY
  ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

from collections.abc import Iterable

import hpack
import hpack.exceptions

from gateway.dataplane.http2.hpack import Decoder, HpackError

Header = tuple[bytes, bytes]
Result = list[Header] | str  # a header list, or an error class


def reference_error(exc: hpack.exceptions.HPACKError) -> str:
    """``hpack``'s exception as the engine's error class."""
    if isinstance(exc, hpack.exceptions.OversizedHeaderListError):
        return "max_header_list_size"
    if isinstance(exc, hpack.exceptions.InvalidTableSizeError):
        return "header_table_size"
    return "compression_error"


def ours(blocks: Iterable[bytes], table_size: int, max_list: int) -> list[Result]:
    decoder = Decoder(table_size, max_list)
    results: list[Result] = []
    for block in blocks:
        try:
            results.append(decoder.decode(block))
        except HpackError as exc:
            results.append(exc.limit)
            break
        assert decoder.size <= decoder.max_size <= table_size, "the table outgrew its size"
    return results


def reference(blocks: Iterable[bytes], table_size: int, max_list: int) -> list[Result]:
    decoder = hpack.Decoder(max_header_list_size=max_list)
    decoder.max_allowed_table_size = table_size
    decoder.header_table_size = table_size
    results: list[Result] = []
    for block in blocks:
        try:
            results.append([(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)])
        except hpack.exceptions.HPACKError as exc:
            results.append(reference_error(exc))
            break
    return results


def compare(blocks: list[bytes], table_size: int = 4096, max_list: int = 65536
            ) -> list[Result]:
    """Both decoders' results, asserted equal; returned for further checks."""
    mine = ours(blocks, table_size, max_list)
    theirs = reference(blocks, table_size, max_list)
    assert mine == theirs, f"blocks {blocks!r}:\nh2_hpack: {mine!r}\nhpack:    {theirs!r}"
    return mine
