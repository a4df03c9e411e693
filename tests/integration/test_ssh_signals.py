"""Native SSH: a ``signal`` channel request (RFC 4254 6.9) reaches the server's process
through the gateway, on a pty session and without one, and the way the process ended
(exit-status, exit-signal) comes back (issue 31).

OpenSSH's ``ssh`` never sends ``signal`` by itself, so a Conch client
(``tests/support/ssh_conch_client.py``) does, with the key the first connection bound.
The installed sshd (Debian 12's OpenSSH 9.2) honours ``signal`` for the signals RFC 4254
names, signalling the session's process group, but only for a login other than root (a
root session runs in its privileged monitor, which refuses: "session signalling requires
privilege separation"). Run as root, the test logs in as the unprivileged account
``scripts/setup-dev.sh`` creates.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.daemon import REPO_ROOT, Daemon, gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import (
    CertSshd,
    GatewayKeys,
    cert_sshd,
    gateway_keys,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
UNPRIVILEGED = "gateway-ssh-test"  # (scripts/setup-dev.sh)
TRAP = "trap 'echo got-{sig}; exit 7' {sig}; echo ready; while :; do sleep 0.2; done"


@dataclass
class Env:
    keys: GatewayKeys
    sshd: CertSshd
    gateway: Daemon
    ssh_port: int

    def signal(self, command: str, signal: str, *, pty: bool) -> dict[str, Any]:
        """Run ``command`` through the gateway, send ``signal`` once it printed
        ``ready``: the client's report."""
        argv = [sys.executable, "-m", "tests.support.ssh_conch_client",
                "--port", str(self.ssh_port), "--user", f"{self.sshd.user}@db",
                "--key", str(self.keys.client_key), "--command", command,
                "--ready", "ready", "--signal", signal, "--timeout", "20",
                *(["--pty"] if pty else [])]
        done = subprocess.run(argv, capture_output=True, timeout=60, cwd=REPO_ROOT,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr.decode()
        report: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert report["authenticated"] and report["signal_sent"], report
        assert not report["timed_out"], report  # the process never saw the signal
        return report


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    login = getpass.getuser()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(UNPRIVILEGED)
        except KeyError:
            pytest.fail(f"no account {UNPRIVILEGED} to log in as (sshd refuses signals to "
                        "root sessions): run scripts/setup-dev.sh as root")
        login = UNPRIVILEGED
    tmp_path = tmp_path_factory.mktemp("ssh-signals")
    os.chmod(tmp_path, 0o755)  # (the login reads nothing there; its sshd child may look)
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with cert_sshd(tmp_path, keys.ca_public, login=login) as sshd, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        route = sshd.route(allow_any_authenticated_user=True)
        config = {**signing_in_config(op, port, [route]),
                  **keys.settings(ssh_port)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            proc, seen, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                 f"{sshd.user}@db", "echo bound"),
                                        "alice@example.test")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and out == b"bound\n", (seen + err).decode()
            yield Env(keys, sshd, gateway, ssh_port)


@pytest.mark.parametrize("pty", [True, False], ids=["pty", "no-pty"])
def test_int_reaches_a_trap(env: Env, pty: bool) -> None:
    report = env.signal(TRAP.format(sig="INT"), "INT", pty=pty)
    assert "got-INT" in report["output"], report
    assert report["exit_status"] == 7 and report["exit_signal"] is None, report


@pytest.mark.parametrize("pty", [True, False], ids=["pty", "no-pty"])
def test_term_ends_the_process_and_its_exit_signal_comes_back(env: Env, pty: bool) -> None:
    report = env.signal("echo ready; exec sleep 30", "TERM", pty=pty)
    assert report["exit_signal"] == "TERM" and report["exit_status"] is None, report


def test_usr1_reaches_the_process(env: Env) -> None:
    report = env.signal(TRAP.format(sig="USR1"), "USR1", pty=True)
    assert "got-USR1" in report["output"] and report["exit_status"] == 7, report
