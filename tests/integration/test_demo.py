"""The README's demo: the gateway in front of demo/app.py, as scripts/demo.sh runs it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.processes import ManagedProcess, free_port, http_ok

pytestmark = pytest.mark.integration


def test_demo_config_serves_demo_app(tmp_path: Path) -> None:
    """The demo config (with its ports moved) forwards to the demo app."""
    config = yaml.safe_load((REPO_ROOT / "demo" / "gateway.yaml").read_text())
    app_port = free_port()
    app = ManagedProcess([sys.executable, str(REPO_ROOT / "demo" / "app.py"), "--port",
                          str(app_port)], log_dir=tmp_path, name="demo-app")
    with app:
        app.wait_ready(lambda: http_ok(f"http://127.0.0.1:{app_port}/"), 10)
        for route in config["policy"]:
            route["to"] = f"http://127.0.0.1:{app_port}"
        with gateway_daemon(tmp_path, config) as gw:
            for route in config["policy"]:
                route["from"] = route["from"].replace(":8080", f":{gw.port}")
            gw.write_config({**config, "address": f"127.0.0.1:{gw.port}"})
            gw.wait_for_event(lambda e: "configuration reloaded" in e.get("message", ""))
            status, _, body = gw.get("/", host=f"localhost:{gw.port}")
    assert status == 200
    assert b"Hello from the demo app" in body
