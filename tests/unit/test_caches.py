"""``FifoCache``: bounded, oldest first, plain dict reads."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.caches import FifoCache


class FifoCacheTests(SynchronousTestCase):
    def test_bounded_oldest_first(self) -> None:
        cache: FifoCache[str, int] = FifoCache(3)
        for i, key in enumerate("abcd"):
            cache.put(key, i)
        self.assertEqual(dict(cache), {"b": 1, "c": 2, "d": 3})
        self.assertEqual(cache.get("a"), None)

    def test_replacing_a_key_evicts_nothing(self) -> None:
        cache: FifoCache[str, int] = FifoCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.put("a", 3)
        self.assertEqual(dict(cache), {"a": 3, "b": 2})
