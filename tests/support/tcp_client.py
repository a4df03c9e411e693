"""``gateway tcp`` as the tests run it: the worktree's code (``python -m gateway.cli``
with the repository first on PYTHONPATH), a private token cache, and a gateway that
signs people in through node-oidc-provider.

Route hosts are names under ``.localhost``: the client, Chromium and the stdlib test
browser all reach 127.0.0.1 for them without DNS.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .daemon import REPO_ROOT, daemon_env
from .processes import ManagedProcess, wait_until

LISTENING = re.compile(r"gateway tcp: listening on (?P<host>[0-9.]+):(?P<port>\d+) ")


def signing_in_config(op: Any, port: int, policy: list[dict[str, Any]]) -> dict[str, Any]:
    """A plain-HTTP gateway (for ``gateway_daemon``) that signs in at ``op``."""
    return {
        "authenticate_service_url": f"http://authenticate.localhost:{port}",
        "idp_provider": "oidc", "idp_provider_url": op.issuer,
        "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
        "idp_scopes": ["openid", "email", "groups", "offline_access"],
        "cookie_secure": False,
        "policy": policy,
    }


def callback_uri(port: int) -> str:
    return f"http://authenticate.localhost:{port}/oauth2/callback"


def client_env(cache: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **daemon_env(), "XDG_CACHE_HOME": str(cache), **(extra or {})}


def client_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "tcp", *args]


def browser_cmd(login: str, record: Path, *, chromium: bool = False) -> str:
    """A ``--browser-cmd`` that signs in as ``login`` and appends a line to ``record``."""
    argv = [sys.executable, "-m", "tests.support.browser_cmd", "--login", login,
            "--record", str(record)]
    if chromium:
        argv.append("--chromium")
    return shlex.join(argv)


def proxy_command(gateway_url: str, browser: str, *extra: str) -> str:
    """The ``ProxyCommand`` value: ``gateway tcp --listen - ... %h:%p``."""
    return shlex.join(client_argv("--listen", "-", "--gateway-url", gateway_url,
                                  "--browser-cmd", browser, *extra)) + " %h:%p"


def run_client(args: Sequence[str], cache: Path, *, stdin: bytes = b"",
               timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    """``gateway tcp --listen - ...`` once, with ``stdin`` as the tunnel's input."""
    return subprocess.run(client_argv(*args), input=stdin, capture_output=True,
                          env=client_env(cache), cwd=REPO_ROOT, timeout=timeout, check=False)


@dataclass
class Listener:
    """A running ``gateway tcp`` with a local listener."""

    host: str
    port: int
    process: ManagedProcess

    def log(self) -> str:
        return self.process.log_text()


@contextlib.contextmanager
def listening_client(tmp_path: Path, cache: Path, *args: str, name: str = "gateway-tcp",
                     timeout: float = 20.0) -> Iterator[Listener]:
    """``gateway tcp ARGS`` (default ``--listen 127.0.0.1:0``) until the block ends;
    yields the address it printed."""
    process = ManagedProcess(client_argv(*args), log_dir=tmp_path, name=name,
                             env=client_env(cache), cwd=REPO_ROOT)
    with process:
        found: list[re.Match[str]] = []

        def bound() -> bool:
            match = LISTENING.search(process.log_text())
            if match:
                found.append(match)
            return match is not None

        process.wait_ready(bound, timeout)
        yield Listener(found[0]["host"], int(found[0]["port"]), process)


def wait_for_log(listener: Listener, text: str, count: int = 1, timeout: float = 20.0) -> None:
    wait_until(lambda: listener.log().count(text) >= count, timeout,
               what=f"{count} x {text!r} in the client's log")
