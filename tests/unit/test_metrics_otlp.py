"""metrics_otlp: prometheus_client's families as OTLP metric data, checked through the
SDK's own protobuf encoding and decoded again with ``opentelemetry-proto``: counters as
monotonic cumulative sums, gauges, histograms with per-bucket counts, labels as
attributes."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.metrics_otlp import collect, metrics_data


def decoded(registry: CollectorRegistry) -> dict[str, Any]:
    data = metrics_data(collect(registry), Resource({"service.name": "t"}), 1_000, 2_000)
    message = ExportMetricsServiceRequest()
    message.ParseFromString(encode_metrics(data).SerializeToString())
    [rm] = message.resource_metrics
    [sm] = rm.scope_metrics
    assert sm.scope.name == "gateway.metrics"
    return {m.name: m for m in sm.metrics}


class BridgeTests(SynchronousTestCase):
    def test_counter_gauge_histogram(self) -> None:
        registry = CollectorRegistry()
        requests = Counter("requests", "Requests.", ["route"], registry=registry)
        requests.labels("a").inc(3)
        requests.labels("b").inc()
        Gauge("conns", "Connections.", registry=registry).set(7)
        duration = Histogram("duration_ms", "Duration.", ["route"], registry=registry,
                             buckets=(1, 10, 100))
        for value in (0.5, 5, 5, 50, 500):
            duration.labels("a").observe(value)
        metrics = decoded(registry)

        counter = metrics["requests"]
        self.assertTrue(counter.sum.is_monotonic)
        self.assertEqual(counter.sum.aggregation_temporality, 2)  # cumulative
        values = {p.attributes[0].value.string_value: p.as_double
                  for p in counter.sum.data_points}
        self.assertEqual(values, {"a": 3.0, "b": 1.0})
        self.assertEqual(counter.sum.data_points[0].start_time_unix_nano, 1_000)

        [gauge] = metrics["conns"].gauge.data_points
        self.assertEqual(gauge.as_double, 7.0)

        [point] = metrics["duration_ms"].histogram.data_points
        self.assertEqual(list(point.explicit_bounds), [1.0, 10.0, 100.0])
        self.assertEqual(list(point.bucket_counts), [1, 2, 1, 1])
        self.assertEqual((point.count, point.sum), (5, 560.5))
        self.assertFalse(point.HasField("min"))

    def test_families_without_points_are_left_out(self) -> None:
        registry = CollectorRegistry()
        Counter("unused", "Never counted.", ["route"], registry=registry)
        self.assertEqual(decoded(registry), {})
