"""The README's demo (scripts/demo.sh): gateway, local identity provider and demo app;
a person signs in and the app shows who they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.demo import running_demo

pytestmark = pytest.mark.integration


def test_demo_sign_in(tmp_path: Path, require_binary: Any) -> None:
    """demo/gateway.yaml with its ports moved: signing in as alice shows her on the demo
    app's page; the admins route lets her in; the public route needs no sign-in."""
    require_binary("node", "apt-get install -y nodejs npm")
    with running_demo(tmp_path) as port:
        browser = Browser()
        page = browser.sign_in(f"http://localhost:{port}/", "alice@example.test")
        assert page.status == 200
        assert b"Signed in as <b>alice@example.test</b>" in page.body
        admins = browser.sign_in(f"http://admins.localhost:{port}/", "alice@example.test")
        assert admins.status == 200
        public = Browser().request("GET", f"http://public.localhost:{port}/")
        assert b"No signed-in user" in public.body
