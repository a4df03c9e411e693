"""The process's Prometheus registry and the metrics the reference names.

One registry (not prometheus-client's global one) so tests and the metrics listener see
exactly the gateway's metrics. Values are filled by the parts that own them; the
``kvstore_*`` gauges are read from the live connection pools at scrape time.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.observability.request_metrics import REQUESTS

REGISTRY = CollectorRegistry(auto_describe=True)
# no `*_created` series: nothing the reference lists, and twice the lines per counter
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY.register(REQUESTS)  # http_server_* and http_client_*, counted by the data plane

STORAGE_OPERATION_DURATION_MS = Histogram(
    "storage_operation_duration_ms", "Duration of databroker storage operations.",
    ["operation", "result", "backend", "service"], registry=REGISTRY,
    buckets=(0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000))
KVSTORE_WAIT_COUNT = Counter(
    "kvstore_wait_count", "Commands that waited for a free kvstore connection.",
    ["service"], registry=REGISTRY)
KVSTORE_WAIT_DURATION_MS = Counter(
    "kvstore_wait_duration_ms", "Time commands spent waiting for a kvstore connection.",
    ["service"], registry=REGISTRY)
BACKCHANNEL_LOGOUTS = Counter(
    "gateway_backchannel_logouts",
    "Back-channel logout requests from identity providers, by result (ok, invalid, "
    "replayed, unknown_issuer, unavailable).", ["result"], registry=REGISTRY)
SESSIONS_ENDED = Counter(
    "gateway_sessions_ended", "Sessions ended by something outside the gateway, by cause "
    "(backchannel_logout, directory).", ["cause"], registry=REGISTRY)
DIRECTORY_SYNC_FAILURES = Counter(
    "directory_sync_failures", "Directory sync runs that failed (the last good data stays).",
    ["provider"], registry=REGISTRY)
DIRECTORY_SYNC_LAST_SUCCESS = Gauge(
    "directory_sync_last_success_timestamp_seconds",
    "When the directory was last synchronised successfully.", ["provider"],
    registry=REGISTRY)
DIRECTORY_SYNC_RECORDS = Gauge(
    "directory_sync_records", "Users and groups read by the last successful directory sync.",
    ["provider", "kind"], registry=REGISTRY)


class Pool(Protocol):
    def connections(self) -> int: ...
    def idle_connections(self) -> int: ...


class _PoolCollector(Collector):
    """``kvstore_conns`` and ``kvstore_idle_conns`` summed over the live pools."""

    def __init__(self) -> None:
        self.pools: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        conns = GaugeMetricFamily("kvstore_conns", "Connections in the kvstore pool.",
                                  labels=["service"])
        idle = GaugeMetricFamily("kvstore_idle_conns", "Idle connections in the kvstore pool.",
                                 labels=["service"])
        totals: dict[str, tuple[int, int]] = {}
        for pool, service in list(self.pools.items()):
            c, i = totals.get(service, (0, 0))
            totals[service] = (c + pool.connections(), i + pool.idle_connections())
        for service, (c, i) in sorted(totals.items()):
            conns.add_metric([service], c)
            idle.add_metric([service], i)
        yield conns
        yield idle

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self.collect())


_POOLS = _PoolCollector()
REGISTRY.register(_POOLS)


def watch_pool(pool: Pool, service: str) -> None:
    """Publish ``pool``'s connection counts while it lives."""
    _POOLS.pools[pool] = service


@functools.cache
def _revision() -> str:
    """The git revision of a checkout this runs from; empty for an installed package."""
    git = Path(__file__).resolve().parents[2] / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            path = git / ref
            if path.is_file():
                return path.read_text().strip()[:12]
            for line in (git / "packed-refs").read_text().splitlines():
                if line.endswith(" " + ref):
                    return line[:12]
            return ""
        return head[:12]
    except OSError:
        return ""


class _ConfigCollector(Collector):
    """``gateway_config_*`` from the configuration source's reload status, and
    ``gateway_build_info``."""

    def __init__(self) -> None:
        self.status: Callable[[], Any] | None = None
        self.service = "gateway"

    def collect(self) -> Iterator[GaugeMetricFamily]:
        import platform

        from gateway import __version__

        build = GaugeMetricFamily("gateway_build_info", "Build of the running gateway.",
                                  labels=["revision", "service", "version", "runtime_version"])
        build.add_metric([_revision(), self.service, __version__,
                          f"{platform.python_implementation()} {platform.python_version()}"], 1)
        yield build
        if self.status is None:
            return
        status = self.status()
        for name, text, value in (
                ("gateway_config_checksum_int64", "Checksum of the loaded configuration.",
                 status.checksum),
                ("gateway_config_last_reload_success",
                 "Whether the last configuration reload succeeded.",
                 1 if status.last_reload_success else 0),
                ("gateway_config_last_reload_success_timestamp",
                 "When the configuration was last loaded successfully.",
                 status.last_reload_success_timestamp)):
            family = GaugeMetricFamily(name, text, labels=["service"])
            family.add_metric([self.service], value)
            yield family

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self.collect())


_CONFIG = _ConfigCollector()
REGISTRY.register(_CONFIG)


def watch_config(status: Callable[[], Any], service: str) -> None:
    """Publish the reload status ``status()`` returns, labelled ``service``."""
    _CONFIG.status = status
    _CONFIG.service = service


class _TelemetryCollector(Collector):
    """``gateway_telemetry_{exported,failed,dropped}_total`` per signal (spans, metrics,
    audit events over OTLP): what left, what the collector did not take (down, hung past
    the timeout, refusing) and what the bounded queue dropped; and
    ``gateway_tracing_caller_sampled_refused_total``: traces a caller asked for (a sampled
    ``traceparent``) past ``tracing_caller_sampled_per_second``, not honoured."""

    def __init__(self) -> None:
        self.sources: dict[str, Callable[[], tuple[int, int, int]]] = {}
        self.refused: Callable[[], int] | None = None

    def collect(self) -> Iterator[CounterMetricFamily]:
        families = [CounterMetricFamily(f"gateway_telemetry_{name}", text, labels=["signal"])
                    for name, text in (
                        ("exported", "Telemetry items accepted by the collector."),
                        ("failed", "Telemetry items the collector did not accept (down, "
                                   "timed out, refusing)."),
                        ("dropped", "Telemetry items dropped because the export queue was "
                                    "full."))]
        for signal, source in sorted(self.sources.items()):
            for family, value in zip(families, source(), strict=True):
                family.add_metric([signal], value)
        yield from families
        refused = CounterMetricFamily(
            "gateway_tracing_caller_sampled_refused",
            "Traces callers asked for past tracing_caller_sampled_per_second, not honoured.")
        refused.add_metric([], self.refused() if self.refused is not None else 0)
        yield refused

    def describe(self) -> Iterable[CounterMetricFamily]:
        return list(self.collect())


_TELEMETRY = _TelemetryCollector()
REGISTRY.register(_TELEMETRY)


def watch_telemetry(signal: str, counts: Callable[[], tuple[int, int, int]] | None) -> None:
    """Publish ``counts()`` (exported, failed, dropped; cumulative) for ``signal``."""
    if counts is None:
        _TELEMETRY.sources.pop(signal, None)
    else:
        _TELEMETRY.sources[signal] = counts


def watch_caller_sampled_refused(count: Callable[[], int] | None) -> None:
    _TELEMETRY.refused = count
