"""OpenSSH through the gateway: a real ``sshd`` behind a ``tcp+https`` route, reached with
``ssh -o ProxyCommand='gateway tcp --listen - %h:%p'``; the first run signs in through
headless Chromium, the next one uses the cached token."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import free_port
from tests.support.sshd import INSTALL_HINT, sshd
from tests.support.tcp_client import (
    browser_cmd,
    callback_uri,
    client_env,
    proxy_command,
    signing_in_config,
)

pytestmark = pytest.mark.integration
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"


def test_ssh_proxy_command_signs_in_with_chromium(tmp_path: Path, require_binary: Any
                                                  ) -> None:
    """ssh runs a command through the tunnel. The first run meets 401, the client opens
    the sign-in page in Chromium (login and consent at the provider) and the very same
    ssh connection then works; the token lands in the cache (0600 in a 0700
    directory) and a second ssh needs no browser at all."""
    require_binary("sshd", INSTALL_HINT)
    require_binary("ssh", INSTALL_HINT)
    require_binary("chromium", "apt-get install -y chromium")
    require_binary("node", "apt-get install -y nodejs npm")
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/peers/browser` first")
    port = free_port()
    cache = tmp_path / "cache"
    record = tmp_path / "browser.jsonl"
    with sshd(tmp_path) as server, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op, \
            gateway_daemon(tmp_path, signing_in_config(op, port, [{
                "from": "tcp+https://ssh.localhost:22",
                "to": f"tcp://127.0.0.1:{server.port}",
                "allowed_users": ["alice@example.test"]}]), port=port):
        gateway_url = f"http://ssh.localhost:{port}"
        chromium = browser_cmd("alice@example.test", record, chromium=True)
        first = subprocess.run(
            server.ssh_argv("ssh.localhost", "echo tunnelled; echo $((6 * 7))", port=22,
                            options=[f"ProxyCommand={proxy_command(gateway_url, chromium)}"]),
            capture_output=True, env=client_env(cache), cwd=REPO_ROOT, timeout=150)
        stderr = first.stderr.decode()
        assert first.returncode == 0, stderr
        assert first.stdout.decode().split() == ["tunnelled", "42"]
        assert "sign-in required for ssh.localhost:22" in stderr
        assert "http://authenticate.localhost:" in stderr  # the URL, for headless boxes
        opened = [json.loads(line) for line in record.read_text().splitlines()]
        assert len(opened) == 1
        assert opened[0]["url"].startswith("http://127.0.0.1:")
        assert "Signed in" in opened[0]["text"]

        tokens = list((cache / "gateway").glob("tcp-*.token"))
        assert len(tokens) == 1
        assert stat.S_IMODE(os.stat(cache / "gateway").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(tokens[0]).st_mode) == 0o600

        second = subprocess.run(
            server.ssh_argv("ssh.localhost", "echo again", port=22,
                            options=[f"ProxyCommand={proxy_command(gateway_url, 'false')}"]),
            capture_output=True, env=client_env(cache), cwd=REPO_ROOT, timeout=60)
        assert second.returncode == 0, second.stderr.decode()
        assert second.stdout == b"again\n"
        assert b"sign-in" not in second.stderr
    print(f"\nfirst ssh: stdout={first.stdout!r}\nstderr:\n{stderr}"
          f"\nsecond ssh: stdout={second.stdout!r} stderr={second.stderr!r}")
