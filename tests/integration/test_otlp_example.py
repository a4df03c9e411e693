"""conf/otel.example.yaml: it passes ``gateway check`` as shipped, and run with only its
ports and its audit file moved, the two requests its header comment shows arrive at an
OTLP/HTTP collector as it says: the sampled caller's trace continued (server span under
the caller's, upstream under it), the refused request as an audit log record and a line
of the file, and the metrics pushed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli.check import run_check
from tests.integration.test_tracing import CALLER_SPAN, CALLER_TRACE, inside, one, request
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.otlp_receivers import HttpReceiver
from tests.support.peers import echo_upstream
from tests.support.processes import free_port
from tests.support.trace_collectors import wait_for_spans

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "otel.example.yaml"


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "warnings=0" in out.out, out


def wait_for(check: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} not seen in {timeout}s"
        time.sleep(0.2)


def test_example_runs(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    port = free_port()
    audit = tmp_path / "audit.jsonl"
    with echo_upstream(tmp_path, name="app") as up, HttpReceiver() as rx:
        for old, new in ((":8080", f":{port}"), ("127.0.0.1:8081", f"127.0.0.1:{up.port}"),
                         ("127.0.0.1:4318", f"127.0.0.1:{rx.port}"),
                         ("/tmp/gateway-audit.jsonl", str(audit))):
            assert old in text, f"{old} is no longer in {EXAMPLE.name}"
            text = text.replace(old, new)
        config = yaml.safe_load(text)
        assert config["tracing_sample_rate"] == 0.0001
        with gateway_daemon(tmp_path, config, port=port) as gw:
            status, body = request(gw, f"app.localhost:{port}", "/", {
                "traceparent": f"00-{CALLER_TRACE:032x}-{CALLER_SPAN:016x}-01"})
            assert status == 200
            status, _ = request(gw, f"private.localhost:{port}", "/",
                                {"Accept": "application/json"})
            assert status == 401
            spans = wait_for_spans(rx.spans, lambda s: len(s) >= 2)
            records = wait_for(rx.logs, "the audit record")
            points = wait_for(lambda: [p for p in rx.metrics()
                                       if p.name == "http_server_requests"], "metrics")
            lines = [json.loads(line) for line in audit.read_text().splitlines()]
    server = one(spans, kind="server")
    assert (server.trace_id, server.parent_id, server.name) == (CALLER_TRACE, CALLER_SPAN,
                                                                "GET app")
    inside(one(spans, kind="client"), server)
    echoed = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert echoed["traceparent"].startswith(f"00-{CALLER_TRACE:032x}-")
    [record] = records
    assert record.attributes["audit.decision"] == "deny"
    assert record.attributes["audit.route"] == "private"
    assert record.resource["deployment.environment"] == "trial"
    [line] = lines
    assert (line["decision"], line["status"], line["route"]) == ("deny", 401, "private")
    assert {p.attributes["route"] for p in points} == {"app", "private"}
