"""Native SSH with sessions in a real redis-server, shared by two gateway processes: a
key bound through one process's SSH server logs in through the other's, and a sign-out
through the first ends the second's open connection (issue 31)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.kvstore import kv_gateway_config
from tests.support.peers import oidc_provider, redis_server
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import cert_sshd, gateway_keys, read_until, sign_in_ssh, ssh_argv

pytestmark = pytest.mark.integration


def test_bindings_and_sign_out_shared_through_redis(tmp_path: Path) -> None:
    keys = gateway_keys(tmp_path)
    pa, pb, sa, sb = (free_port() for _ in range(4))
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    with redis_server(tmp_path / "redis") as redis, cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [f"http://auth.test:{pa}/oauth2/callback"]) as op:
        route = sshd.route(allowed_users=["alice@example.test"])

        def config(port: int, ssh_port: int) -> dict[str, object]:
            base = kv_gateway_config(op, f"kvstore://127.0.0.1:{redis.port}/0", pa,
                                     "http://127.0.0.1:1")
            return {**base, "policy": [*base["policy"], route],  # type: ignore[list-item]
                    **keys.settings(ssh_port)}

        with gateway_daemon(a_dir, config(pa, sa), port=pa) as a, \
                gateway_daemon(b_dir, config(pb, sb), port=pb) as b:
            for daemon in (a, b):
                wait_until(lambda d=daemon: d.logged("ssh: listening"), 10, what="ssh")
            proc, seen, browser = sign_in_ssh(
                ssh_argv(keys.client_key, sa, f"{sshd.user}@db", "echo via-a"),
                "alice@example.test")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and out == b"via-a\n", (seen + err).decode()
            # the binding is in Redis: process B's SSH server knows the key
            held = subprocess.Popen(
                ssh_argv(keys.client_key, sb, f"{sshd.user}@db", "echo via-b; sleep 60",
                         options=("BatchMode=yes",)),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                read_until(held.stdout, b"via-b", 30)
                browser.sign_out(f"http://auth.test:{pa}")
                started = time.monotonic()
                _, err = held.communicate(timeout=20)
                assert time.monotonic() - started < 5
            finally:
                if held.poll() is None:
                    held.kill()
            assert b"your session has ended" in err, err
