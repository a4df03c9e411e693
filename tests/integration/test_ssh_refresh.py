"""Native SSH: the tokens of a session behind an open connection are refreshed as they
near expiry; a refresh the identity provider refuses ends the session and closes the
connection, with the reason on the person's terminal (issue 31).

The provider's access tokens live 70 s, so a refresh is due 10 s after sign-in
(``REFRESH_GRACE``: 60 s before expiry). The provider refusing is the real thing: it is
restarted on its port with an empty grant store, so the refresh token it issued is
unknown to it (``invalid_grant``), as after a revocation at the provider."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import OIDCProvider, oidc_provider
from tests.support.processes import ManagedProcess, free_port, http_ok, wait_until
from tests.support.ssh_native import (
    CertSshd,
    GatewayKeys,
    cert_sshd,
    gateway_keys,
    read_until,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
ACCESS_TOKEN_TTL = 70
DUE = ACCESS_TOKEN_TTL - 60  # seconds after sign-in: sign_in.REFRESH_GRACE before expiry
CLOSE_WITHIN = 5.0


@dataclass
class Env:
    tmp_path: Path
    keys: GatewayKeys
    sshd: CertSshd
    op: OIDCProvider
    gateway: Daemon
    ssh_port: int

    def argv(self, command: str, batch: bool = False) -> list[str]:
        return ssh_argv(self.keys.client_key, self.ssh_port, f"{self.sshd.user}@db", command,
                        options=("BatchMode=yes",) if batch else ())

    def held(self) -> tuple[subprocess.Popen[bytes], float, float]:
        """A signed-in connection running a long command: the ssh process, and the
        times just before the sign-in began and once it was confirmed (the provider
        issued the tokens in between)."""
        before = time.monotonic()
        proc, _, _ = sign_in_ssh(self.argv("echo started; sleep 120"), "alice@example.test")
        after = time.monotonic()
        read_until(proc.stdout, b"started", 30)
        return proc, before, after


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [callback_uri(port)],
                          access_token_ttl=ACCESS_TOKEN_TTL) as op:
        route = sshd.route(allow_any_authenticated_user=True)
        config = {**signing_in_config(op, port, [route]),
                  **keys.settings(ssh_port)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            yield Env(tmp_path, keys, sshd, op, gateway, ssh_port)


def restart_forgetting_grants(op: OIDCProvider, directory: Path) -> ManagedProcess:
    """The provider again on its port, with nothing of what it issued (in-memory)."""
    old = op.process
    old.stop()
    fresh = ManagedProcess(old.argv, log_dir=directory, name="oidc-again", env=old.env,
                           cwd=old.cwd)
    fresh.start()
    try:
        fresh.wait_ready(lambda: http_ok(f"{op.issuer}/.well-known/openid-configuration"), 30)
    except BaseException:
        fresh.stop()
        raise
    return fresh


def test_refused_refresh_closes_the_connection_with_a_message(env: Env) -> None:
    proc, before, after = env.held()
    fresh = restart_forgetting_grants(env.op, env.tmp_path / "oidc-again")
    try:
        _, err = proc.communicate(timeout=DUE + CLOSE_WITHIN + 30)
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        fresh.stop()
    assert b"your session could not be renewed; connect again to sign in" in err, err
    # not before the refresh was due, and within 5 s of it
    assert ended - before >= DUE - 1 and ended - after <= DUE + CLOSE_WITHIN, \
        (ended - before, ended - after)
    messages = [str(e.get("message", "")) for e in env.gateway.log_events()]
    assert any("token refresh for alice@example.test failed" in m for m in messages), \
        messages
    # the session is gone: the key's binding with it
    again = subprocess.run(env.argv("true", batch=True), capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 255
    assert b"This key is not signed in yet" in again.stderr, again.stderr


def test_refreshed_session_keeps_the_connection(env: Env) -> None:
    """The control: the provider answers, the tokens are renewed and the connection
    goes on past the refresh."""
    proc, _, after = env.held()
    try:
        wait_until(lambda: env.gateway.logged("refreshed the tokens of alice@example.test"),
                   DUE + CLOSE_WITHIN + 5, what="the refresh")
        time.sleep(max(0.0, after + DUE + CLOSE_WITHIN - time.monotonic()))
        assert proc.poll() is None, proc.communicate(timeout=5)
    finally:
        proc.kill()
        proc.wait(10)
