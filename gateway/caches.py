"""``FifoCache``: a dict that keeps at most ``limit`` entries, the oldest going first.

The identity layer keeps several per-snapshot caches keyed by what clients send (Cookie
headers, tokens, session ids); each must stay bounded whatever a client sends. Oldest
first, not least recently used: an entry that keeps being hit is put back as soon as it
is missed, and reads stay plain ``dict.get`` calls (the hot path pays nothing).
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FifoCache(dict[K, V]):
    """Read it as a dict; write through ``put`` so that the bound holds."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> None:
        if len(self) >= self.limit and key not in self:
            del self[next(iter(self))]
        self[key] = value
