"""The README's demo (scripts/demo.sh): gateway, local identity provider and demo app;
a person signs in and the app shows who they are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.browser import Browser
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import ManagedProcess, free_port, http_ok

pytestmark = pytest.mark.integration


def test_demo_sign_in(tmp_path: Path, require_binary: Any) -> None:
    """demo/gateway.yaml with its ports moved: signing in as alice shows her on the demo
    app's page; the admins route lets her in; the public route needs no sign-in."""
    require_binary("node", "apt-get install -y nodejs npm")
    port, app_port = free_port(), free_port()
    text = (REPO_ROOT / "demo" / "gateway.yaml").read_text()
    with oidc_provider(tmp_path, [f"http://authenticate.localhost:{port}/oauth2/callback"]
                       ) as op:
        text = (text.replace(":8080", f":{port}").replace("http://127.0.0.1:9000", op.issuer)
                .replace("http://127.0.0.1:8081", f"http://127.0.0.1:{app_port}"))
        config = yaml.safe_load(text)
        app = ManagedProcess([sys.executable, str(REPO_ROOT / "demo" / "app.py"), "--port",
                              str(app_port)], log_dir=tmp_path, name="demo-app")
        with app, gateway_daemon(tmp_path, config, port=port):
            app.wait_ready(lambda: http_ok(f"http://127.0.0.1:{app_port}/"), 10)
            browser = Browser()
            page = browser.sign_in(f"http://localhost:{port}/", "alice@example.test")
            assert page.status == 200
            assert b"Signed in as <b>alice@example.test</b>" in page.body
            admins = browser.sign_in(f"http://admins.localhost:{port}/", "alice@example.test")
            assert admins.status == 200
            public = Browser().request("GET", f"http://public.localhost:{port}/")
            assert b"No signed-in user" in public.body
