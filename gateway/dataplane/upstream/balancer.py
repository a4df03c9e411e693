"""Load balancers: choose one ``UpstreamHost`` per request (pure, no I/O, hot path).

Tables are built at construction; a pick is O(1) or O(log n) while the chosen host is
available, O(n) work only when it is not (each policy documents its fallback). Only hosts
with ``available(now)`` are returned; ``None`` means none is (the proxy answers 503).
Weights (>= 1) are honoured by every policy.

Hashing policies use one stable 64-bit hash, blake2b (8-byte digest), for tables and keys:
no dependency, the same in every process and replica, and faster in CPython than a
pure-Python MurmurHash2 64A (0.69 vs 0.99-1.24 us for a 4/16-byte address). XX_HASH and
MURMUR_HASH_2 are accepted for compatibility and both mean this hash (not Envoy's mapping).
"""

from __future__ import annotations

import hashlib
import random
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, cycle
from math import gcd
from typing import Protocol, TypeVar

from gateway.config.upstreams import LB_POLICIES, LeastRequestConfig, MaglevConfig, RingHashConfig
from gateway.dataplane.upstream.hosts import UpstreamHost

_blake2b = hashlib.blake2b
_T = TypeVar("_T")
_MAX_CYCLE = 4096  # longest precomputed round-robin cycle (sum of gcd-reduced weights)


class Balancer(Protocol):
    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        """An available host for this request (``key``: hash key), or ``None``."""
        ...


def hash64(key: bytes) -> int:
    """The stable 64-bit hash of request keys and table entries."""
    return int.from_bytes(_blake2b(key, digest_size=8).digest(), "little")


def _weighted(rand: float, hosts: Sequence[UpstreamHost]) -> UpstreamHost:
    """Weighted choice by linear scan (for the degraded paths, over a filtered list)."""
    point = rand * sum(h.weight for h in hosts)
    for host in hosts:
        point -= host.weight
        if point < 0:
            return host
    return hosts[-1]


def _walk(table: Sequence[UpstreamHost], start: int, hosts: Sequence[UpstreamHost],
          now: float) -> UpstreamHost | None:
    """The first available entry after ``start``, wrapping; bounded by the table size.

    Skipping an unavailable host's entries is the same as removing it from the table, so
    only its keys move (to the following hosts, in proportion to their entries).
    """
    down = {h for h in hosts if not h.available(now)}
    if len(down) == len(hosts):
        return None
    size = len(table)
    index = start
    for _ in range(size):
        index = index + 1 if index + 1 < size else 0
        if table[index] not in down:
            return table[index]
    return None


class NoHosts:
    """A route without upstreams: never a host."""

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        return None


class SingleHost:
    """The single-upstream fast path."""

    def __init__(self, host: UpstreamHost) -> None:
        self._host = host

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        return self._host if self._host.available(now) else None


class RoundRobin:
    """Smooth weighted round robin (nginx): deterministic and interleaved (5,1,1: aabacaa).

    A pick is O(1): one cycle of nginx's sequence (length: sum of gcd-reduced weights, up
    to ``_MAX_CYCLE``) is precomputed. When the cycle lands on an unavailable host the pick
    goes instead to a second nginx state run over the available hosts only (O(n)), which
    spreads that host's share smoothly by weight. Longer cycles always use that O(n) state.
    """

    def __init__(self, hosts: Sequence[UpstreamHost]) -> None:
        self._hosts = tuple(hosts)
        self._current = [0] * len(self._hosts)
        divisor = gcd(*(h.weight for h in self._hosts))
        weights = [h.weight // divisor for h in self._hosts]
        total = sum(weights)
        self._cycle: Iterator[UpstreamHost] | None = None
        if total == len(weights):  # equal weights: nginx takes the hosts in order
            self._cycle = cycle(self._hosts)
        elif total <= _MAX_CYCLE and total * len(weights) <= _MAX_CYCLE * 256:
            current, order = [0] * len(weights), []
            for _ in range(total):
                current = [c + w for c, w in zip(current, weights, strict=True)]
                best = current.index(max(current))
                current[best] -= total
                order.append(self._hosts[best])
            self._cycle = cycle(order)

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        if self._cycle is not None:
            host = next(self._cycle)
            if host.available(now):
                return host
        return self._smooth(now)

    def _smooth(self, now: float) -> UpstreamHost | None:
        current, best, total = self._current, -1, 0
        for index, host in enumerate(self._hosts):
            if host.available(now):
                current[index] += host.weight
                total += host.weight
                if best < 0 or current[index] > current[best]:
                    best = index
        if best < 0:
            return None
        current[best] -= total
        return self._hosts[best]


class RandomBalancer:
    """Weighted random by bisect over cumulative weights; an unavailable draw is redrawn
    among the available hosts (O(n)), which keeps the shares proportional to weight."""

    def __init__(self, hosts: Sequence[UpstreamHost], rng: random.Random | None = None) -> None:
        self._hosts = tuple(hosts)
        self._cumulative = list(accumulate(h.weight for h in self._hosts))
        self._total = self._cumulative[-1]
        self._last = len(self._hosts) - 1
        self._random = (rng or random.Random()).random

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        host = self._hosts[
            bisect_right(self._cumulative, self._random() * self._total, 0, self._last)
        ]
        if host.available(now):
            return host
        available = [h for h in self._hosts if h.available(now)]
        return _weighted(self._random(), available) if available else None


class LeastRequest:
    """Power of ``choice_count`` choices, the least loaded of the samples winning.

    Samples are drawn in proportion to weight (with replacement, unavailable draws
    discarded); the winner minimises ``active / weight`` (the first sample wins ties).
    Equal weights: exactly P2C on ``active``. Unequal weights: this stands in for Envoy's
    scheduler over ``weight / (active + 1)`` with O(choice_count) work; idle hosts tie, so
    at low load picks follow the weights, and under load ``active`` tends to follow them.
    If every sample is unavailable, the same choice is made among the available hosts.
    """

    def __init__(self, hosts: Sequence[UpstreamHost], choice_count: int = 2,
                 rng: random.Random | None = None) -> None:
        self._hosts = tuple(hosts)
        self._choices = range(max(1, choice_count))
        self._cumulative = list(accumulate(h.weight for h in self._hosts))
        self._random = (rng or random.Random()).random

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        best = self._least(self._hosts, self._cumulative, now)
        if best is None:
            available = [h for h in self._hosts if h.available(now)]
            if available:
                best = self._least(available, list(accumulate(h.weight for h in available)), now)
        return best

    def _least(self, hosts: Sequence[UpstreamHost], cumulative: list[int],
               now: float) -> UpstreamHost | None:
        rand, total, last, best = self._random, cumulative[-1], len(hosts) - 1, None
        for _ in self._choices:
            host = hosts[bisect_right(cumulative, rand() * total, 0, last)]
            if host.available(now) and (
                best is None or host.active * best.weight < best.active * host.weight
            ):
                best = host
        return best


class RingHash:
    """Consistent-hash ring (Ketama-style), sized and weighted as Envoy's ring hash.

    ``scale = ceil(min_w / W * minimum) * W / min_w`` capped by ``maximum`` (``W``: total
    weight), computed in integers so the ring size lies within [minimum, maximum]; host
    ``k`` gets ``ceil(scale * W_k / W) - ceil(scale * W_(k-1) / W)`` points (``W_k``: the
    weight of hosts up to ``k``), at least one unless the maximum cuts it (as Envoy).
    Points come eight per blake2b-512 digest of ``address_j``, so they depend only on the
    address. Lookup: first point >= hash(key), wrapping; unavailable hosts are skipped by
    walking forward (see ``_walk``); a ``None`` key picks a random point.
    """

    def __init__(self, hosts: Sequence[UpstreamHost], config: RingHashConfig | None = None,
                 rng: random.Random | None = None) -> None:
        config = config or RingHashConfig()
        self._hosts = tuple(hosts)
        total = sum(h.weight for h in self._hosts)
        smallest = min(h.weight for h in self._hosts)
        steps = -(-smallest * config.minimum_ring_size // total)  # ceil
        numerator, denominator = steps, smallest  # scale * W_k / W == W_k * num / den
        if steps * total > config.maximum_ring_size * smallest:
            numerator, denominator = config.maximum_ring_size, total
        points: list[int] = []
        owners: list[UpstreamHost] = []
        done, running = 0, 0
        for host in self._hosts:
            running += host.weight
            count = -(-running * numerator // denominator) - done
            done += count
            prefix = host.address.encode() + b"_"
            for j in range((count + 7) // 8):
                digest = _blake2b(prefix + str(j).encode(), digest_size=64).digest()
                points.extend(struct.unpack("<8Q", digest)[: count - 8 * j])
            owners.extend([host] * count)
        order = sorted(range(len(points)), key=points.__getitem__)
        self.points = [points[i] for i in order]
        self.owners = [owners[i] for i in order]
        self._random = (rng or random.Random()).random

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        size = len(self.points)
        index = int(self._random() * size) if key is None else bisect_left(self.points, hash64(key))
        if index == size:
            index = 0
        host = self.owners[index]
        if host.available(now):
            return host
        return _walk(self.owners, index, self._hosts, now)


class Maglev:
    """Maglev lookup table, weighted as Envoy's: ``table[hash(key) % table_size]``.

    Each host has a permutation (offset, skip from a blake2b of its address); hosts take
    turns claiming their next free slot, a host of weight ``w`` claiming on ``w / max_w``
    of the turns. An unavailable host's slots fall through to the next entries
    (``_walk``): its keys spread over the others by weight and no other key moves
    (Envoy instead rebuilds the table, which also moves a few other keys).
    """

    def __init__(self, hosts: Sequence[UpstreamHost], config: MaglevConfig | None = None,
                 rng: random.Random | None = None) -> None:
        size = (config or MaglevConfig()).table_size
        self._hosts = tuple(hosts)
        positions, skips = [], []
        for host in self._hosts:
            digest = _blake2b(host.address.encode(), digest_size=16, person=b"maglev").digest()
            offset, skip = struct.unpack("<2Q", digest)
            positions.append(offset % size)
            skips.append(skip % max(size - 1, 1) + 1)
        weights = [h.weight for h in self._hosts]
        heaviest, targets, slots = max(weights), [0] * len(weights), [-1] * size
        filled, turn = 0, 0
        while filled < size:
            turn += 1
            for index, weight in enumerate(weights):
                # A host of weight max_w claims every turn; of weight max_w / 3 every third.
                if turn * weight < targets[index]:
                    continue
                targets[index] += heaviest
                slot, skip = positions[index], skips[index]
                while slots[slot] >= 0:
                    slot += skip
                    if slot >= size:
                        slot -= size
                slots[slot] = index
                positions[index] = slot + skip if slot + skip < size else slot + skip - size
                filled += 1
                if filled == size:
                    break
        self.table = [self._hosts[i] for i in slots]
        self._random = (rng or random.Random()).random

    def pick(self, now: float, key: bytes | None) -> UpstreamHost | None:
        table = self.table
        index = int(self._random() * len(table)) if key is None else hash64(key) % len(table)
        host = table[index]
        if host.available(now):
            return host
        return _walk(table, index, self._hosts, now)


def make_balancer(policy: str, hosts: tuple[UpstreamHost, ...], route_config: object | None,
                  rng: random.Random | None = None) -> Balancer:
    """The balancer for ``Route.lb_policy``.

    ``route_config`` is the policy's config object (``LeastRequestConfig``,
    ``RingHashConfig``, ``MaglevConfig``), or the ``Route`` carrying it, or ``None`` for
    defaults. No hosts gives a balancer that always answers ``None``; one host, the
    single-host fast path whatever the policy.
    """
    if policy not in LB_POLICIES:
        raise ValueError(f"unknown lb_policy {policy!r}")
    if not hosts:
        return NoHosts()
    if len(hosts) == 1:
        return SingleHost(hosts[0])
    if policy == "ROUND_ROBIN":
        return RoundRobin(hosts)
    if policy == "RANDOM":
        return RandomBalancer(hosts, rng)
    if policy == "LEAST_REQUEST":
        least = _config(route_config, LeastRequestConfig, "least_request_lb_config")
        return LeastRequest(hosts, least.choice_count, rng)
    if policy == "RING_HASH":
        return RingHash(hosts, _config(route_config, RingHashConfig, "ring_hash_lb_config"), rng)
    return Maglev(hosts, _config(route_config, MaglevConfig, "maglev_lb_config"), rng)


def _config(route_config: object | None, kind: type[_T], attribute: str) -> _T:
    if isinstance(route_config, kind):
        return route_config
    found = getattr(route_config, attribute, None)
    return found if isinstance(found, kind) else kind()
