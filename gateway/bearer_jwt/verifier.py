"""One provider's bearer verification as the request path uses it: ``verify`` behind a
bounded cache, asking the provider's key source again when a token names a key it has
not seen.

A token seen before costs a hash and a dict lookup: the cache maps the token's SHA-256
(the token itself is not kept) to its ``Verified`` until the token's ``exp``, least
recently used first out past ``limit``. It is emptied whenever the key set changes (a key
the issuer withdrew verifies nothing more, even for tokens already seen). Refusals are
not cached: they are cheap until the signature, and a refused token's next try is
asked again (its issuer's keys may have arrived meanwhile).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.jws import OVERSIZE
from gateway.bearer_jwt.keys import KeySet
from gateway.bearer_jwt.verify import UNKNOWN_KID, Refused, Verified, verify

# Entries hold the flattened claims (a few KiB for a GitHub Actions token): 4096 of them
# is at most ~20 MB per provider, and more distinct live tokens than that per provider
# are re-verified (about 50-150 µs each) rather than remembered.
CACHE_SIZE = 4096


class Keys(Protocol):
    """What a verifier needs of its provider's key source (``source.KeySource``)."""

    @property
    def keys(self) -> KeySet:
        """The current key set (the last good one)."""
        ...

    def unknown_kid(self) -> None:
        """A token named a key the set lacks: fetch again if allowed (rate-limited)."""
        ...


class Verifier:
    """``check(token)``: ``Verified`` or ``Refused``, for one provider."""

    def __init__(self, expect: BearerExpectations, source: Keys,
                 clock: Callable[[], float], limit: int = CACHE_SIZE) -> None:
        self.expect = expect
        self.source = source
        self.clock = clock
        self.limit = limit
        self._cache: OrderedDict[bytes, Verified] = OrderedDict()
        self._cache_keys: KeySet | None = None

    def __len__(self) -> int:
        return len(self._cache)

    def check(self, token: str) -> Verified | Refused:
        if len(token) > self.expect.max_token_bytes:  # before hashing it
            return Refused(OVERSIZE, f"the token is longer than "
                                     f"{self.expect.max_token_bytes} bytes")
        now = self.clock()
        keys = self.source.keys
        cache = self._cache
        if keys is not self._cache_keys:
            cache.clear()
            self._cache_keys = keys
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        hit = cache.get(digest)
        if hit is not None:
            if now < hit.expires_at:
                cache.move_to_end(digest)
                return hit
            del cache[digest]
        result = verify(token, keys, self.expect, now)
        if isinstance(result, Verified):
            if len(cache) >= self.limit:
                cache.popitem(last=False)
            cache[digest] = result
        elif result.check == UNKNOWN_KID:
            self.source.unknown_kid()
        return result
