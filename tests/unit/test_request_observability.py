"""Request metrics (``http_server_*``, ``http_client_*``), ``X-Request-Id`` and the access
log's fields, through the HTTP/1.1 and HTTP/2 codecs on in-memory transports."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.error import ConnectionDone
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability import request_metrics as rm
from gateway.observability.request_metrics import (
    REQUESTS,
    RequestFamilies,
    RequestMetrics,
    requests_in,
)
from gateway.wire import request_id as rid

from .test_http1 import Http1TestCase, get
from .test_http2_codec import H2TestCase

ROUTE = "https://app.example.com prefix=/api/"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


class _Route:
    def __init__(self, **fields: str) -> None:
        self.name = fields.get("name", "")
        self.from_url = fields.get("from_url", "https://App.example.com:8443")
        self.path = fields.get("path", "")
        self.prefix = fields.get("prefix", "")
        self.regex = fields.get("regex", "")


def counting(case: SynchronousTestCase) -> None:
    """Turn counting on with empty series for one test (the collector is process-wide)."""
    saved = (REQUESTS.enabled, REQUESTS.service, REQUESTS.server.series,
             REQUESTS.client.series, REQUESTS.pairs)
    REQUESTS.server.series, REQUESTS.client.series, REQUESTS.pairs = {}, {}, {}
    REQUESTS.enable("gateway")

    def restore() -> None:
        (REQUESTS.enabled, REQUESTS.service, REQUESTS.server.series,
         REQUESTS.client.series, REQUESTS.pairs) = saved
    case.addCleanup(restore)


def server_rows() -> dict[Any, list[float]]:
    return REQUESTS.rows()[0]


def client_rows() -> dict[Any, list[float]]:
    return REQUESTS.rows()[1]


def access_events(case: SynchronousTestCase) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "gateway.access":
            events.append(event)
    globalLogPublisher.addObserver(observe)
    case.addCleanup(globalLogPublisher.removeObserver, observe)
    return events


def parsed(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(collector: RequestMetrics) -> str:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    return generate_latest(registry).decode()


class LabelTests(SynchronousTestCase):
    def test_methods_bounded(self) -> None:
        self.assertEqual(rm.method_label(b"GET"), "GET")
        self.assertEqual(rm.method_label(b"PATCH"), "PATCH")
        self.assertEqual(rm.method_label(b"get"), "OTHER")  # methods are case-sensitive
        self.assertEqual(rm.method_label(b"X" * 50), "OTHER")

    def test_route_label(self) -> None:
        """The name when set, else ``from`` and the path matcher."""
        self.assertEqual(rm.route_label(_Route(name="api")), "api")
        self.assertEqual(rm.route_label(_Route(prefix="/api/")),
                         "https://App.example.com:8443 prefix=/api/")
        self.assertEqual(rm.route_label(_Route(path="/x")), "https://App.example.com:8443 path=/x")
        self.assertEqual(rm.route_label(_Route(regex="^/v[0-9]+")),
                         "https://App.example.com:8443 regex=^/v[0-9]+")
        self.assertEqual(rm.route_label(_Route()), "https://App.example.com:8443")

    def test_route_host_label(self) -> None:
        """The ``from`` authority, lower case: a wildcard route is one value."""
        self.assertEqual(rm.route_host_label(_Route()), "app.example.com:8443")
        self.assertEqual(rm.route_host_label(_Route(from_url="https://*.example.com")),
                         "*.example.com")
        self.assertEqual(rm.route_host_label(_Route(from_url="tcp+https://db.test:5432")),
                         "db.test:5432")


class FamilyTests(SynchronousTestCase):
    def test_buckets_and_sums(self) -> None:
        """Bounds are inclusive (``le``), counts cumulative, larger values only in +Inf;
        a size histogram's ``le="0"`` bucket holds the requests without a body."""
        family = RequestFamilies("http_server", "answered")
        key = ("app.test", "GET", 200, "r")
        for duration, size in ((0.1, 0), (1.0, 64), (70000.0, 10**9)):
            family.observe(key, duration, size, 5)
        collector = RequestMetrics()
        collector.server = family
        collector.enable("gateway-proxy")
        samples = parsed(scrape(collector))
        labels = {"host": "app.test", "method": "GET", "route": "r",
                  "service": "gateway-proxy", "status": "200"}

        def sample(name: str, **extra: str) -> float:
            return samples[(name, frozenset({**labels, **extra}.items()))]
        self.assertEqual(sample("http_server_requests_total"), 3)
        duration = "http_server_request_duration_ms"
        self.assertEqual([sample(duration + "_bucket", le=le) for le in
                          ("0.25", "0.5", "1.0", "60000.0", "+Inf")], [1, 1, 2, 2, 3])
        self.assertAlmostEqual(sample(duration + "_sum"), 70001.1)
        self.assertEqual(sample(duration + "_count"), 3)
        request = "http_server_request_size_bytes"
        self.assertEqual([sample(request + "_bucket", le=le) for le in
                          ("0.0", "64.0", "6.7108864e+07", "+Inf")], [1, 2, 2, 3])
        self.assertEqual(sample(request + "_sum"), 10**9 + 64)
        response = "http_server_response_size_bytes"
        self.assertEqual([sample(response + "_bucket", le=le) for le in
                          ("0.0", "64.0", "+Inf")], [0, 3, 3])
        self.assertEqual(sample(response + "_sum"), 15)

    def test_pairs_fold_into_both_directions(self) -> None:
        """A proxied request's pair row shows as one server and one client observation,
        added to what was counted directly (a retried attempt, an unrouted answer)."""
        metrics = RequestMetrics()
        server_key = ("app.test", "POST", 200, "r")
        client_key = ("127.0.0.1:9000", "POST", 200, "r")
        pair = metrics.pair_row(server_key, client_key)
        pair[0] += 9.0  # the whole request: 9 ms, in the 10 ms bucket
        pair[rm.DURATION_AT + 5] += 1
        pair[rm.UPSTREAM_DURATION_SUM] += 2.0  # the upstream's part: 2 ms
        pair[rm.UPSTREAM_DURATION_AT + 3] += 1
        pair[1] += 100  # request body
        pair[rm.REQUEST_SIZE_AT + 2] += 1
        metrics.client.observe(client_key, 1.0, 100, 0)  # a failed first attempt
        server, client = metrics.rows()
        self.assertEqual((requests_in(server[server_key]), server[server_key][0]), (1, 9.0))
        self.assertEqual((requests_in(client[client_key]), client[client_key][0]), (2, 3.0))
        self.assertEqual(client[client_key][1], 200)
        self.assertEqual(client[client_key][rm.DURATION_AT + 3], 1)  # 2 ms: le 2.5
        self.assertEqual(client[client_key][rm.DURATION_AT + 2], 1)  # 1 ms: le 1
        self.assertEqual(client[client_key][rm.REQUEST_SIZE_AT + 2], 2)
        self.assertEqual(len(pair), len(server[server_key]) + 1 + len(rm.DURATION_BUCKETS_MS)
                         + 1)

    def test_series_bounded(self) -> None:
        """Past ``MAX_SERIES`` label sets, new ones are counted under one overflow series."""
        self.patch(rm, "MAX_SERIES", 3)
        family = RequestFamilies("http_client", "sent")
        for status in range(200, 210):
            family.observe(("h", "GET", status, "r"), 1, 0, 0)
        self.assertEqual(len(family.series), 4)
        self.assertEqual(requests_in(family.series[rm.OVERFLOW]), 7)

    def test_nothing_when_off(self) -> None:
        """Without ``metrics_address`` nothing is collected: no empty families (grpc_* is
        never emitted either)."""
        self.assertNotIn("http_", scrape(RequestMetrics()))
        collector = RequestMetrics()
        collector.enable("gateway")
        text = scrape(collector)
        self.assertIn("# TYPE http_server_requests_total counter", text)
        self.assertNotIn("grpc_", text)


class RequestIdTests(SynchronousTestCase):
    def test_kept_when_valid(self) -> None:
        uuid = b"0f8fad5b-d9cb-469f-a165-70867728950e"
        self.assertEqual(rid.request_id_for([(b"X-Request-ID", uuid)]), uuid)
        self.assertEqual(rid.request_id_for([(b"x-request-id", b"a" * 128)]), b"a" * 128)

    def test_replaced_when_invalid(self) -> None:
        for bad in (b"", b"a" * 129, b"two words", b"x\r\nSet-Cookie: a", b"\xff", b"<b>"):
            made = rid.request_id_for([(b"x-request-id", bad)])
            self.assertRegex(made, rb"\A[0-9a-f]{32}\Z", bad)

    def test_new_ids_differ(self) -> None:
        """Across batches too (ids are made 256 at a time)."""
        ids = {rid.request_id_for([]) for _ in range(1000)}
        self.assertEqual(len(ids), 1000)
        self.assertTrue(all(len(made) == 32 for made in ids))


class Http1MetricsTests(Http1TestCase):
    def setUp(self) -> None:
        super().setUp()
        counting(self)

    def test_proxied_request(self) -> None:
        """One server and one client observation, labelled by the route, with the body
        sizes each way."""
        self.send(get(b"/api/x", method=b"POST", extra=b"Content-Length: 3\r\n") + b"abc")
        self.reactor.advance(0.004)
        self.upstream().respond(OK)
        self.assertEqual(self.answer().status, 200)
        server = server_rows()[("app.example.com", "POST", 200, ROUTE)]
        self.assertEqual((requests_in(server), *server[:3]), (1, 4.0, 3, 5))
        client = client_rows()[("127.0.0.1:9000", "POST", 200, ROUTE)]
        self.assertEqual((requests_in(client), client[1], client[2]), (1, 3, 5))

    def test_unknown_host_and_method(self) -> None:
        """Whatever Host and method a client sends, the labels stay bounded."""
        for i, method in enumerate((b"PROPFIND", b"MKCOL", b"LOCK", b"UNLOCK", b"COPY")):
            self.send(get(b"/", host=b"h%d.attacker.example" % i, method=method))
            self.assertEqual(self.answer().status, 404)
        self.assertEqual(list(server_rows()), [("unknown", "OTHER", 404, "none")])
        self.assertEqual(requests_in(server_rows()[("unknown", "OTHER", 404, "none")]),
                         5)
        self.assertEqual(client_rows(), {})

    def test_upstream_without_answer(self) -> None:
        """An upstream that closes without a response: client status 0, server 502."""
        self.send(get(b"/api/x"))
        self.upstream().protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.answer().status, 502)
        self.assertEqual(list(client_rows()), [("127.0.0.1:9000", "GET", 0, ROUTE)])
        self.assertEqual(list(server_rows()), [("app.example.com", "GET", 502, ROUTE)])

    def test_local_answer(self) -> None:
        self.send(get(b"/ping"))
        self.assertEqual(self.answer().status, 200)
        self.assertEqual(server_rows()[("unknown", "GET", 200, "none")][2], 3)

    def test_off_without_metrics_address(self) -> None:
        REQUESTS.enabled = False
        self.send(get(b"/api/x"))
        self.upstream().respond(OK)
        self.answer()
        self.assertEqual((server_rows(), client_rows()), ({}, {}))
        self.assertEqual(REQUESTS.pairs, {})


class Http1RequestIdTests(Http1TestCase):
    def test_local_answer_carries_one(self) -> None:
        self.send(get(b"/ping"))
        (value,) = self.answer().headers[b"x-request-id"]
        self.assertRegex(value, rb"\A[0-9a-f]{32}\Z")

    def test_invalid_replaced_upstream_and_on_response(self) -> None:
        """A client's id with a space is not passed on: the upstream and the client see
        the same new one, once."""
        self.send(get(b"/api/x", extra=b"X-Request-Id: a b\r\n"))
        upstream = self.upstream()
        sent = upstream.received()
        upstream.respond(b"HTTP/1.1 200 OK\r\nX-Request-Id: upstream-own\r\n"
                         b"Content-Length: 0\r\n\r\n")
        (value,) = self.answer().headers[b"x-request-id"]
        self.assertRegex(value, rb"\A[0-9a-f]{32}\Z")
        self.assertEqual(sent.lower().count(b"x-request-id"), 1)
        self.assertIn(b"x-request-id: " + value + b"\r\n", sent)

    def test_access_log_fields(self) -> None:
        events = access_events(self)
        self.send(get(b"/api/x?code=SECRET&q=1", method=b"POST",
                      extra=b"X-Request-Id: req-7\r\nContent-Length: 2\r\n") + b"hi")
        self.reactor.advance(0.01)
        self.upstream().respond(OK)
        self.assertEqual(self.answer().status, 200)
        (event,) = events
        legacy = {"format", "isError", "message", "system", "time"}  # twisted adds them
        fields = {k: v for k, v in event.items() if not k.startswith("log_")
                  and k not in legacy}
        self.assertEqual(fields, {
            "request_id": "req-7", "client": "192.0.2.7", "method": "POST",
            "host": "app.example.com", "path": "/api/x",
            "query": "?code=[redacted]&q=1", "status": 200, "bytes_in": 2, "bytes_out": 5,
            "duration_ms": 10.0, "upstream": "127.0.0.1:9000", "route": ROUTE,
            "reason": "public",
        })

    def test_access_log_unrouted(self) -> None:
        events = access_events(self)
        self.send(get(b"/", host=b"nowhere.example"))
        self.assertEqual(self.answer().status, 404)
        (event,) = events
        self.assertEqual(event["status"], 404)
        for absent in ("upstream", "route", "user_id", "email", "reason", "trace_id"):
            self.assertNotIn(absent, event)


class Http2Tests(H2TestCase):
    def setUp(self) -> None:
        super().setUp()
        counting(self)

    def test_counted_and_identified(self) -> None:
        stream = self.request(b"/x", extra=((b"x-request-id", b"h2-req"),))
        upstream = self.upstream()
        self.assertIn(b"x-request-id: h2-req\r\n", upstream.received())
        upstream.respond(OK)
        self.pump()
        result = self.result(stream)
        self.assertIn((b"x-request-id", b"h2-req"), result.headers)
        route = "https://app.example.com"
        server = server_rows()[("app.example.com", "GET", 200, route)]
        client = client_rows()[("127.0.0.1:9000", "GET", 200, route)]
        self.assertEqual((requests_in(server), requests_in(client)), (1, 1))

    def test_local_answer_counted(self) -> None:
        stream = self.request(b"/", authority=b"other.example")
        self.assertEqual(self.result(stream).status, 404)
        self.assertEqual(requests_in(server_rows()[("unknown", "GET", 404, "none")]), 1)
