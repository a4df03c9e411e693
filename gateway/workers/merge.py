"""One exposition from several processes' metrics: what the metrics endpoint serves
when ``workers`` > 1.

Each worker has its own registry; the supervisor asks every worker for its text
exposition at scrape time and adds the series up, so the endpoint reads as one gateway:
counters, histograms and summaries are summed (a histogram's buckets, count and sum
each add up exactly); gauges that count things every worker holds (connections) are
summed too, and the other gauges (build info, configuration state, timestamps), the
same in every worker, take the largest value. No ``worker`` label is added: the
cardinality stays that of one process.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SUMMED_GAUGE_SUFFIXES = ("_conns", "_connections", "_in_flight", "_open")

_Key = tuple[str, tuple[tuple[str, str], ...]]


def _summed(family: Metric) -> bool:
    if family.type in ("counter", "histogram", "summary", "gaugehistogram"):
        return True
    return family.type == "gauge" and family.name.endswith(SUMMED_GAUGE_SUFFIXES)


def merge_expositions(texts: Iterable[str]) -> list[Metric]:
    """The families of every text, same-named series combined (see the module)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_Key, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            series = values[family.name]
            add = _summed(merged)
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = series.get(key)
                if old is None:
                    series[key] = sample.value
                else:
                    series[key] = old + sample.value if add else max(old, sample.value)
    for name, family in families.items():
        family.samples = [Sample(sample, dict(labels), value)
                          for (sample, labels), value in values[name].items()]
    return list(families.values())


class MergedCollector:
    """A prometheus-client collector yielding families merged elsewhere."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)
