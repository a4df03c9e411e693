"""The gateway's own pages in a real browser (issue 16): Debian's headless Chromium signs
in through the test provider and screenshots each page at a desktop and a phone width;
the test checks each page's text for its key strings (not pixels), that nothing scrolls
sideways on the phone, that no markup from a user's name became elements, and that the
"Sign in as someone else" button works by clicking it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _require_binary
from tests.support.daemon import REPO_ROOT
from tests.support.pages_env import PagesEnv, pages_env
from tests.support.peers import NODE_INSTALL_HINT

pytestmark = pytest.mark.integration
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"
WIDTHS = (1280, 390)
LOGIN = "<b>bob</b>@example.test#<i>staff</i>"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PagesEnv]:
    _require_binary("node", NODE_INSTALL_HINT)
    with pages_env(tmp_path_factory.mktemp("pages-chromium")) as e:
        yield e


def run_pages(tmp_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    chromium = _require_binary("chromium", "apt-get install -y chromium")
    node = _require_binary("node", NODE_INSTALL_HINT)
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/peers/browser` first")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"widths": list(WIDTHS), "out": str(tmp_path), **spec}))
    result = subprocess.run([node, "pages.js", str(path)], cwd=BROWSER_DIR,
                            capture_output=True, text=True, timeout=180,
                            env={"CHROMIUM": chromium, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def test_pages_at_desktop_and_phone_width(env: PagesEnv, tmp_path: Path) -> None:
    shots = {
        "whoami": (env.url("app", "/.gateway/"), 200,
                   ["Signed in as <b>bob</b>@example.test", "<i>staff</i>", "Groups",
                    "Claims", "Session ends", "Identity provider", "Sign out",
                    "Sign in as someone else", "Acme <Access>"]),
        "denied": (env.url("admins", "/secret"), 403,
                   ["Access denied", "Signed in as <b>bob</b>@example.test",
                    "Who this route lets in", "corp.example",
                    "Ask an administrator for access to this route",
                    "Sign in as someone else", "request id"]),
        "notfound": (env.url("app", "/.gateway/nothing-here"), 404,
                     ["Not found", "There is nothing at this address.", "request id"]),
        "unavailable": (env.url("dead", "/"), 503,
                        ["Service unavailable", "Try again in a moment", "request id"]),
        "timeout": (env.url("slow", "/"), 504,
                    ["Gateway timeout", "took too long", "request id"]),
        "signout": (env.url("app", "/.gateway/signout/"), 200,
                    ["Sign out?", "<b>bob</b>@example.test", env.url("public", "/bye"),
                     "Sign out"]),
    }
    # every route host needs its own sign-in hand-off: visit each once first
    warm = [{"name": f"warm-{h}", "url": env.url(h, "/")} for h in ("admins", "dead", "slow")]
    out = run_pages(tmp_path, {
        "signin": {"url": env.url("app", "/"), "login": LOGIN},
        "shots": warm + [{"name": n, "url": u} for n, (u, _, _) in shots.items()],
    })
    seen = {(s["name"], s["width"]): s for s in out["shots"]}
    for name, (_, status, strings) in shots.items():
        for width in WIDTHS:
            shot = seen[(name, width)]
            where = f"{name} at {width}px"
            assert shot["status"] == status, where
            assert Path(shot["file"]).stat().st_size > 5000, where  # a real screenshot
            for text in strings:
                assert text in shot["text"], f"{where}: {text!r} not in {shot['text']!r}"
            assert shot["forbidden"] == 0, f"{where}: markup became elements"
            assert not shot["sideways"], f"{where} scrolls sideways"
            assert shot["headers"]["x-frame-options"] == "DENY", where
            # no URL to other origins; the page's own forms post with its true Origin
            assert shot["headers"]["referrer-policy"] == "same-origin", where
            assert shot["headers"]["content-security-policy"].startswith(
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' "), where


def test_sign_in_as_someone_else_by_clicking(env: PagesEnv, tmp_path: Path) -> None:
    out = run_pages(tmp_path, {
        "signin": {"url": env.url("admins", "/x"), "login": "bob@example.test"},
        "shots": [],
        "switch": {"url": env.url("admins", "/x"), "login": "alice@example.test",
                   "after": env.url("admins", "/.gateway/")},
    })
    switched = out["switched"]
    assert switched["status"] == 200, switched
    assert "Signed in as alice@example.test" in switched["text"]
    assert out["signed_out"]["url"] == env.url("public", "/bye"), out["signed_out"]
    # what the gateway's cross-origin check saw of a real browser's form (issue 39)
    post = out["sign_out_post"]
    assert post["url"] == env.url("admins", "/.gateway/signout/"), post
    assert post["headers"].get("sec-fetch-site") == "same-origin", post["headers"]
    assert post["headers"].get("origin") == env.url("admins", ""), post["headers"]


def test_follows_the_systems_color_scheme(env: PagesEnv, tmp_path: Path) -> None:
    out = run_pages(tmp_path, {"signin": {"url": env.url("public", "/"), "login": ""},
                               "shots": [], "schemes": {"url": env.url("app", "/.gateway/x")}})

    def brightness(css: str) -> int:
        return sum(int(v) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])

    assert brightness(out["schemes"]["light"]) > 600, out["schemes"]
    assert brightness(out["schemes"]["dark"]) < 150, out["schemes"]
