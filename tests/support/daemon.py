"""The gateway daemon itself as a test peer: ``twistd -n gateway --config FILE``.

The daemon runs from the repository root, so twistd finds ``twisted/plugins`` there
even when the package is installed in editable mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .processes import ManagedProcess, free_port, loopback_opener, port_open, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
TWISTD = str(Path(sys.executable).with_name("twistd"))


@dataclass
class Daemon:
    """A running gateway: its listener URL, config path and process."""

    url: str
    port: int
    config_path: Path
    process: ManagedProcess

    def write_config(self, config: Mapping[str, Any]) -> None:
        """Replace the config file atomically (as editors and config managers do)."""
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(dict(config)))
        os.replace(tmp, self.config_path)

    def logged(self, text: str) -> bool:
        """Whether ``text`` is anywhere in the daemon's log so far."""
        return text in self.process.log_text()

    def log_events(self) -> list[dict[str, Any]]:
        """Every log line parsed as JSON (fails on a line that is not JSON).

        The text is the log's tail (``log_text``): past 256 KiB its first line starts
        mid-line, and its last may be half written; those two are left out when they
        are not JSON. (A test logging more than that read the cut first line as a
        broken log line.)"""
        lines = self.process.log_text().split("\n")
        events: list[dict[str, Any]] = []
        for index, line in enumerate(lines):
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                if 0 < index < len(lines) - 1:
                    raise
        return events

    def wait_for_event(self, predicate: Any, timeout: float = 10.0, what: str = "event"
                       ) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def check() -> bool:
            found[:] = [e for e in self.log_events() if predicate(e)]
            return bool(found)

        wait_until(check, timeout, what=what)
        return found[0]

    def get(self, path: str, host: str | None = None, headers: Mapping[str, str] | None = None
            ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, headers=dict(headers or {}))
        if host:
            request.add_header("Host", host)
        try:
            with loopback_opener().open(request, timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()


def daemon_env() -> dict[str, str]:
    """Run the code under test: the repository first on the path, plugin included."""
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(paths)}


def twistd_argv(config_path: Path, *extra: str) -> list[str]:
    return [TWISTD, "-n", "--pidfile=", "gateway", "--config", str(config_path), *extra]


@contextlib.contextmanager
def gateway_daemon(tmpdir: Path, config: Mapping[str, Any], *, env: Mapping[str, str] | None
                   = None, extra_args: tuple[str, ...] = ("--poll-interval", "0.2"),
                   timeout: float = 20.0, port: int | None = None,
                   ready_port: int | None = None) -> Iterator[Daemon]:
    """Start the daemon on a free loopback port (``address`` is filled in) and stop it.
    ``ready_port``: the port that says it is up, when not ``address``'s (a databroker
    process serves only gRPC)."""
    port = port or free_port()
    # A test's stop waits for what it left open (a tunnel, an SSH session) at most 1 s,
    # not the 8 s default drain; tests of the drain set their own.
    merged = {"insecure_server": True, "shutdown_drain_timeout": "1s", **config,
              "address": f"127.0.0.1:{port}"}
    path = tmpdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(merged))
    notify = ReadyWatch()
    process = ManagedProcess(twistd_argv(path, *extra_args), log_dir=tmpdir, name="gateway",
                             cwd=REPO_ROOT, env={**daemon_env(), **(env or {}),
                                                 "NOTIFY_SOCKET": notify.address})
    process.start()
    try:
        # Ready means running with signal handlers, not only bound (see
        # gateway/services/ready.py): a SIGTERM before that would skip the orderly stop.
        listens = ready_port or port
        process.wait_ready(lambda: notify.ready() and port_open("127.0.0.1", listens), timeout)
        yield Daemon(f"http://127.0.0.1:{port}", port, path, process)
    finally:
        process.stop()
        notify.close()


class ReadyWatch:
    """A systemd-style notification socket (abstract namespace) for one daemon."""

    def __init__(self) -> None:
        self.address = f"@gateway-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.address[1:])
        self.sock.setblocking(False)
        self.messages: list[bytes] = []

    def ready(self) -> bool:
        with contextlib.suppress(BlockingIOError):
            while True:
                self.messages.append(self.sock.recv(4096))
        return any(b"READY=1" in m.split(b"\n") for m in self.messages)

    def close(self) -> None:
        self.sock.close()
