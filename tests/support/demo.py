"""The README's demo (demo/gateway.yaml, demo/app.py, a local identity provider) on free
ports, for the tests that sign in through it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import ManagedProcess, free_port, http_ok


@contextmanager
def running_demo(tmp_path: Path) -> Iterator[int]:
    """demo/gateway.yaml with its ports moved, the demo app and the provider running;
    yields the gateway's port (routes: localhost, admins.localhost, public.localhost)."""
    port, app_port = free_port(), free_port()
    text = (REPO_ROOT / "demo" / "gateway.yaml").read_text()
    with oidc_provider(tmp_path, [f"http://authenticate.localhost:{port}/oauth2/callback"]
                       ) as op:
        text = (text.replace(":8080", f":{port}").replace("http://127.0.0.1:9000", op.issuer)
                .replace("http://127.0.0.1:8081", f"http://127.0.0.1:{app_port}"))
        app = ManagedProcess([sys.executable, str(REPO_ROOT / "demo" / "app.py"), "--port",
                              str(app_port)], log_dir=tmp_path, name="demo-app")
        with app, gateway_daemon(tmp_path, yaml.safe_load(text), port=port):
            app.wait_ready(lambda: http_ok(f"http://127.0.0.1:{app_port}/"), 10)
            yield port
