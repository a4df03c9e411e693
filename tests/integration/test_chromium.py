"""One end-to-end sign-in in a real browser: Debian's headless Chromium, driven by
playwright-core (which uses the installed browser, downloads nothing), through the
provider's real pages to the upstream."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import REPO_ROOT
from tests.support.demo import running_demo

pytestmark = pytest.mark.integration
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"


def test_sign_in_with_chromium(tmp_path: Path, require_binary: Any) -> None:
    """A real browser signs in as alice and sees the demo app name her; the session
    cookie is HttpOnly on the route host."""
    require_binary("chromium", "apt-get install -y chromium")
    node = require_binary("node", "apt-get install -y nodejs npm")
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/peers/browser` first")
    with running_demo(tmp_path) as port:
        result = subprocess.run(
            [node, "signin.js", f"http://localhost:{port}/hello?x=1",
             "alice@example.test"], cwd=BROWSER_DIR, capture_output=True, text=True,
            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["url"] == f"http://localhost:{port}/hello?x=1"
    assert "Signed in as alice@example.test" in seen["text"]
    cookie = next(c for c in seen["cookies"] if c["name"] == "_gateway"
                  and c["domain"] == "localhost")
    assert cookie["httpOnly"] is True
