"""Request metrics scraped by a real Prometheus (Basic auth, over TLS), the access log and
``X-Request-Id`` end to end, and ``log_level`` / ``proxy_log_level`` across a reload."""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import ManagedProcess, free_port, http_ok, wait_until
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration

ROUTE = {"from": "http://app.test", "allow_public_unauthenticated_access": True}
REQUESTS_SENT = 20


def query(api: str, promql: str) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def scrape(url: str, context: ssl.SSLContext) -> str:
    request = urllib.request.Request(url, headers={
        "Authorization": "Basic " + base64.b64encode(b"prom:s3cret").decode()})
    with urllib.request.urlopen(request, timeout=5, context=context) as reply:
        return str(reply.read().decode())


def access_events(daemon: Daemon) -> list[dict[str, Any]]:
    return [e for e in daemon.log_events() if e.get("namespace") == "gateway.access"]


def test_prometheus_scrapes_request_metrics(tmp_path: Path, require_binary: Any) -> None:
    """Prometheus scrapes the endpoint over TLS with Basic credentials: the target is up
    and the request counter reaches its query API; promtool accepts the exposition
    (apart from the `_ms` names the reference fixes)."""
    require_binary("prometheus", "apt-get install -y prometheus")
    require_binary("promtool", "apt-get install -y prometheus")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    metrics_port, prom_port = free_port(), free_port()
    with echo_upstream(tmp_path, quiet=True) as up:
        config = {
            "metrics_address": f"127.0.0.1:{metrics_port}",
            "metrics_basic_auth": base64.b64encode(b"prom:s3cret").decode(),
            "metrics_certificate": base64.b64encode(
                b"".join(b.bytes() for b in server.cert_chain_pems)).decode(),
            "metrics_certificate_key": base64.b64encode(
                server.private_key_pem.bytes()).decode(),
            "policy": [{**ROUTE, "to": up.url}],
        }
        with gateway_daemon(tmp_path, config) as gw:
            prom_config = tmp_path / "prometheus.yml"
            prom_config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{
                    "job_name": "gateway", "scheme": "https",
                    "basic_auth": {"username": "prom", "password": "s3cret"},
                    "tls_config": {"ca_file": str(ca_file)},
                    "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
                }],
            }))
            prometheus = ManagedProcess([
                "prometheus", f"--config.file={prom_config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ], log_dir=tmp_path, name="prometheus").start()
            api = f"http://127.0.0.1:{prom_port}"
            try:
                wait_until(lambda: http_ok(f"{api}/-/ready"), 30, what="prometheus ready")
                with RawClient(gw.port) as client:
                    for _ in range(REQUESTS_SENT):
                        assert client.request("GET", "/", "app.test").status == 200
                    assert client.request("GET", "/", "elsewhere.test").status == 404

                def up_target() -> bool:
                    return [r["value"][1] for r in query(api, 'up{job="gateway"}')] == ["1"]
                wait_until(up_target, 30, what="the target up", interval=0.5)
                counted = 'http_server_requests_total{job="gateway",host="app.test",' \
                          'method="GET",status="200",service="gateway"}'

                def counter() -> bool:
                    result = query(api, counted)
                    return bool(result) and float(result[0]["value"][1]) >= REQUESTS_SENT
                wait_until(counter, 30, what="the request counter", interval=0.5)
                (series,) = query(api, counted)
                assert series["metric"]["route"] == "http://app.test"
                client_side = query(api, 'http_client_requests_total{job="gateway"}')
                assert float(client_side[0]["value"][1]) >= REQUESTS_SENT
                assert client_side[0]["metric"]["host"] == up.url.split("//")[1]
                unknown = query(api, 'http_server_requests_total{host="unknown",'
                                     'status="404"}')
                assert unknown and unknown[0]["metric"]["route"] == "none"
                assert query(api, "http_server_request_duration_ms_bucket")
            finally:
                prometheus.stop()
            trusting = ssl.create_default_context(cafile=str(ca_file))
            text = scrape(f"https://127.0.0.1:{metrics_port}/metrics", trusting)
    for family in ("http_server_requests_total", "http_server_request_duration_ms_bucket",
                   "http_server_request_size_bytes_bucket",
                   "http_server_response_size_bytes_bucket", "http_client_requests_total",
                   "http_client_request_duration_ms_bucket",
                   "http_client_request_size_bytes_bucket",
                   "http_client_response_size_bytes_bucket"):
        assert family + "{" in text, family
    assert "grpc_" not in text  # no empty families before split-mode services exist
    check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=30)
    assert check.returncode in (0, 3), check.stderr
    lint = [line for line in check.stderr.decode().splitlines()
            if "should not contain abbreviated units" not in line]
    assert lint == [], lint


def test_access_log_and_request_id(tmp_path: Path) -> None:
    """A client's valid X-Request-Id reaches the upstream and comes back; an invalid one
    is replaced by a new one, the same upstream, on the response and in the access log,
    which has every field a shipper reads."""
    with echo_upstream(tmp_path, quiet=True) as up, \
            gateway_daemon(tmp_path, {"policy": [{**ROUTE, "to": up.url}]}) as gw, \
            RawClient(gw.port) as client:
        reply = client.request("GET", "/items?code=abc&page=2", "app.test",
                               {"X-Request-Id": "order-42"})
        assert reply.status == 200
        assert reply.headers["x-request-id"] == "order-42"
        sent = {k.lower(): v for k, v in reply.json()["headers"]}  # type: ignore[index,union-attr]
        assert sent["x-request-id"] == "order-42"
        bad = client.request("GET", "/", "app.test", {"X-Request-Id": "x" * 200})
        made = bad.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", made)
        sent = {k.lower(): v for k, v in bad.json()["headers"]}  # type: ignore[index,union-attr]
        assert sent["x-request-id"] == made
        missing = client.request("GET", "/", "nowhere.test")
        assert missing.status == 404
        assert re.fullmatch(r"[0-9a-f]{32}", missing.headers["x-request-id"])
    first, second, third = access_events(gw)
    assert first["request_id"] == "order-42"
    assert {"time", "level", "request_id", "client", "method", "host", "path", "query",
            "status", "bytes_in", "bytes_out", "duration_ms", "upstream", "route",
            "reason"} <= set(first)
    assert first["query"] == "?code=[redacted]&page=2"
    assert (first["client"], first["method"], first["host"], first["path"]) == \
        ("127.0.0.1", "GET", "app.test", "/items")
    assert (first["status"], first["bytes_in"], first["route"], first["reason"]) == \
        (200, 0, "http://app.test", "public")
    assert first["bytes_out"] == len(reply.body)
    assert first["upstream"] == up.url.split("//")[1]
    assert "trace_id" not in first  # filled in by tracing, when on
    assert second["request_id"] == made
    assert third["request_id"] == missing.headers["x-request-id"]
    assert (third["status"], "route" in third, "upstream" in third) == (404, False, False)


def test_log_levels_follow_reloads(tmp_path: Path) -> None:
    """proxy_log_level defaults to log_level; a reload that sets it turns the access log
    on without a restart."""
    with echo_upstream(tmp_path, quiet=True) as up:
        config = {"log_level": "warn", "policy": [{**ROUTE, "to": up.url}]}
        with gateway_daemon(tmp_path, config) as gw, RawClient(gw.port) as client:
            assert client.request("GET", "/", "app.test").status == 200
            assert access_events(gw) == []  # warn, inherited from log_level
            assert not [e for e in gw.log_events() if e.get("level") == "info"
                        and str(e.get("namespace", "")).startswith("gateway.")]
            gw.write_config({**config, "insecure_server": True,
                             "address": f"127.0.0.1:{gw.port}", "proxy_log_level": "info"})
            deadline = time.monotonic() + 20
            while not access_events(gw):
                assert time.monotonic() < deadline, "the access log stayed off"
                assert client.request("GET", "/", "app.test").status == 200
                time.sleep(0.2)
