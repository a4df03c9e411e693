"""Native SSH: a session that expires ends the open connections it let in (issue 31)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import cert_sshd, gateway_keys, read_until, sign_in_ssh, ssh_argv
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
LIFETIME = 12


def test_expiry_closes_the_connection_with_a_message(tmp_path: Path) -> None:
    """cookie_expire is the session's lifetime: a shell opened with it is closed within
    a couple of seconds of its end, with the reason on the terminal; the key's binding
    ends with it (the next BatchMode connection is refused)."""
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        route = sshd.route(allow_any_authenticated_user=True)
        config = {**signing_in_config(op, port, [route]), "cookie_expire": f"{LIFETIME}s",
                  **keys.settings(ssh_port)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            signed_in = time.monotonic()
            proc, _, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                 f"{sshd.user}@db",
                                                 "echo started; sleep 120"),
                                        "alice@example.test")
            try:
                read_until(proc.stdout, b"started", 30)
                _, err = proc.communicate(timeout=LIFETIME + 15)
                ended = time.monotonic()
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert b"your session has expired; connect again to sign in" in err, err
            assert ended - signed_in <= LIFETIME + 3
            again = subprocess.run(ssh_argv(keys.client_key, ssh_port, f"{sshd.user}@db",
                                            "true", options=("BatchMode=yes",)),
                                   capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
            assert again.returncode == 255
            assert b"This key is not signed in yet" in again.stderr, again.stderr
