"""The Prometheus registry's families as OTLP metric data: one definition of every metric
(``metrics.REGISTRY``), two ways out.

Counters become monotonic cumulative sums named as their family (``requests``, not
``requests_total``: the usual OTLP-to-Prometheus translation adds the suffix back),
gauges (and info and state-set families) gauges, histograms explicit-bucket histograms
(Prometheus's cumulative ``le`` buckets turned into per-bucket counts), labels
attributes. Summaries have no OTLP equivalent without their quantiles' window and are
left out (the gateway defines none). Cumulative points start at the process's start.

Pure: ``collect`` runs on the reactor (the collectors read state owned there), the
rest on the exporter's thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client.registry import CollectorRegistry

from gateway import __version__

SCOPE = InstrumentationScope("gateway.metrics", __version__)
_CUMULATIVE = AggregationTemporality.CUMULATIVE


def collect(registry: CollectorRegistry) -> list[Any]:
    """The registry's families now (fresh objects: the caller may hand them to a
    thread)."""
    return list(registry.collect())


def _number_points(family: Any, suffix: str, start: int, now: int) -> list[NumberDataPoint]:
    wanted = family.name + suffix
    return [NumberDataPoint(attributes=dict(sample.labels), start_time_unix_nano=start,
                            time_unix_nano=now, value=sample.value)
            for sample in family.samples if sample.name == wanted]


def _histogram_points(family: Any, start: int, now: int) -> list[HistogramDataPoint]:
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample in family.samples:
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        entry = series.setdefault(labels, {"buckets": [], "count": 0.0, "sum": 0.0})
        if sample.name == family.name + "_bucket":
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name == family.name + "_count":
            entry["count"] = sample.value
        elif sample.name == family.name + "_sum":
            entry["sum"] = sample.value
    points = []
    for labels, entry in series.items():
        cumulative = sorted(entry["buckets"])
        bounds = [le for le, _ in cumulative if not math.isinf(le)]
        counts: list[int] = []
        previous = 0.0
        for _, value in cumulative:
            counts.append(int(value - previous))
            previous = value
        if len(counts) == len(bounds):  # no +Inf bucket: the rest of the count
            counts.append(int(entry["count"] - previous))
        points.append(HistogramDataPoint(
            attributes=dict(labels), start_time_unix_nano=start, time_unix_nano=now,
            count=int(entry["count"]), sum=entry["sum"], bucket_counts=counts,
            explicit_bounds=bounds, min=None, max=None))  # type: ignore[arg-type]
    return points


def to_metric(family: Any, start: int, now: int) -> Metric | None:
    kind = family.type
    data: Sum | Gauge | Histogram
    if kind == "counter":
        data = Sum(_number_points(family, "_total", start, now), _CUMULATIVE, True)
    elif kind in ("gauge", "unknown", "stateset"):
        data = Gauge(_number_points(family, "", start, now))
    elif kind == "info":
        data = Gauge(_number_points(family, "_info", start, now))
    elif kind == "histogram":
        data = Histogram(_histogram_points(family, start, now), _CUMULATIVE)
    else:
        return None
    if not data.data_points:
        return None
    return Metric(family.name, family.documentation, family.unit or "", data)


def metrics_data(families: Iterable[Any], resource: Resource, start: int,
                 now: int) -> MetricsData:
    metrics: Sequence[Metric] = [m for m in (to_metric(f, start, now) for f in families)
                                 if m is not None]
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], "")])
