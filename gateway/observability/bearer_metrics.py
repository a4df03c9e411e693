"""Bearer tokens from outside issuers, in the process's registry (issue 42):

- ``gateway_bearer_tokens_total{provider,result}``: every bearer token a route that
  accepts bearer providers was offered, by the provider it was checked against
  (``none``: the token chose none of the route's) and the result: ``allowed``,
  ``denied`` (by the route's policy), ``cookie_and_bearer`` (refused with 400),
  ``route_accepts_none`` (a token offered to a route taking none, answered 401 instead
  of sign-in), or the name of the check that refused it (``expired``, ``signature``,
  ``audience`` ...: a fixed set, ``gateway.bearer_jwt.verify``);
- each bearer provider's key source, read at scrape time: how many usable keys it holds
  (``gateway_bearer_keys``), how many fetches (or reads of its ``jwks_file``) failed in a
  row since the last good one (``gateway_bearer_keys_consecutive_failures``; the last
  good keys stay meanwhile), and when keys were last fetched or read successfully
  (``gateway_bearer_keys_last_success_timestamp_seconds``, absent before the first).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.observability.metrics import REGISTRY

BEARER_TOKENS = Counter(
    "gateway_bearer_tokens", "Bearer tokens from outside issuers offered to routes, by "
    "provider and result (allowed, denied, or the check that refused it).",
    ["provider", "result"], registry=REGISTRY)


_COUNTERS: dict[tuple[str, str], Any] = {}


def count_token(provider: str, result: str) -> None:
    """One token more for (``provider``, ``result``). The labelled child is kept (its
    lookup by ``labels`` costs several times its increment, on every bearer request);
    both labels come from bounded sets, the configuration's provider ids and the
    check names."""
    child = _COUNTERS.get((provider, result))
    if child is None:
        child = _COUNTERS[(provider, result)] = BEARER_TOKENS.labels(provider, result)
    child.inc()


class KeySource(Protocol):
    """What the collector reads of a key source (``gateway.bearer_jwt.source``)."""

    failures: int
    keys_set: bool
    last_try: float

    @property
    def keys(self) -> Any: ...


class _KeysCollector(Collector):
    """The key sources' health, read when scraped. A source with no failure since its
    last try succeeded at that try (the time is remembered per source, so a source that
    starts failing keeps showing its last success)."""

    def __init__(self) -> None:
        self.sources: Callable[[], Mapping[str, KeySource]] | None = None
        self._succeeded: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily("gateway_bearer_keys", "Usable keys each bearer provider's "
                                  "key source holds.", labels=["provider"])
        failures = GaugeMetricFamily(
            "gateway_bearer_keys_consecutive_failures", "Failed key fetches (or jwks_file "
            "reads) in a row since the last good one; the last good keys stay.",
            labels=["provider"])
        success = GaugeMetricFamily(
            "gateway_bearer_keys_last_success_timestamp_seconds", "When each bearer "
            "provider's keys were last fetched or read successfully.", labels=["provider"])
        sources = self.sources() if self.sources is not None else {}
        for provider, source in sorted(sources.items()):
            count.add_metric([provider], len(source.keys.keys))
            failures.add_metric([provider], source.failures)
            if source.keys_set and source.failures == 0:
                self._succeeded[source] = source.last_try
            when = self._succeeded.get(source)
            if when is not None:
                success.add_metric([provider], when)
        yield count
        yield failures
        yield success

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self.collect())


_KEYS = _KeysCollector()
REGISTRY.register(_KEYS)


def watch_bearer_keys(sources: Callable[[], Mapping[str, KeySource]] | None) -> None:
    """Publish the key sources ``sources()`` returns (by provider id)."""
    _KEYS.sources = sources
