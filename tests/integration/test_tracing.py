"""Tracing through the real daemon, for each provider: a collector on loopback receives
what the gateway exports, an independent decoder reads it (a Zipkin v2 model check,
the ``thrift`` package, ``msgpack``), and the span tree is checked: the caller's trace
continued, the server span's children (authorization with its session lookup, the
upstream request), parent ids, durations inside their parents, tags; the upstream gets
the context on in ``traceparent``. A collector that is down or slow changes neither the
answers nor their latency beyond noise."""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.kvstore import kv_gateway_config
from tests.support.peers import Upstream, echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, loopback_opener
from tests.support.trace_collectors import (
    HttpCollector,
    Span,
    UdpCollector,
    decode_agent,
    decode_jaeger_binary,
    decode_jaeger_compact,
    decode_zipkin,
    wait_for_spans,
)

pytestmark = pytest.mark.integration
CALLER_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CALLER_SPAN = 0x00F067AA0BA902B7


@dataclass
class Provider:
    """A collector for one provider, the settings pointing at it, and its decoder."""

    settings: dict[str, Any]
    decode: Callable[[], list[Span]]


def _http_decoder(collector: HttpCollector, method: str, path: str, ctype: str,
                  decode: Callable[[bytes], list[Span]]) -> Callable[[], list[Span]]:
    def run() -> list[Span]:
        spans: list[Span] = []
        for received in collector.bodies():
            assert (received.method, received.path) == (method, path), received
            assert received.headers["content-type"].startswith(ctype), received.headers
            spans += decode(received.body)
        return spans
    return run


@contextmanager
def provider(name: str) -> Iterator[Provider]:
    if name == "udp":
        with UdpCollector() as udp:
            yield Provider({"tracing_provider": "thrifttrace",
                            "tracing_thrifttrace_agent_endpoint": f"127.0.0.1:{udp.port}"},
                           lambda: [s for d in udp.bodies() for s in decode_jaeger_compact(d)])
        return
    with HttpCollector() as http:
        if name == "httptrace":
            yield Provider({"tracing_provider": "httptrace",
                            "tracing_httptrace_endpoint": f"{http.url}/api/v2/spans"},
                           _http_decoder(http, "POST", "/api/v2/spans", "application/json",
                                         decode_zipkin))
        elif name == "thrifttrace":
            yield Provider({"tracing_provider": "thrifttrace",
                            "tracing_thrifttrace_collector_endpoint": f"{http.url}/api/traces"},
                           _http_decoder(http, "POST", "/api/traces", "application/x-thrift",
                                         decode_jaeger_binary))
        else:
            yield Provider({"tracing_provider": "agenttrace",
                            "tracing_agenttrace_address": f"127.0.0.1:{http.port}"},
                           _http_decoder(http, "PUT", "/v0.4/traces", "application/msgpack",
                                         decode_agent))


def routes(port: int, up: Upstream) -> dict[str, Any]:
    """A public route and one needing sign-in (the provider is never asked: the tests
    send no browser there)."""
    return {
        "authenticate_service_url": f"http://auth.test:{port}", "idp_provider": "oidc",
        "idp_provider_url": "http://127.0.0.1:9", "idp_client_id": "gateway",
        "idp_client_secret": "secret",
        "policy": [{"from": f"http://public.test:{port}", "to": up.url, "name": "public",
                    "allow_public_unauthenticated_access": True},
                   {"from": f"http://private.test:{port}", "to": up.url, "name": "private",
                    "allow_any_authenticated_user": True}]}


def request(gw: Daemon, host: str, path: str, headers: dict[str, str] | None = None
            ) -> tuple[int, bytes]:
    req = urllib.request.Request(gw.url + path, headers={"Host": host, **(headers or {})})
    try:
        with loopback_opener().open(req, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def one(spans: list[Span], **match: Any) -> Span:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, [(s.name, hex(s.parent_id)) for s in spans])
    return found[0]


def inside(child: Span, parent: Span) -> None:
    """A child starts after and ends before its parent (1 µs of rounding each way)."""
    assert child.parent_id == parent.span_id
    assert child.trace_id == parent.trace_id
    assert child.start_us >= parent.start_us - 1, (child, parent)
    assert child.end_us <= parent.end_us + 1, (child, parent)


@pytest.mark.parametrize("name", ["httptrace", "thrifttrace", "udp", "agenttrace"])
def test_span_tree_per_provider(tmp_path: Path, name: str) -> None:
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        prov = stack.enter_context(provider(name))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            **prov.settings, "tracing_sample_rate": 1, **routes(port, up)},
            port=port))
        caller = f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"
        status, body = request(gw, f"public.test:{port}", "/p?x=1", {
            "traceparent": caller, "tracestate": "vendor=1"})
        assert status == 200
        echoed = {k.lower(): v for k, v in json.loads(body)["headers"]}
        status, _ = request(gw, f"private.test:{port}", "/q",
                            {"Accept": "application/json"})
        assert status == 401

        spans = wait_for_spans(prov.decode, lambda s: len(s) >= 5)
    # the caller's trace, continued: server span under the caller's, upstream under it
    server = one(spans, trace_id=CALLER_TRACE, kind="server")
    assert server.parent_id == CALLER_SPAN
    assert server.name == "GET public"
    assert server.tags["http.response.status_code"] == "200"
    assert server.tags["url.path"] == "/p"
    assert server.tags["gateway.route"] == "public"
    assert not server.error
    client = one(spans, trace_id=CALLER_TRACE, kind="client")
    inside(client, server)
    assert client.name == "upstream GET"
    assert client.tags["http.response.status_code"] == "200"
    assert client.tags["server.port"] == str(up.port)
    assert client.duration_us > 0 and server.duration_us >= client.duration_us
    # the upstream got the context on: our client span as its parent, tracestate kept
    assert echoed["traceparent"] == f"00-{CALLER_TRACE:032x}-{client.span_id:016x}-01"
    assert echoed["tracestate"] == "vendor=1"
    # a new trace for the request without context (rate 1): authorize, session lookup
    root = one(spans, kind="server", parent_id=0)
    assert root.trace_id != CALLER_TRACE
    assert root.name == "GET private"
    assert root.tags["http.response.status_code"] == "401"
    authorize = one(spans, name="authorize")
    inside(authorize, root)
    assert authorize.tags["gateway.decision"] == "deny"
    assert authorize.tags["gateway.reason"] == "user-unauthenticated"
    lookup = one(spans, name="session lookup")
    inside(lookup, authorize)
    assert lookup.tags["gateway.session.found"] == "false"
    assert len(spans) == 5, [s.name for s in spans]


def _latencies(gw: Daemon, port: int, count: int) -> list[float]:
    out = []
    for i in range(count):
        started = time.perf_counter()
        status, _ = request(gw, f"public.test:{port}", f"/l{i}")
        out.append(time.perf_counter() - started)
        assert status == 200
    return out


@pytest.mark.parametrize("state", ["down", "slow"])
def test_collector_down_or_slow_changes_nothing(tmp_path: Path, state: str) -> None:
    """Every request traced (rate 1) to a collector that refuses connections or answers
    after 3 s: the same answers, and latency within noise of tracing off."""
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app", quiet=True))
        if state == "down":
            endpoint = f"http://127.0.0.1:{free_port()}/api/v2/spans"
        else:
            slow = stack.enter_context(HttpCollector(delay=3.0))
            endpoint = f"{slow.url}/api/v2/spans"
        off_dir, on_dir = tmp_path / "off", tmp_path / "on"
        off_dir.mkdir()
        on_dir.mkdir()
        with gateway_daemon(off_dir, routes(port, up), port=port) as gw:
            _latencies(gw, port, 20)  # warm-up
            off = _latencies(gw, port, 150)
        with gateway_daemon(on_dir, {**routes(port, up), "tracing_sample_rate": 1,
                                     "tracing_provider": "httptrace",
                                     "tracing_httptrace_endpoint": endpoint}, port=port) as gw:
            _latencies(gw, port, 20)
            on = _latencies(gw, port, 150)
            status, _ = request(gw, f"private.test:{port}", "/q",
                                {"Accept": "application/json"})
            assert status == 401
    off_median, on_median = statistics.median(off), statistics.median(on)
    # generous: a blocking export would add the collector's 3 s (or a connect error's
    # round trip) to requests; a shared 2-core machine adds its own noise
    assert on_median < off_median * 2 + 0.005, (off_median, on_median)
    assert max(on) < 1.0, max(on)


def test_sign_in_spans(tmp_path: Path, require_binary: Any) -> None:
    """A sign-in with sessions in Redis: the callback's server span holds the identity
    provider's calls (the code exchange, keys, userinfo) and the session's Redis write;
    then the signed-in request's decision finds the session."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with ExitStack() as stack:
        redis = stack.enter_context(redis_server(tmp_path))
        op = stack.enter_context(oidc_provider(tmp_path,
                                               [f"http://auth.test:{port}/oauth2/callback"]))
        up = stack.enter_context(echo_upstream(tmp_path))
        prov = stack.enter_context(provider("httptrace"))
        config = {**kv_gateway_config(op, f"kvstore://127.0.0.1:{redis.port}/0", port, up.url),
                  **prov.settings, "tracing_sample_rate": 1}
        stack.enter_context(gateway_daemon(tmp_path, config, port=port))
        assert Browser().sign_in(f"http://app.test:{port}/", "alice@example.test").status == 200

        def done(spans: list[Span]) -> bool:
            return any(s.name == "kvstore put" for s in spans) and any(
                s.tags.get("gateway.session.found") == "true" for s in spans)
        spans = wait_for_spans(prov.decode, done)
    by_id = {s.span_id: s for s in spans}
    token = one(spans, name="idp POST /token")
    callback = by_id[token.parent_id]
    assert callback.kind == "server" and callback.tags["url.path"] == "/oauth2/callback"
    inside(token, callback)
    assert token.kind == "client"
    assert token.tags["http.response.status_code"] == "200"
    assert token.tags["url.full"] == f"{op.issuer}/token"
    under_callback = {s.name for s in spans if s.parent_id == callback.span_id}
    assert {"idp POST /token", "kvstore put"} <= under_callback, under_callback
    for s in spans:
        if s.parent_id == callback.span_id and s.name != "kvstore put":
            inside(s, callback)
    # two writes: the session, awaited before the cookie is handed out (inside the
    # callback), and the user record, which is not waited for (it may end after)
    puts = [s for s in spans if s.name == "kvstore put" and s.parent_id == callback.span_id]
    assert len(puts) == 2, puts
    assert all(p.tags["db.system"] == "redis" and p.kind == "client" for p in puts)
    assert any(p.end_us <= callback.end_us + 1 for p in puts), (puts, callback)
    discovery = [s for s in spans if s.name == "idp GET /.well-known/openid-configuration"]
    assert discovery and by_id[discovery[0].parent_id].kind == "server"
    lookup = next(s for s in spans if s.tags.get("gateway.session.found") == "true")
    authorize = by_id[lookup.parent_id]
    assert authorize.name == "authorize" and authorize.tags["gateway.decision"] == "allow"
    assert by_id[authorize.parent_id].name == "GET app.test"
    # no span holds a token, a cookie or a secret
    text = json.dumps([s.tags for s in spans])
    for secret in ("_gateway=", "code=", "Bearer", op.client_secret):
        assert secret not in text, secret


def test_malformed_context_is_never_an_error(tmp_path: Path) -> None:
    """Broken trace headers are ignored: 200, and the request is a root of its own."""
    port = free_port()
    bad = [{"traceparent": "00-xyz"}, {"traceparent": "ff-" + "a" * 32 + "-" + "b" * 16 + "-01"},
           {"b3": "not-a-b3-value"}, {"X-B3-TraceId": "zz", "X-B3-SpanId": "1"},
           {"X-B3-Sampled": "perhaps"}, {"traceparent": "\u00e9" * 60}]
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        prov = stack.enter_context(provider("httptrace"))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            **prov.settings, "tracing_sample_rate": 1, **routes(port, up)}, port=port))
        for headers in bad:
            status, _ = request(gw, f"public.test:{port}", "/m", headers)
            assert status == 200, headers
        spans = wait_for_spans(prov.decode, lambda s: sum(
            x.kind == "server" for x in s) >= len(bad))
    servers = [s for s in spans if s.kind == "server"]
    assert all(s.parent_id == 0 for s in servers)
    assert len({s.trace_id for s in servers}) == len(bad)


def test_reload_turns_tracing_on_and_off(tmp_path: Path) -> None:
    """A reload that sets tracing_provider starts tracing without a restart; one that
    unsets it stops it."""
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        prov = stack.enter_context(provider("httptrace"))
        config = routes(port, up)
        gw = stack.enter_context(gateway_daemon(tmp_path, config, port=port))
        assert request(gw, f"public.test:{port}", "/before")[0] == 200
        gw.write_config({**config, "address": f"127.0.0.1:{port}", "insecure_server": True,
                         **prov.settings, "tracing_sample_rate": 1})
        gw.wait_for_event(lambda e: e.get("namespace") == "gateway.tracing",
                          what="tracing started")
        assert request(gw, f"public.test:{port}", "/during")[0] == 200
        spans = wait_for_spans(prov.decode, lambda s: any(
            x.tags.get("url.path") == "/during" for x in s))
        gw.write_config({**config, "address": f"127.0.0.1:{port}", "insecure_server": True})
        deadline = time.monotonic() + 10
        while sum("configuration reloaded" in e.get("message", "")
                  for e in gw.log_events()) < 2:
            assert time.monotonic() < deadline, "second reload not seen"
            time.sleep(0.1)
        time.sleep(1.5)  # the old exporter sends what it held
        count = len(prov.decode())
        assert request(gw, f"public.test:{port}", "/after")[0] == 200
        time.sleep(2.0)
        after = prov.decode()
    assert len(after) == count
    assert not any(s.tags.get("url.path") in ("/before", "/after") for s in after)
    assert any(s.tags.get("url.path") == "/during" for s in spans)


def test_http2_caller_context_at_rate_zero(tmp_path: Path) -> None:
    """Over HTTP/2 too: the codec notices the caller's b3 headers, and a sampled caller
    is traced though the rate is 0; its unsampled requests are not (and keep their own
    headers upstream, untouched)."""
    port = free_port()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        prov = stack.enter_context(provider("agenttrace"))
        stack.enter_context(gateway_daemon(tmp_path, {
            **prov.settings, "tracing_sample_rate": 0, "codec_type": "http2",
            **routes(port, up)}, port=port))
        with H2Client(port) as client:
            sampled = client.request("GET", "/h2", f"public.test:{port}", [
                ("x-b3-traceid", f"{CALLER_TRACE:032x}"), ("x-b3-spanid", f"{CALLER_SPAN:016x}"),
                ("x-b3-sampled", "1")])
            unsampled = client.request("GET", "/h2-no", f"public.test:{port}", [
                ("x-b3-traceid", f"{CALLER_TRACE:032x}"), ("x-b3-spanid", f"{CALLER_SPAN:016x}"),
                ("x-b3-sampled", "0")])
        assert (sampled.status, unsampled.status) == (200, 200)
        spans = wait_for_spans(prov.decode, lambda s: len(s) >= 2)
        time.sleep(1.5)
        spans = prov.decode()
    server = one(spans, kind="server")
    assert (server.trace_id, server.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    client_span = one(spans, kind="client")
    inside(client_span, server)
    assert len(spans) == 2
    echoed = {k.lower(): v for k, v in json.loads(sampled.body)["headers"]}
    # ours replace the caller's: traceparent and b3 (it spoke B3) name the client span
    assert echoed["b3"] == f"{CALLER_TRACE:032x}-{client_span.span_id:016x}-1"
    assert "x-b3-spanid" not in echoed
    untouched = {k.lower(): v for k, v in json.loads(unsampled.body)["headers"]}
    assert untouched["x-b3-sampled"] == "0" and "traceparent" not in untouched
