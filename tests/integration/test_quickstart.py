"""The quick start (docs/tutorials/quickstart.md) as a newcomer follows it: its
configuration and commands are taken from the page (the blocks after ``% test:``
comments), run with only their ports moved, and answer as the page says."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.pages import marked_blocks
from tests.support.browser import Browser
from tests.support.daemon import REPO_ROOT, TWISTD, gateway_daemon, twistd_argv
from tests.support.peers import oidc_provider
from tests.support.processes import ManagedProcess, free_port, http_ok

pytestmark = pytest.mark.integration
PAGE = "tutorials/quickstart.md"
VENV_BIN = Path(sys.executable).parent


def blocks() -> dict[str, str]:
    return marked_blocks(PAGE)


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in {PAGE}"
        text = text.replace(old, new)
    return text


def test_page_has_every_tested_block() -> None:
    assert set(blocks()) == {"peers", "config", "check", "check-output", "run", "curl-app",
                             "curl-public"}


def test_check_command_prints_what_the_page_shows(tmp_path: Path) -> None:
    """The page's `gateway check` line, run in a directory holding the page's file,
    prints the page's output line and exits 0."""
    page = blocks()
    (tmp_path / "quickstart.yaml").write_text(page["config"])
    argv = shlex.split(page["check"])
    assert argv[0] == ".venv/bin/gateway"
    result = subprocess.run([str(VENV_BIN / "gateway"), *argv[1:]], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (0, page["check-output"]), result.stderr


def test_run_command_is_the_daemon_the_tests_start() -> None:
    """The page's twistd line is the command gateway_daemon runs (with the repository on
    PYTHONPATH, as daemon_env gives it)."""
    argv = shlex.split(blocks()["run"])
    assert argv[0] == "PYTHONPATH=$PWD"
    assert argv[1] == ".venv/bin/twistd"
    expected = twistd_argv(Path("quickstart.yaml"))
    assert Path(TWISTD).name == "twistd"
    assert [a.replace("--nodaemon", "-n") for a in argv[2:]] == expected[1:]


def test_quickstart_signs_in_and_refuses(tmp_path: Path, require_binary: Any) -> None:
    """The page's peers, configuration and curl lines on free ports: the app needs a
    sign-in, the public route does not, alice@example.test gets in, bob@other.test gets
    403."""
    require_binary("node", "apt-get install -y nodejs npm")
    require_binary("curl", "apt-get install -y curl")
    page = blocks()
    port, app_port = free_port(), free_port()
    peers = page["peers"]
    assert "REDIRECT_URIS=http://authenticate.localhost:8080/oauth2/callback" in peers
    assert ".venv/bin/python demo/app.py --port 8081 &" in peers
    callback = f"http://authenticate.localhost:{port}/oauth2/callback"
    with oidc_provider(tmp_path, [callback]) as op:
        config = yaml.safe_load(moved(page["config"], {
            ":8080": f":{port}", "http://127.0.0.1:9000": op.issuer,
            "http://127.0.0.1:8081": f"http://127.0.0.1:{app_port}"}))
        app = ManagedProcess([sys.executable, str(REPO_ROOT / "demo" / "app.py"), "--port",
                              str(app_port)], log_dir=tmp_path, name="demo-app")
        with app, gateway_daemon(tmp_path, config, port=port):
            app.wait_ready(lambda: http_ok(f"http://127.0.0.1:{app_port}/"), 10)

            def sh(name: str) -> str:
                command = moved(page[name], {":8080": f":{port}"})
                result = subprocess.run(["bash", "-c", command], capture_output=True,
                                        text=True, timeout=30, check=False)
                assert result.returncode == 0, (name, result.stderr)
                return result.stdout

            status, location = sh("curl-app").split()
            assert status == "302"
            assert location.startswith(f"http://authenticate.localhost:{port}/"), location
            assert sh("curl-public") == "No signed-in user\n"

            alice = Browser().sign_in(f"http://app.localhost:{port}/", "alice@example.test")
            assert alice.status == 200
            assert b"Signed in as <b>alice@example.test</b>" in alice.body
            assert b"<th>x-gateway-jwt-assertion</th>" in alice.body
            bob = Browser().sign_in(f"http://app.localhost:{port}/", "bob@other.test")
            assert bob.status == 403
            text = " ".join(re.sub(r"<style>.*?</style>|<[^>]+>", " ", bob.body.decode(),
                                   flags=re.S).split())
            for shown in ("Access denied", "Signed in as bob@other.test",
                          "People whose e-mail address is in: example.test"):
                assert shown in text, text
