"""conf/tracing.example.yaml: it passes ``gateway check`` as shipped, and run with only
its ports moved (the gateway's :8080, the app's :8081, the collector's :9411), the
request its header comment shows is traced at the default sample rate because its
caller sampled it, under the caller's span, with the upstream request under that."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from gateway.cli.check import run_check
from tests.integration.test_tracing import CALLER_SPAN, CALLER_TRACE, inside, one, request
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import free_port
from tests.support.trace_collectors import HttpCollector, decode_zipkin, wait_for_spans

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "tracing.example.yaml"


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "warnings=0" in out.out, out


def test_example_runs(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    port = free_port()
    with echo_upstream(tmp_path, name="app") as up, HttpCollector() as collector:
        for old, new in ((":8080", f":{port}"), ("127.0.0.1:8081", f"127.0.0.1:{up.port}"),
                         ("127.0.0.1:9411", f"127.0.0.1:{collector.port}")):
            assert old in text, f"{old} is no longer in {EXAMPLE.name}"
            text = text.replace(old, new)
        config = yaml.safe_load(text)
        assert config["tracing_sample_rate"] == 0.0001
        with gateway_daemon(tmp_path, config, port=port) as gw:
            status, body = request(gw, f"app.localhost:{port}", "/", {
                "traceparent": f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"})
            assert status == 200
            for i in range(20):  # not sampled (0.01 %, no caller context): no spans
                assert request(gw, f"app.localhost:{port}", f"/{i}")[0] == 200

            def decode() -> list:  # type: ignore[type-arg]
                return [s for r in collector.bodies() for s in decode_zipkin(r.body)]
            spans = wait_for_spans(decode, lambda s: len(s) >= 2)
    echoed = {k.lower(): v for k, v in json.loads(body)["headers"]}
    server = one(spans, kind="server")
    assert (server.trace_id, server.parent_id, server.name) == (CALLER_TRACE, CALLER_SPAN,
                                                                "GET app")
    client = one(spans, kind="client")
    inside(client, server)
    assert echoed["traceparent"] == f"00-{CALLER_TRACE:032x}-{client.span_id:016x}-01"
    assert len(spans) == 2
