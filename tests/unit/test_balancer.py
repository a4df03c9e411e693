"""Load balancers: sequences, availability, weights, hashing consistency, construction."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.routes import Route
from gateway.config.upstreams import (
    LB_POLICIES,
    LeastRequestConfig,
    MaglevConfig,
    RingHashConfig,
    Upstream,
)
from gateway.dataplane.upstream.balancer import (
    Balancer,
    LeastRequest,
    Maglev,
    NoHosts,
    RandomBalancer,
    RingHash,
    RoundRobin,
    SingleHost,
    hash64,
    make_balancer,
)
from gateway.dataplane.upstream.hosts import UpstreamHost


def hosts(*weights: int) -> tuple[UpstreamHost, ...]:
    """Hosts named a, b, c, ... (by ``labels['name']``) with the given weights."""
    out = []
    for index, weight in enumerate(weights):
        address = f"10.0.{index // 250}.{index % 250 + 1}"
        upstream = Upstream(f"http://{address}:8080", "http", address, 8080, "", weight)
        out.append(UpstreamHost(upstream, weight=weight, labels={"name": chr(97 + index)}))
    return tuple(out)


def name(host: UpstreamHost | None) -> str:
    return "-" if host is None else host.labels["name"]


def sequence(balancer: Balancer, count: int, now: float = 0.0) -> str:
    return "".join(name(balancer.pick(now, None)) for _ in range(count))


def shares(balancer: Balancer, count: int, keys: bool = False) -> dict[str, float]:
    rng = random.Random(7)
    picks = Counter(
        name(balancer.pick(0.0, rng.randbytes(4) if keys else None)) for _ in range(count)
    )
    return {k: v / count for k, v in picks.items()}


def nginx(weights: Sequence[int], count: int) -> str:
    """Reference smooth weighted round robin, straight from nginx."""
    current, out = [0] * len(weights), []
    for _ in range(count):
        for i, weight in enumerate(weights):
            current[i] += weight
        best = current.index(max(current))
        current[best] -= sum(weights)
        out.append(chr(97 + best))
    return "".join(out)


def keyed(balancer: Balancer, keys: list[bytes]) -> list[str]:
    return [name(balancer.pick(0.0, key)) for key in keys]


def differences(first: list[str], second: list[str]) -> int:
    """How many keys map differently (a count keeps failure output short)."""
    return sum(a != b for a, b in zip(first, second, strict=True))


_KEY_RNG = random.Random(3)
KEYS = [_KEY_RNG.randbytes(4) for _ in range(5000)]


class RoundRobinTests(SynchronousTestCase):
    def test_weighted_sequence(self) -> None:
        """Weights 5,1,1 interleave as nginx does: a a b a c a a, then repeat."""
        self.assertEqual(sequence(RoundRobin(hosts(5, 1, 1)), 14), "aabacaa" * 2)

    def test_equal_weights(self) -> None:
        """Equal weights take strict turns."""
        self.assertEqual(sequence(RoundRobin(hosts(1, 1, 1)), 7), "abcabca")
        self.assertEqual(sequence(RoundRobin(hosts(3, 3)), 4), "abab")

    def test_matches_nginx(self) -> None:
        """Both the precomputed cycle and the long-cycle path give nginx's sequence."""
        for weights in ((5, 3, 2), (7, 1, 4, 2), (4000, 97, 3), (1366, 1366, 1365)):
            count = 2 * sum(weights)
            self.assertEqual(sequence(RoundRobin(hosts(*weights)), count), nginx(weights, count))

    def test_skips_unavailable(self) -> None:
        """An unhealthy host is never picked; its share goes evenly to equal-weight others."""
        for weights in ((5, 1, 1), (4000, 97, 97)):
            group = hosts(*weights)
            group[0].healthy = False
            picks = Counter(sequence(RoundRobin(group), 600))
            self.assertEqual(picks, {"b": 300, "c": 300})

    def test_ejection_expires(self) -> None:
        """An ejected host is skipped before ``ejected_until`` and back from that time."""
        group = hosts(1, 1, 1)
        group[1].ejected_until = 10.0
        balancer = RoundRobin(group)
        self.assertNotIn("b", sequence(balancer, 9, now=9.99))
        self.assertEqual(Counter(sequence(balancer, 9, now=10.0)), {"a": 3, "b": 3, "c": 3})

    def test_none_when_all_unavailable(self) -> None:
        """No available host gives ``None``."""
        group = hosts(5, 1, 1)
        group[0].healthy = False
        group[1].healthy = False
        group[2].ejected_until = 5.0
        self.assertEqual(sequence(RoundRobin(group), 7, now=1.0), "-" * 7)
        self.assertEqual(sequence(RoundRobin(group), 2, now=5.0), "cc")


class RandomTests(SynchronousTestCase):
    def test_weighted_distribution(self) -> None:
        """20k seeded picks follow the weights 1,2,7 within 1.5 points."""
        got = shares(RandomBalancer(hosts(1, 2, 7), random.Random(1)), 20000)
        for host, expected in {"a": 0.1, "b": 0.2, "c": 0.7}.items():
            self.assertLess(abs(got[host] - expected), 0.015)

    def test_unavailable_redistributed_by_weight(self) -> None:
        """Without the heaviest host the others keep their 1:3 ratio."""
        group = hosts(1, 3, 6)
        group[2].healthy = False
        got = shares(RandomBalancer(group, random.Random(2)), 20000)
        self.assertEqual(set(got), {"a", "b"})
        self.assertLess(abs(got["a"] - 0.25), 0.015)

    def test_none_when_all_unavailable(self) -> None:
        """No available host gives ``None``."""
        group = hosts(1, 1)
        group[0].healthy = False
        group[1].ejected_until = 3.0
        balancer = RandomBalancer(group, random.Random(0))
        self.assertEqual(sequence(balancer, 5, now=2.0), "-----")
        self.assertEqual(sequence(balancer, 5, now=3.0), "bbbbb")


class LeastRequestTests(SynchronousTestCase):
    def test_prefers_fewer_active(self) -> None:
        """P2C over two hosts picks the idle one unless both draws hit the busy one (3/4)."""
        group = hosts(1, 1)
        group[0].active = 5
        got = shares(LeastRequest(group, 2, random.Random(4)), 20000)
        self.assertLess(abs(got["b"] - 0.75), 0.015)

    def test_choice_count(self) -> None:
        """More choices find the least loaded host almost always."""
        group = hosts(1, 1, 1)
        group[0].active, group[1].active, group[2].active = 4, 1, 9
        got = shares(LeastRequest(group, 20, random.Random(5)), 2000)
        self.assertGreater(got["b"], 0.99)

    def test_idle_honours_weights(self) -> None:
        """With no requests in flight, picks follow weights 1:3."""
        got = shares(LeastRequest(hosts(1, 3), 2, random.Random(6)), 20000)
        self.assertLess(abs(got["a"] - 0.25), 0.015)

    def test_effective_load(self) -> None:
        """The lowest active / weight wins, not the lowest active."""
        group = hosts(1, 4)
        balancer = LeastRequest(group, 50, random.Random(8))
        group[0].active, group[1].active = 1, 3  # loads 1 and 0.75
        self.assertEqual(sequence(balancer, 100), "b" * 100)
        group[0].active, group[1].active = 1, 5  # loads 1 and 1.25
        self.assertEqual(sequence(balancer, 100), "a" * 100)

    def test_unavailable(self) -> None:
        """Unavailable hosts are never picked, even when idle; none available gives None."""
        group = hosts(1, 1, 1)
        group[0].active, group[1].active, group[2].active = 9, 0, 9
        group[1].healthy = False
        balancer = LeastRequest(group, 2, random.Random(9))
        self.assertEqual(set(sequence(balancer, 500)), {"a", "c"})
        group[0].ejected_until = group[2].ejected_until = 1.0
        self.assertEqual(sequence(balancer, 10, now=0.5), "-" * 10)


class RingHashTests(SynchronousTestCase):
    def test_same_key_same_host(self) -> None:
        """A key always maps to the same host, also in a ring rebuilt from fresh state."""
        first = keyed(RingHash(hosts(1, 1, 1, 1)), KEYS)
        self.assertEqual(differences(keyed(RingHash(hosts(1, 1, 1, 1)), KEYS), first), 0)
        self.assertEqual(len(set(first)), 4)

    def test_weights(self) -> None:
        """Key shares follow weights 1,2,3 (within 3 points on a 16k ring)."""
        ring = RingHash(hosts(1, 2, 3), RingHashConfig(minimum_ring_size=16384))
        got = shares(ring, 30000, keys=True)
        for host, expected in {"a": 1 / 6, "b": 2 / 6, "c": 3 / 6}.items():
            self.assertLess(abs(got[host] - expected), 0.03)

    def test_consistency(self) -> None:
        """Marking one of five hosts unavailable moves only its keys (~1/5 of them)."""
        group = hosts(1, 1, 1, 1, 1)
        ring = RingHash(group, RingHashConfig(minimum_ring_size=1000))
        before = keyed(ring, KEYS)
        group[2].healthy = False
        after = keyed(ring, KEYS)
        moved = [old for old, new in zip(before, after, strict=True) if old != new]
        self.assertEqual(set(moved), {"c"})
        self.assertLess(len(moved) / len(KEYS), 1 / 5 + 0.05)
        self.assertNotIn("c", after)
        self.assertEqual(differences(keyed(ring, KEYS), after), 0)

    def test_unavailable_is_removal(self) -> None:
        """Skipping an unavailable host maps keys as a ring built without it (200 points each)."""
        group = hosts(1, 1, 1, 1, 1)
        ring = RingHash(group, RingHashConfig(minimum_ring_size=1000))
        group[2].healthy = False
        without = RingHash(group[:2] + group[3:], RingHashConfig(minimum_ring_size=800))
        self.assertEqual(len(without.points), 800)
        self.assertEqual(differences(keyed(ring, KEYS), keyed(without, KEYS)), 0)

    def test_ring_size(self) -> None:
        """The ring lies within [minimum, maximum] and every host gets a point."""
        cases = [
            ((1, 1, 1), RingHashConfig(), 1024, 1026),
            ((1, 1, 1), RingHashConfig(minimum_ring_size=1, maximum_ring_size=10), 3, 3),
            ((1, 1000), RingHashConfig(maximum_ring_size=1500), 1500, 1500),
            ((1, 1000), RingHashConfig(maximum_ring_size=500), 500, 500),
            ((1, 1000), RingHashConfig(), 2002, 2002),
            ((2, 3, 5), RingHashConfig(minimum_ring_size=100, maximum_ring_size=100), 100, 100),
        ]
        for weights, config, low, high in cases:
            ring = RingHash(hosts(*weights), config)
            self.assertTrue(low <= len(ring.points) <= high, (weights, len(ring.points)))
            self.assertEqual(len(set(map(name, ring.owners))), len(weights))
            self.assertEqual(ring.points, sorted(ring.points))

    def test_hash_functions(self) -> None:
        """XX_HASH and MURMUR_HASH_2 are both accepted and map keys identically."""
        group = hosts(1, 1, 1)
        xx = RingHash(group, RingHashConfig(hash_function="XX_HASH"))
        murmur = RingHash(group, RingHashConfig(hash_function="MURMUR_HASH_2"))
        self.assertEqual(differences(keyed(xx, KEYS), keyed(murmur, KEYS)), 0)

    def test_no_key_and_none(self) -> None:
        """A ``None`` key picks a random available host; no available host gives ``None``."""
        group = hosts(1, 1, 1)
        ring = RingHash(group, rng=random.Random(1))
        self.assertEqual(set(sequence(ring, 200)), {"a", "b", "c"})
        group[0].healthy = group[1].healthy = False
        group[2].ejected_until = 2.0
        self.assertEqual(keyed(ring, KEYS[:20]), ["-"] * 20)
        self.assertEqual(sequence(ring, 20, now=2.0), "c" * 20)


class MaglevTests(SynchronousTestCase):
    def test_same_key_same_host(self) -> None:
        """A key always maps to the same host, also in a table rebuilt from fresh state."""
        first = keyed(Maglev(hosts(1, 1, 1, 1)), KEYS)
        self.assertEqual(differences(keyed(Maglev(hosts(1, 1, 1, 1)), KEYS), first), 0)
        self.assertEqual(len(set(first)), 4)

    def test_table(self) -> None:
        """The table has the configured prime size and entries in proportion to weight."""
        for size in (251, 65537):
            table = Maglev(hosts(1, 2, 3), MaglevConfig(size)).table
            self.assertEqual(len(table), size)
            counts = Counter(map(name, table))
            for host, expected in {"a": 1 / 6, "b": 2 / 6, "c": 3 / 6}.items():
                self.assertLess(abs(counts[host] / size - expected), 0.01)

    def test_weights(self) -> None:
        """Key shares follow weights 1,2,3."""
        got = shares(Maglev(hosts(1, 2, 3)), 30000, keys=True)
        for host, expected in {"a": 1 / 6, "b": 2 / 6, "c": 3 / 6}.items():
            self.assertLess(abs(got[host] - expected), 0.015)

    def test_consistency(self) -> None:
        """Marking one of five hosts unavailable moves only its keys, spread over the rest."""
        group = hosts(1, 1, 1, 1, 1)
        maglev = Maglev(group)
        before = keyed(maglev, KEYS)
        group[2].ejected_until = 100.0
        after = keyed(maglev, KEYS)
        moved = [i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]
        self.assertEqual({before[i] for i in moved}, {"c"})
        self.assertLess(len(moved) / len(KEYS), 1 / 5 + 0.05)
        self.assertEqual({after[i] for i in moved}, {"a", "b", "d", "e"})
        self.assertEqual(differences(keyed(maglev, KEYS), after), 0)

    def test_walk_wraps(self) -> None:
        """An unavailable host in the last slot falls through to the first slot."""
        maglev = Maglev(hosts(1, 1, 1), MaglevConfig(7))
        self.assertEqual("".join(map(name, maglev.table)), "ababacc")
        maglev.table[6].healthy = False
        key = next(k for k in KEYS if hash64(k) % 7 == 6)
        self.assertEqual(name(maglev.pick(0.0, key)), "a")

    def test_stable_mapping(self) -> None:
        """Key to host mappings do not change between releases (clients would all move)."""
        self.assertEqual("".join(keyed(RingHash(hosts(1, 1, 1)), KEYS[:16])), "ccbcccacbbbbabab")
        self.assertEqual("".join(keyed(Maglev(hosts(1, 1, 1)), KEYS[:16])), "cacbaacbbaaabbab")

    def test_none(self) -> None:
        """No available host gives ``None``, keyed or not."""
        group = hosts(1, 2)
        maglev = Maglev(group, MaglevConfig(13), random.Random(0))
        group[0].healthy = False
        group[1].ejected_until = 1.0
        self.assertEqual(keyed(maglev, KEYS[:20]), ["-"] * 20)
        self.assertEqual(sequence(maglev, 5, now=0.5), "-----")
        self.assertEqual(sequence(maglev, 5, now=1.0), "bbbbb")


class MakeBalancerTests(SynchronousTestCase):
    def test_every_policy(self) -> None:
        """Each ``lb_policy`` builds its balancer, which picks available hosts."""
        kinds = {
            "ROUND_ROBIN": RoundRobin, "RANDOM": RandomBalancer, "LEAST_REQUEST": LeastRequest,
            "RING_HASH": RingHash, "MAGLEV": Maglev,
        }
        self.assertEqual(set(kinds), set(LB_POLICIES))
        for policy, kind in kinds.items():
            group = hosts(1, 2, 3)
            group[0].healthy = False
            balancer = make_balancer(policy, group, None, random.Random(0))
            self.assertIsInstance(balancer, kind)
            self.assertEqual(set(sequence(balancer, 300)) | set(keyed(balancer, KEYS)), {"b", "c"})

    def test_configs(self) -> None:
        """The matching config is taken from itself or from a ``Route``."""
        group = hosts(1, 1)
        route = Route(0, "https://a.example", "https", "a.example", None,
                      lb_policy="MAGLEV", maglev_lb_config=MaglevConfig(101))
        maglev = make_balancer("MAGLEV", group, route)
        assert isinstance(maglev, Maglev)
        self.assertEqual(len(maglev.table), 101)
        maglev = make_balancer("MAGLEV", group, MaglevConfig(7))
        assert isinstance(maglev, Maglev)
        self.assertEqual(len(maglev.table), 7)
        ring = make_balancer("RING_HASH", group, RingHashConfig(16, 16))
        assert isinstance(ring, RingHash)
        self.assertEqual(len(ring.points), 16)
        least = make_balancer("LEAST_REQUEST", group, LeastRequestConfig(choice_count=40))
        assert isinstance(least, LeastRequest)
        group[0].active = 3
        self.assertEqual(sequence(least, 100), "b" * 100)
        ring = make_balancer("RING_HASH", group, None)
        assert isinstance(ring, RingHash)
        self.assertEqual(len(ring.points), 1024)

    def test_single_and_empty(self) -> None:
        """One host is the fast path for every policy; no hosts always gives ``None``."""
        for policy in LB_POLICIES:
            (only,) = hosts(3)
            balancer = make_balancer(policy, (only,), None)
            self.assertIsInstance(balancer, SingleHost)
            self.assertIs(balancer.pick(0.0, b"\x7f\x00\x00\x01"), only)
            only.ejected_until = 2.0
            self.assertIsNone(balancer.pick(1.0, None))
            self.assertIs(balancer.pick(2.0, None), only)
            empty = make_balancer(policy, (), None)
            self.assertIsInstance(empty, NoHosts)
            self.assertIsNone(empty.pick(0.0, None))

    def test_unknown_policy(self) -> None:
        """An unknown policy name is a ValueError."""
        self.assertRaises(ValueError, make_balancer, "LEAST_CONN", hosts(1, 1), None)


class HostHeaderTests(SynchronousTestCase):
    """``UpstreamHost.host_header``: the Host an upstream request names the host by."""

    def header(self, url: str, scheme: str, host: str, port: int) -> bytes:
        return UpstreamHost(Upstream(url, scheme, host, port, "", None)).host_header

    def test_default_port_is_left_out(self) -> None:
        self.assertEqual(self.header("http://app.internal", "http", "app.internal", 80),
                         b"app.internal")
        self.assertEqual(self.header("https://app.internal", "https", "app.internal", 443),
                         b"app.internal")

    def test_other_port_is_named(self) -> None:
        self.assertEqual(self.header("http://app.internal:8080", "http", "app.internal", 8080),
                         b"app.internal:8080")
        self.assertEqual(self.header("https://app.internal:80", "https", "app.internal", 80),
                         b"app.internal:80")

    def test_ipv6_literal_keeps_its_brackets(self) -> None:
        """RFC 3986 3.2.2: an IPv6 literal is bracketed in Host, with a port or without
        (it was sent bare on the scheme's default port)."""
        self.assertEqual(self.header("http://[::1]", "http", "::1", 80), b"[::1]")
        self.assertEqual(self.header("http://[::1]:8080", "http", "::1", 8080), b"[::1]:8080")
