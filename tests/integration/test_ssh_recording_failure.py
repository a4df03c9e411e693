"""Native SSH recordings that cannot be written (issue 31): by default the session goes on
unrecorded and the failure is logged with its reason; on a route with
``ssh_recording_required: true`` the session does not start (the request that would
start it is refused, the connection closed with the reason on the terminal), and a
route that requires recordings where none are made refuses the login.

The directory is made unusable for root too: ``ssh_recording_dir`` under a regular file
(ENOTDIR), set by a reload after the same routes recorded into a good directory."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import cert_sshd, gateway_keys, sign_in_ssh, ssh_argv
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration


def test_recording_failures_best_effort_and_required(tmp_path: Path) -> None:
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    good = tmp_path / "recordings"
    (tmp_path / "blocker").write_text("a file, not a directory\n")
    bad = tmp_path / "blocker" / "recordings"
    with cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        def route(name: str, **extra: Any) -> dict[str, Any]:
            return sshd.route(name, allow_any_authenticated_user=True, **extra)
        routes = [route("db"), route("strict", ssh_recording_required=True),
                  route("unrecorded", ssh_recording_required=True, ssh_recording=False)]
        config = {**signing_in_config(op, port, routes),
                  **keys.settings(ssh_port),
                  "ssh_recording_dir": str(good)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")

            def ssh(route: str, *command: str, tty: bool = False
                    ) -> subprocess.CompletedProcess[bytes]:
                argv = ssh_argv(keys.client_key, ssh_port, f"{sshd.user}@{route}",
                                *command, options=("BatchMode=yes",))
                if tty:
                    argv.insert(1, "-tt")
                return subprocess.run(argv, capture_output=True, timeout=30,
                                      stdin=subprocess.DEVNULL)

            proc, seen, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                 f"{sshd.user}@db", "echo bound"),
                                        "alice@example.test")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and out == b"bound\n", (seen + err).decode()

            # a good directory: the strict route records and runs, with a pty and without
            done = ssh("strict", "echo strict-pty", tty=True)
            assert done.returncode == 0 and b"strict-pty" in done.stdout, done.stderr
            done = ssh("strict", "echo strict-exec")
            assert done.returncode == 0 and done.stdout == b"strict-exec\n", done.stderr
            wait_until(lambda: len(list(good.rglob("*.cast"))) == 1
                       and len(list(good.rglob("*.exec.json"))) == 2, 10,
                       what="the strict route's recordings")

            # a route that requires recordings where none are made: refused at login
            done = ssh("unrecorded", "true")
            assert done.returncode == 255
            assert b"route unrecorded requires a recording and the gateway records none" \
                in done.stderr, done.stderr

            # the directory becomes unusable (a reload)
            gateway.write_config({**config, "insecure_server": True,
                                  "address": f"127.0.0.1:{port}",
                                  "ssh_recording_dir": str(bad)})
            wait_until(lambda: gateway.logged("configuration reloaded"), 10, what="reload")

            # best effort: the session goes on, unrecorded, and the log says why
            done = ssh("db", "echo still-served", tty=True)
            assert done.returncode == 0 and b"still-served" in done.stdout, done.stderr
            wait_until(lambda: failures(gateway, "the session goes on unrecorded"), 10,
                       what="the failure's log line")
            line = failures(gateway, "the session goes on unrecorded")[0]
            assert "Not a directory" in line["reason"] and str(bad) in line["reason"], line

            # required: the session never starts, and the terminal says why
            for tty in (True, False):
                started = time.monotonic()
                done = ssh("strict", "echo must-not-run", tty=tty)
                assert done.returncode == 255, done
                assert b"must-not-run" not in done.stdout, done.stdout
                assert b"route strict requires a recording of the session and it cannot " \
                       b"be written; closing" in done.stderr, done.stderr
                assert time.monotonic() - started < 10
            closing = failures(gateway, "closing the connection (ssh_recording_required)")
            assert len(closing) == 2, closing
            ends = [e for e in gateway.log_events()
                    if e.get("route") == "strict" and e.get("recording_errors")]
            assert len(ends) == 2, ends


def failures(gateway: Any, consequence: str) -> list[dict[str, Any]]:
    return [e for e in gateway.log_events()
            if e.get("namespace") == "gateway.ssh" and e.get("consequence") == consequence
            and "failed" in str(e.get("message", ""))]
