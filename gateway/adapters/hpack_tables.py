"""hpack's static table and Huffman decoder, for the HTTP/2 codec's own HPACK decoder.

hpack documents only its top-level package (``Encoder``, ``Decoder``, the exceptions);
the RFC 7541 static table (``hpack.table.HeaderTable.STATIC_TABLE``) and the Huffman
decoder (``hpack.huffman_table.decode_huffman``) are internals of its modules. Bound
once at import: a header block decoded pays nothing over hpack's own names.
"""

from __future__ import annotations

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

RELIES_ON = (
    ("hpack.table", "HeaderTable", ("STATIC_TABLE",)),
    ("hpack.huffman_table", "", ("decode_huffman",)),
)

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = tuple(HeaderTable.STATIC_TABLE)

__all__ = ["STATIC_TABLE", "decode_huffman"]
