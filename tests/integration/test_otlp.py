"""Tracing over OTLP through the real daemon: an OTLP/HTTP and an OTLP/gRPC collector on
loopback decode the protobuf messages with ``opentelemetry-proto``
(``tests/support/otlp_receivers.py``), and the span tree is checked: semantic-convention
attributes, parent-child structure across authorize and upstream, the caller's
``traceparent`` continued and our span's context forwarded upstream; the standard
``OTEL_*`` variables win over the file; the forced-sampling budget holds; and a dead,
hung or refusing collector costs requests nothing while the loss counters rise."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_tracing import CALLER_SPAN, CALLER_TRACE, inside, one, request, routes
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.otlp_receivers import GrpcReceiver, HttpReceiver
from tests.support.peers import echo_upstream
from tests.support.processes import free_port, loopback_opener
from tests.support.trace_collectors import wait_for_spans

pytestmark = pytest.mark.integration


@contextmanager
def receiver(protocol: str, **kwargs: Any) -> Iterator[HttpReceiver | GrpcReceiver]:
    with (GrpcReceiver(**kwargs) if protocol == "grpc" else HttpReceiver(**kwargs)) as r:
        yield r


def scrape(port: int) -> str:
    with loopback_opener().open(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one series in a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if match and match[1] == name and (match[2] or "") == want:
            return float(match[3])
    return 0.0


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_span_tree_over_otlp(tmp_path: Path, protocol: str) -> None:
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        rx = stack.enter_context(receiver(protocol))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            "tracing_provider": "otlp", "tracing_sample_rate": 1,
            "otel_exporter_otlp_endpoint": rx.url, "otel_exporter_otlp_protocol": protocol,
            "otel_exporter_otlp_headers": {"x-collector-key": "k%3D1"},
            "otel_resource_attributes": {"deployment.environment": "test"},
            **routes(port, up)}, port=port))
        caller = f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"
        status, body = request(gw, f"public.test:{port}", "/p?x=1", {
            "traceparent": caller, "User-Agent": "otlp-test/1"})
        assert status == 200
        echoed = {k.lower(): v for k, v in json.loads(body)["headers"]}
        status, _ = request(gw, f"private.test:{port}", "/q", {"Accept": "application/json"})
        assert status == 401
        spans = wait_for_spans(rx.spans, lambda s: len(s) >= 5)
        exports = rx.received("traces")
    server = one(spans, trace_id=CALLER_TRACE, kind="server")
    assert server.parent_id == CALLER_SPAN
    assert server.name == "GET public"
    tags = server.tags
    assert tags["http.request.method"] == "GET"
    assert tags["url.path"] == "/p"
    assert tags["http.response.status_code"] == "200"
    assert (tags["server.address"], tags["server.port"]) == ("public.test", str(port))
    assert tags["client.address"] == "127.0.0.1"
    assert tags["user_agent.original"] == "otlp-test/1"
    assert tags["gateway.route"] == "public"
    client = one(spans, trace_id=CALLER_TRACE, kind="client")
    inside(client, server)
    assert client.tags["server.port"] == str(up.port)
    assert echoed["traceparent"] == f"00-{CALLER_TRACE:032x}-{client.span_id:016x}-01"
    root = one(spans, kind="server", parent_id=0)
    authorize = one(spans, name="authorize")
    inside(authorize, root)
    assert authorize.tags["gateway.decision"] == "deny"
    inside(one(spans, name="session lookup"), authorize)
    resource = next(iter(rx.span_resources()))
    assert resource["service.name"] == "gateway"
    assert resource["deployment.environment"] == "test"
    # the headers setting, its value percent-decoded as OTEL_EXPORTER_OTLP_HEADERS's are
    assert all(e.headers.get("x-collector-key") == "k=1" for e in exports), exports[0].headers


def test_signed_in_user_on_the_span_unless_turned_off(tmp_path: Path) -> None:
    """The server span names the user a decision saw (``user.id``), not with
    ``tracing_user_id: false``. A programmatic token makes the user without a browser."""
    from tests.support.browser import Browser
    from tests.support.peers import oidc_provider

    port = free_port()
    for user_id in (True, False):
        run = tmp_path / str(user_id)
        run.mkdir()
        with ExitStack() as stack:
            op = stack.enter_context(oidc_provider(
                run, [f"http://auth.test:{port}/oauth2/callback"]))
            up = stack.enter_context(echo_upstream(run))
            rx = stack.enter_context(HttpReceiver())
            stack.enter_context(gateway_daemon(run, {
                "tracing_provider": "otlp", "tracing_sample_rate": 1,
                "otel_exporter_otlp_endpoint": rx.url, "tracing_user_id": user_id,
                "authenticate_service_url": f"http://auth.test:{port}",
                "idp_provider": "oidc", "idp_provider_url": op.issuer,
                "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
                "idp_scopes": ["openid", "email"], "cookie_secure": False,
                "policy": [{"from": f"http://app.test:{port}", "to": up.url,
                            "allow_any_authenticated_user": True}]}, port=port))
            assert Browser().sign_in(f"http://app.test:{port}/", "alice@example.test"
                                     ).status == 200
            spans = wait_for_spans(rx.spans, lambda s: any(
                x.kind == "server" and x.tags.get("http.response.status_code") == "200"
                and x.name.startswith("GET app.test") for x in s))
        served = [s for s in spans if s.kind == "server" and s.name.startswith("GET app.test")
                  and s.tags["http.response.status_code"] == "200"]
        assert served
        if user_id:
            assert all(s.tags.get("user.id") for s in served), served
        else:
            assert not any("user.id" in s.tags for s in spans)


def test_otel_environment_wins_over_the_file(tmp_path: Path) -> None:
    """The file traces with httptrace at rate 0 to a dead endpoint under its own service
    name; the standard variables send OTLP/HTTP to the receiver, every request sampled,
    as service ``from-env`` (OTEL_SERVICE_NAME beats service.name in
    OTEL_RESOURCE_ATTRIBUTES), reading only B3 (so a traceparent is not continued),
    gzip-compressed (OTEL_EXPORTER_OTLP_COMPRESSION, which the exporters read)."""
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        rx = stack.enter_context(HttpReceiver())
        dead = f"http://127.0.0.1:{free_port()}"
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": rx.url,
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_SERVICE_NAME": "from-env",
               "OTEL_RESOURCE_ATTRIBUTES": "service.name=not-this,team=edge",
               "OTEL_TRACES_SAMPLER": "parentbased_always_on", "OTEL_PROPAGATORS": "b3",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            "tracing_provider": "httptrace", "tracing_httptrace_endpoint": dead,
            "tracing_sample_rate": 0, "otel_exporter_otlp_endpoint": dead,
            "otel_exporter_otlp_protocol": "grpc", "otel_service_name": "from-file",
            **routes(port, up)}, env=env, port=port))
        status, body = request(gw, f"public.test:{port}", "/e", {
            "traceparent": f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"})
        assert status == 200
        spans = wait_for_spans(rx.spans, lambda s: any(x.kind == "client" for x in s))
        resource = rx.span_resources()[0]
        assert all(e.headers.get("content-encoding") == "gzip" for e in rx.received("traces"))
    server = one(spans, kind="server")
    assert server.parent_id == 0 and server.trace_id != CALLER_TRACE  # traceparent not read
    assert resource["service.name"] == "from-env" and resource["team"] == "edge"
    echoed = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert echoed["traceparent"].split("-")[1] == f"{server.trace_id:032x}"


def test_sdk_disabled_turns_tracing_off(tmp_path: Path) -> None:
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        rx = stack.enter_context(HttpReceiver())
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            "tracing_provider": "otlp", "tracing_sample_rate": 1,
            "otel_exporter_otlp_endpoint": rx.url, **routes(port, up)},
            env={"OTEL_SDK_DISABLED": "true"}, port=port))
        status, body = request(gw, f"public.test:{port}", "/off")
        assert status == 200
        time.sleep(2.5)  # two export periods
        assert rx.exports == []
        assert "traceparent" not in {k.lower() for k, _ in json.loads(body)["headers"]}


def test_caller_forced_sampling_budget(tmp_path: Path) -> None:
    """At rate 0 every request says "sampled"; at 5 a second (burst 10) only about that
    many are traced, and the refused ones are counted. Each request still carries a
    traceparent upstream: the caller's, untouched."""
    port, metrics_port = free_port(), free_port()
    sent = 60
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app", quiet=True))
        rx = stack.enter_context(HttpReceiver())
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            "tracing_provider": "otlp", "tracing_sample_rate": 0,
            "tracing_caller_sampled_per_second": 5, "otel_exporter_otlp_endpoint": rx.url,
            "metrics_address": f"127.0.0.1:{metrics_port}", **routes(port, up)}, port=port))
        started = time.monotonic()
        for i in range(sent):
            status, _ = request(gw, f"public.test:{port}", f"/f{i}", {
                "traceparent": f"00-{CALLER_TRACE + i:032x}-{CALLER_SPAN:016x}-01"})
            assert status == 200
        elapsed = time.monotonic() - started
        allowed = 10 + 5 * elapsed + 1
        assert allowed < sent, f"{sent} requests took {elapsed:.1f}s: the test proves nothing"
        time.sleep(2.5)
        servers = [s for s in rx.spans() if s.kind == "server"]
        refused = metric(scrape(metrics_port), "gateway_tracing_caller_sampled_refused_total")
    assert 10 <= len(servers) <= allowed, (len(servers), elapsed)
    assert refused == sent - len(servers)


def _latencies(gw: Daemon, port: int, count: int) -> list[float]:
    out = []
    for i in range(count):
        started = time.perf_counter()
        status, _ = request(gw, f"public.test:{port}", f"/l{i}")
        out.append(time.perf_counter() - started)
        assert status == 200
    return out


def _private_latencies(gw: Daemon, port: int, count: int) -> list[float]:
    """Requests refused for want of a session: each one an audit event."""
    out = []
    for i in range(count):
        started = time.perf_counter()
        status, _ = request(gw, f"private.test:{port}", f"/a{i}", {"Accept": "application/json"})
        out.append(time.perf_counter() - started)
        assert status == 401
    return out


@pytest.mark.parametrize(("protocol", "state"), [
    ("grpc", "dead"), ("grpc", "hung"), ("grpc", "refusing"), ("http/protobuf", "hung"),
    ("http/protobuf", "refusing")])
def test_collector_trouble_costs_requests_nothing(tmp_path: Path, protocol: str,
                                                  state: str) -> None:
    """Every request traced (rate 1), every decision an audit record and the metrics
    pushed every second, all over OTLP to a collector that is not there, that answers
    after 5 s (the export timeout is 1 s) or that refuses: the same answers with the
    latency of all that off, and what was not delivered is counted, per signal."""
    port, metrics_port = free_port(), free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app", quiet=True))
        if state == "dead":
            endpoint = f"http://127.0.0.1:{free_port()}"
        else:
            rx = stack.enter_context(receiver(protocol, delay=5.0 if state == "hung" else 0.0,
                                              refuse=state == "refusing"))
            endpoint = rx.url
        off_dir, on_dir = tmp_path / "off", tmp_path / "on"
        off_dir.mkdir()
        on_dir.mkdir()
        with gateway_daemon(off_dir, routes(port, up), port=port) as gw:
            _latencies(gw, port, 20)
            off = _latencies(gw, port, 150)
            off_private = _private_latencies(gw, port, 50)
        with gateway_daemon(on_dir, {
                **routes(port, up), "tracing_provider": "otlp", "tracing_sample_rate": 1,
                "otel_logs_exporter": "otlp", "otel_metrics_exporter": "otlp",
                "otel_metric_export_interval": 1000,
                "otel_exporter_otlp_protocol": protocol, "otel_exporter_otlp_endpoint": endpoint,
                "otel_exporter_otlp_timeout": 1000,
                "metrics_address": f"127.0.0.1:{metrics_port}"}, port=port) as gw:
            _latencies(gw, port, 20)
            on = _latencies(gw, port, 150)
            on_private = _private_latencies(gw, port, 50)
            deadline = time.monotonic() + 30
            signals = ("spans", "audit", "metrics")
            while True:
                text = scrape(metrics_port)
                lost = {signal: metric(text, "gateway_telemetry_failed_total", signal=signal)
                        + metric(text, "gateway_telemetry_dropped_total", signal=signal)
                        for signal in signals}
                if all(lost.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            for signal in signals:
                assert metric(text, "gateway_telemetry_exported_total", signal=signal) == 0
    assert all(lost.values()), (lost, text)
    for before, after in ((off, on), (off_private, on_private)):
        assert statistics.median(after) < statistics.median(before) * 2 + 0.005, (
            statistics.median(before), statistics.median(after))
        assert max(after) < 1.0, max(after)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_metrics_pushed_over_otlp(tmp_path: Path, protocol: str) -> None:
    """The Prometheus endpoint's families arrive as OTLP data points: the request
    counter as a monotonic sum with its labels, its duration as a histogram whose count
    matches, the build info as a gauge; the same numbers a scrape reads."""
    port, metrics_port = free_port(), free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        rx = stack.enter_context(receiver(protocol))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            "otel_metrics_exporter": "otlp", "otel_metric_export_interval": 1000,
            "otel_exporter_otlp_endpoint": rx.url, "otel_exporter_otlp_protocol": protocol,
            "metrics_address": f"127.0.0.1:{metrics_port}", **routes(port, up)}, port=port))
        for i in range(3):
            assert request(gw, f"public.test:{port}", f"/m{i}")[0] == 200

        def counted() -> list[Any]:
            return [p for p in rx.metrics() if p.name == "http_server_requests"
                    and p.attributes.get("route") == "public" and p.value == 3]
        points = wait_for_points(counted)
        scraped = scrape(metrics_port)
        everything = rx.metrics()
    assert points[0].kind == "sum" and points[0].attributes["status"] == "200"
    assert metric(scraped, "http_server_requests_total", **{
        k: v for k, v in points[0].attributes.items()}) == 3
    durations = [p for p in everything if p.name == "http_server_request_duration_ms"
                 and p.attributes.get("route") == "public" and p.value == 3]
    assert durations and durations[0].kind == "histogram"
    build = [p for p in everything if p.name == "gateway_build_info"]
    assert build and build[0].kind == "gauge" and build[0].value == 1
    assert build[0].resource["service.name"] == "gateway"
    assert "service.instance.id" in build[0].resource
    names = {p.name for p in everything}
    assert {"gateway_telemetry_exported", "gateway_tracing_caller_sampled_refused"} <= names


def wait_for_points(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "metric points not seen"
        time.sleep(0.2)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_tls_to_the_collector(tmp_path: Path, protocol: str) -> None:
    """A collector over TLS that requires a client certificate: spans arrive with the CA
    and client certificate settings (from the environment); without the client
    certificate the collector refuses and the spans are counted as failed."""
    from tests.support.otlp_receivers import make_tls

    tls = make_tls(tmp_path)
    port, metrics_port = free_port(), free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        rx = stack.enter_context(receiver(protocol, tls=tls))
        settings = {"tracing_provider": "otlp", "tracing_sample_rate": 1,
                    "otel_exporter_otlp_endpoint": rx.url,
                    "otel_exporter_otlp_protocol": protocol,
                    "otel_exporter_otlp_timeout": 2000,
                    "metrics_address": f"127.0.0.1:{metrics_port}", **routes(port, up)}
        with_cert = tmp_path / "with"
        with_cert.mkdir()
        with gateway_daemon(with_cert, settings, port=port, env={
                "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tls.ca),
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(tls.client_cert),
                "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(tls.client_key)}) as gw:
            assert request(gw, f"public.test:{port}", "/tls")[0] == 200
            spans = wait_for_spans(rx.spans, lambda s: len(s) >= 2)
        assert one(spans, kind="server").tags["url.path"] == "/tls"
        without = tmp_path / "without"
        without.mkdir()
        with gateway_daemon(without, settings, port=port, env={
                "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tls.ca)}) as gw:
            assert request(gw, f"public.test:{port}", "/no-cert")[0] == 200
            deadline = time.monotonic() + 20
            while metric(scrape(metrics_port), "gateway_telemetry_failed_total",
                         signal="spans") == 0:
                assert time.monotonic() < deadline, "the refused export was not counted"
                time.sleep(0.5)
        assert not any(s.tags.get("url.path") == "/no-cert" for s in rx.spans())
