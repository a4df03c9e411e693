"""The reference's request families: ``http_server_*`` (every request the proxy answers)
and ``http_client_*`` (every request it sends upstream).

Counting happens on the proxy's hot path, so it is plain Python: one dict per direction,
keyed by the label values, holding a flat list of numbers (count, sums and the bucket
counts of three histograms). Nothing touches prometheus-client per request; the
``RequestCollector`` turns the counts into metric families when a scrape asks. Everything
runs on the reactor thread (the metrics listener renders there too), so no lock is needed.

Cardinality is bounded by the configuration, not by what clients send: the host and route
labels come from the matched route (an unrouted request is ``host="unknown"``,
``route="none"``), methods outside ``METHODS`` are ``OTHER``, and a direction holds at most
``MAX_SERIES`` label sets (further ones are counted under ``OVERFLOW``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.adapters.prometheus import float_to_go_string
from gateway.config.routes import Route

# Milliseconds: a loopback answer takes a fraction of one, a slow upstream tens of seconds.
# (floats: bisecting a float among ints is slower)
DURATION_BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                       2500.0, 5000.0, 10000.0, 30000.0, 60000.0)
# Bytes of the body: none, a small JSON answer, a page, an upload.
SIZE_BUCKETS = (0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
                67108864)
METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT",
                                   "OPTIONS", "TRACE", "PATCH")}
OTHER_METHOD = "OTHER"
UNKNOWN_HOST = "unknown"
NO_ROUTE = "none"
MAX_SERIES = 10000
LABELS = ("service", "host", "method", "status", "route")
OVERFLOW = ("overflow", OTHER_METHOD, 0, "overflow")  # (host, method, status, route)

# Layout of one series' list: duration sum, request-size sum, response-size sum, then
# the (non-cumulative) bucket counts of each histogram, +Inf last. Derived at scrape
# rather than counted per request: the count (the sum of the duration buckets)
# and the size histograms' first bucket (``le="0"``: the count minus the others; most
# requests have no body, and skipping their size costs nothing).
DURATION_AT = 3
REQUEST_SIZE_AT = DURATION_AT + len(DURATION_BUCKETS_MS) + 1
RESPONSE_SIZE_AT = REQUEST_SIZE_AT + len(SIZE_BUCKETS) + 1
_WIDTH = RESPONSE_SIZE_AT + len(SIZE_BUCKETS) + 1
# A proxied request is one server and one client observation with the same method and
# body sizes: counted once, into a pair row, which is a server row followed by the
# client's duration sum and buckets; the scrape folds pairs into both directions.
UPSTREAM_DURATION_SUM = _WIDTH
UPSTREAM_DURATION_AT = _WIDTH + 1
_PAIR_WIDTH = UPSTREAM_DURATION_AT + len(DURATION_BUCKETS_MS) + 1

Key = tuple[str, str, int, str]  # host, method, status, route
Row = list[float]
PairKey = tuple[Key, Key]  # server, client


def method_label(method: bytes) -> str:
    """The method as a label value: one of ``METHODS``, else ``OTHER``."""
    return METHODS.get(method, OTHER_METHOD)


def route_label(route: Route) -> str:
    """A route's label: its ``name``, else ``from`` and its path matcher, e.g.
    ``https://app.example.com prefix=/api/``."""
    if route.name:
        return str(route.name)
    for matcher in ("path", "prefix", "regex"):
        value = getattr(route, matcher, "")
        if value:
            return f"{route.from_url} {matcher}={value}"
    return str(route.from_url)


def route_host_label(route: Route) -> str:
    """The host label of requests a route serves: its ``from`` authority (a wildcard route
    is one value, whatever names its requests carry)."""
    from_url = str(route.from_url)
    rest = from_url.split("://", 1)[-1]
    return rest.split("/", 1)[0].lower()


def count(row: Row, duration_ms: float, request_bytes: int, response_bytes: int) -> None:
    """Count one request into ``row`` (the hot path: every line here costs the proxy)."""
    row[0] += duration_ms
    row[DURATION_AT + bisect_left(DURATION_BUCKETS_MS, duration_ms)] += 1
    if request_bytes:
        row[1] += request_bytes
        row[REQUEST_SIZE_AT + bisect_left(SIZE_BUCKETS, request_bytes)] += 1
    if response_bytes:
        row[2] += response_bytes
        row[RESPONSE_SIZE_AT + bisect_left(SIZE_BUCKETS, response_bytes)] += 1


class RequestFamilies:
    """Counts of one direction (``http_server`` or ``http_client``)."""

    def __init__(self, prefix: str, what: str) -> None:
        self.prefix = prefix
        self.what = what
        self.series: dict[Key, list[float]] = {}

    def row(self, key: Key) -> Row:
        """The counts of ``key``, made on first use (past ``MAX_SERIES``: the overflow's).
        Callers may keep the row and ``count`` into it directly."""
        row = self.series.get(key)
        if row is None:
            if len(self.series) >= MAX_SERIES:
                key = OVERFLOW
            row = self.series.setdefault(key, [0] * _WIDTH)
        return row

    def observe(self, key: Key, duration_ms: float, request_bytes: int,
                response_bytes: int) -> None:
        count(self.row(key), duration_ms, request_bytes, response_bytes)

    def families(self, service: str, rows: dict[Key, Row]) -> Iterator[Metric]:
        p, what = self.prefix, self.what
        total = CounterMetricFamily(f"{p}_requests", f"Requests {what}.", labels=LABELS)
        duration = HistogramMetricFamily(
            f"{p}_request_duration_ms", f"Duration of requests {what}, in milliseconds.",
            labels=LABELS)
        request_size = HistogramMetricFamily(
            f"{p}_request_size_bytes", f"Body bytes of requests {what}.", labels=LABELS)
        response_size = HistogramMetricFamily(
            f"{p}_response_size_bytes", f"Body bytes of responses to requests {what}.",
            labels=LABELS)
        for (host, method, status, route), row in sorted(rows.items()):
            labels = [service, host, method, str(status), route]
            count = requests_in(row)
            total.add_metric(labels, count)
            duration.add_metric(labels, _cumulative(_DURATION_LE, row, DURATION_AT), row[0])
            request_size.add_metric(labels, _sizes(row, REQUEST_SIZE_AT, count), row[1])
            response_size.add_metric(labels, _sizes(row, RESPONSE_SIZE_AT, count), row[2])
        yield from (total, duration, request_size, response_size)


def _add(rows: dict[Key, Row], key: Key, values: Row) -> None:
    row = rows.get(key)
    if row is None:
        rows[key] = values
    else:
        rows[key] = [a + b for a, b in zip(row, values, strict=True)]


def requests_in(row: Row) -> float:
    """How many requests ``row`` counted (each is in exactly one duration bucket)."""
    return sum(row[DURATION_AT:REQUEST_SIZE_AT])


def _sizes(row: Row, start: int, count: float) -> list[tuple[str, float]]:
    """The size histogram at ``start``, its ``le="0"`` bucket derived (count minus the
    others: requests without a body are not counted into it)."""
    full = list(row)
    full[start] = count - sum(row[start + 1:start + len(SIZE_BUCKETS) + 1])
    return _cumulative(_SIZE_LE, full, start)


def _cumulative(bounds: tuple[str, ...], row: list[float], start: int
                ) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0.0
    for i, bound in enumerate(bounds):
        running += row[start + i]
        out.append((bound, running))
    out.append(("+Inf", running + row[start + len(bounds)]))
    return out


def _le(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """``le`` values as prometheus-client's own histograms spell them."""
    return tuple(float_to_go_string(b) for b in bounds)


_DURATION_LE = _le(DURATION_BUCKETS_MS)
_SIZE_LE = _le(SIZE_BUCKETS)


class RequestMetrics(Collector):
    """Both directions, and whether counting is on (only with ``metrics_address``: a
    gateway nobody scrapes does not pay for it)."""

    def __init__(self) -> None:
        self.enabled = False
        self.service = "gateway"
        self.server = RequestFamilies("http_server", "the gateway answered")
        self.client = RequestFamilies("http_client", "the gateway sent upstream")
        self.pairs: dict[PairKey, Row] = {}

    def pair_row(self, server: Key, client: Key) -> Row:
        """The pair row of a proxied request's two observations (past ``MAX_SERIES``
        pairs: the overflow's)."""
        key = (server, client)
        row = self.pairs.get(key)
        if row is None:
            if len(self.pairs) >= MAX_SERIES:
                key = (OVERFLOW, OVERFLOW)
            row = self.pairs.setdefault(key, [0] * _PAIR_WIDTH)
        return row

    def rows(self) -> tuple[dict[Key, Row], dict[Key, Row]]:
        """Server and client rows, the pairs folded in (a copy: a scrape changes nothing)."""
        server = {k: list(v) for k, v in self.server.series.items()}
        client = {k: list(v) for k, v in self.client.series.items()}
        for (server_key, client_key), pair in self.pairs.items():
            _add(server, server_key, pair[:_WIDTH])
            upstream = [pair[UPSTREAM_DURATION_SUM], *pair[1:DURATION_AT],
                        *pair[UPSTREAM_DURATION_AT:], *pair[REQUEST_SIZE_AT:_WIDTH]]
            _add(client, client_key, upstream)
        return server, client

    def enable(self, service: str) -> None:
        self.enabled = True
        self.service = service

    def collect(self) -> Iterator[Metric]:
        if not self.enabled:
            return
        server, client = self.rows()
        yield from self.server.families(self.service, server)
        yield from self.client.families(self.service, client)

    def describe(self) -> Iterable[Metric]:
        return list(self.collect())


REQUESTS = RequestMetrics()
