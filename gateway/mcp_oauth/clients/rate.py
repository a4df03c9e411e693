"""Token buckets for dynamic client registration: one per client address (IPv6: its
/64) and one for everyone, per gateway process. Registration is open to the internet
when turned on, and each one is a record in the databroker: the buckets keep a flood
from one address, or from many, from filling the store."""

from __future__ import annotations

from collections.abc import Callable

from gateway.dataplane.penalty import client_key


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class RegistrationBuckets:
    """``per_address`` registrations per ``window`` seconds from one address, ``total``
    from all (refilled continuously); at most ``max_addresses`` addresses remembered
    (full buckets are forgotten first, then the oldest)."""

    def __init__(self, clock: Callable[[], float], per_address: int, total: int,
                 window: float, max_addresses: int = 10_000) -> None:
        self.clock = clock
        self.per_address, self.total, self.window = per_address, total, window
        self.max_addresses = max_addresses
        self._all = _Bucket(float(total), clock())
        self._addresses: dict[str, _Bucket] = {}

    def _refill(self, bucket: _Bucket, size: int, now: float) -> None:
        bucket.tokens = min(float(size), bucket.tokens + (now - bucket.at) * size / self.window)
        bucket.at = now

    def take(self, peer: str) -> str | None:
        """Spend one registration for ``peer``; why not (the bucket is empty), or None."""
        now = self.clock()
        key = client_key(peer)
        mine = self._addresses.get(key)
        if mine is None:
            self._forget(now)
            mine = self._addresses[key] = _Bucket(float(self.per_address), now)
        self._refill(mine, self.per_address, now)
        self._refill(self._all, self.total, now)
        if mine.tokens < 1:
            return (f"too many registrations from {key} (at most {self.per_address} per "
                    f"{self.window:g} s)")
        if self._all.tokens < 1:
            return f"too many registrations (at most {self.total} per {self.window:g} s)"
        mine.tokens -= 1
        self._all.tokens -= 1
        return None

    def _forget(self, now: float) -> None:
        if len(self._addresses) < self.max_addresses:
            return
        for key, bucket in list(self._addresses.items()):
            self._refill(bucket, self.per_address, now)
            if bucket.tokens >= self.per_address:
                del self._addresses[key]
        while len(self._addresses) >= self.max_addresses:
            del self._addresses[next(iter(self._addresses))]
