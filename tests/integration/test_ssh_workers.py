"""Native SSH with ``workers: 2`` (issue 31): every worker serves ``ssh_address`` on its
own socket of the supervisor's, like the HTTP listener. A key signed in through one
worker logs in through the other without a browser, and the server's host key pinned on
first use by one is the one both check; a sign-out, or a reload whose
policy now denies, closes the open connections of both workers within 5 s; a killed
worker is restarted and serves SSH again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_workers import signing_key, worker_pids
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.kvstore import kv_gateway_config
from tests.support.peers import oidc_provider, redis_server
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import (
    CertSshd,
    GatewayKeys,
    cert_sshd,
    gateway_keys,
    read_until,
    sign_in_ssh,
    ssh_argv,
)

pytestmark = pytest.mark.integration
ALICE = "alice@example.test"
TRIES = 32  # connections to land one on each worker (odds of failing: 2**-31)


@dataclass
class Env:
    keys: GatewayKeys
    sshd: CertSshd
    gateway: Daemon
    ssh_port: int
    config: dict[str, Any]
    browser: Any = None

    def argv(self, command: str, batch: bool = True) -> list[str]:
        return ssh_argv(self.keys.client_key, self.ssh_port, f"{self.sshd.user}@db", command,
                        options=("BatchMode=yes",) if batch else ())

    def logins(self) -> list[dict[str, Any]]:
        """The log lines of admitted SSH connections, in order, each with its worker."""
        return [e for e in self.gateway.log_events()
                if e.get("namespace") == "gateway.ssh" and e.get("decision") == "allowed"
                and " logged in as " in str(e.get("message", ""))]


@pytest.fixture
def env(tmp_path: Path, require_binary: Any) -> Iterator[Env]:
    require_binary("redis-server", "apt-get install -y redis-server")
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with redis_server(tmp_path / "redis") as redis, \
            cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op:
        base = kv_gateway_config(op, f"kvstore://127.0.0.1:{redis.port}/0", port,
                                 "http://127.0.0.1:1")
        # trust on first use: the pin one worker makes is the one every worker checks
        route = {"from": "ssh://db", "to": f"ssh://127.0.0.1:{sshd.port}",
                 "ssh_upstream_host_key_tofu": True, "allowed_users": [ALICE]}
        config = {**base, "policy": [*base["policy"], route], "workers": 2,
                  "signing_key": signing_key(), "insecure_server": True,
                  "address": f"127.0.0.1:{port}", **keys.settings(ssh_port)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: {e.get("worker") for e in gateway.log_events()
                                if str(e.get("message", "")).startswith("ssh: listening")}
                       == {0, 1}, 20, what="both workers listening for SSH")
            yield Env(keys, sshd, gateway, ssh_port, config)


def sign_in(env: Env) -> None:
    proc, seen, env.browser = sign_in_ssh(env.argv("echo first", batch=False), ALICE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == b"first\n", (seen + err).decode()


def on_both_workers(env: Env) -> set[int]:
    """BatchMode connections (no browser) until each worker has admitted one."""
    served: set[int] = set()
    for _ in range(TRIES):
        before = len(env.logins())
        done = subprocess.run(env.argv("echo again"), capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0 and done.stdout == b"again\n", done.stderr
        wait_until(lambda before=before: len(env.logins()) > before, 5, what="login line")
        served.add(int(env.logins()[-1]["worker"]))
        if served == {0, 1}:
            return served
    raise AssertionError(f"{TRIES} SSH connections, all to worker {served}")


def held_on_both_workers(env: Env) -> dict[int, subprocess.Popen[bytes]]:
    """One open connection (a command that sleeps) on each worker; extras are closed."""
    held: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for _ in range(TRIES):
            before = len(env.logins())
            proc = subprocess.Popen(env.argv("echo held; sleep 60"), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            read_until(proc.stdout, b"held", 30)
            wait_until(lambda before=before: len(env.logins()) > before, 5, what="login")
            worker = int(env.logins()[-1]["worker"])
            if worker in held:
                proc.kill()
                proc.wait(10)
                continue
            held[worker] = proc
            if len(held) == 2:
                return held
    except BaseException:
        for proc in held.values():
            proc.kill()
            proc.wait(10)
        raise
    raise AssertionError(f"{TRIES} SSH connections, all to worker {set(held)}")


def all_closed_within(held: dict[int, subprocess.Popen[bytes]], seconds: float,
                      started: float) -> dict[int, bytes]:
    errors: dict[int, bytes] = {}
    try:
        for worker, proc in held.items():
            _, err = proc.communicate(timeout=20)
            assert time.monotonic() - started < seconds, (worker, err)
            errors[worker] = err
    finally:
        for proc in held.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return errors


def test_sign_in_once_then_both_workers_and_sign_out_closes_both(env: Env) -> None:
    sign_in(env)
    assert on_both_workers(env) == {0, 1}
    pinned = [e for e in env.gateway.log_events()
              if "pinned the server's host key" in str(e.get("message", ""))]
    assert len(pinned) == 1, pinned
    held = held_on_both_workers(env)
    env.browser.sign_out(f"http://auth.test:{env.gateway.port}")
    errors = all_closed_within(held, 5, time.monotonic())
    for worker, err in errors.items():
        assert b"your session has ended" in err, (worker, err)


def test_killed_worker_serves_ssh_again_and_a_reload_reaches_both(env: Env) -> None:
    sign_in(env)
    pids = worker_pids(env.gateway)
    os.kill(pids[0], signal.SIGKILL)
    wait_until(lambda: worker_pids(env.gateway).get(0) not in (None, pids[0]), 10,
               what="worker 0 restarted")
    # connections that reach its socket meanwhile wait for it in the kernel's queue
    assert on_both_workers(env) == {0, 1}
    held = held_on_both_workers(env)
    env.gateway.write_config({**env.config, "policy": [
        {**route, "allowed_users": ["bob@example.test"]} if route["from"] == "ssh://db"
        else route for route in env.config["policy"]]})
    errors = all_closed_within(held, 5, time.monotonic())
    for worker, err in errors.items():
        assert f"signed in as {ALICE}; route db: your account is not allowed on this " \
               "route".encode() in err, (worker, err)
