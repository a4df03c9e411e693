"""Sessions through Redis Sentinel: the gateway asks the sentinel for the master."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvstore import kv_gateway_config, sentinel
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration


def test_sessions_via_sentinel(tmp_path: Path, require_binary: Any) -> None:
    """kvstore+sentinel://: a sign-in's session lands in the master the sentinel names."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with redis_server(tmp_path) as master, \
            sentinel(tmp_path, master.port) as sentinel_port, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore+sentinel://127.0.0.1:{sentinel_port}/mymaster/0"
        config = kv_gateway_config(op, url, port, up.url, allow_any_authenticated_user=True)
        with gateway_daemon(tmp_path, config, port=port):
            browser = Browser()
            assert browser.sign_in(f"http://app.test:{port}/",
                                   "alice@example.test").status == 200

            def stored() -> bool:
                with master.client() as raw:
                    return bool(raw.command("HLEN", "{gateway}:records:session") == 1)

            wait_until(stored, 10, what="session written to the sentinel's master")


def test_failover_during_traffic(tmp_path: Path, require_binary: Any) -> None:
    """The master dies under steady requests: while Sentinel promotes the replica,
    requests get 200 or a prompt 503 (never a sign-in redirect or a hang); afterwards the
    gateway follows the new master by itself, sessions written before the failover are
    still there, and new sign-ins land on the new master."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with redis_server(tmp_path / "m") as master, \
            redis_server(tmp_path / "r") as replica:
        with replica.client() as raw:
            raw.command("REPLICAOF", "127.0.0.1", str(master.port))
        timings = ("sentinel down-after-milliseconds mymaster 1000\n"
                   "sentinel failover-timeout mymaster 3000\n")
        with sentinel(tmp_path, master.port, timings) as sentinel_port, \
                oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
                echo_upstream(tmp_path) as up:

            def replicated() -> bool:
                with replica.client() as raw:
                    return b"master_link_status:up" in bytes(raw.command("INFO", "replication"))

            wait_until(replicated, 15, what="replica in sync")
            url = f"kvstore+sentinel://127.0.0.1:{sentinel_port}/mymaster/0"
            config = kv_gateway_config(op, url, port, up.url, allow_any_authenticated_user=True)
            with gateway_daemon(tmp_path, config, port=port):
                alice = Browser()
                assert alice.sign_in(f"http://app.test:{port}/", "alice@example.test"
                                     ).status == 200

                def on_replica(count: int) -> bool:
                    with replica.client() as raw:
                        return bool(raw.command("HLEN", "{gateway}:records:session") == count)

                wait_until(lambda: on_replica(1), 10, what="session replicated")
                master.process.stop()
                statuses: list[int] = []

                def promoted() -> bool:
                    with replica.client() as raw:
                        return b"role:master" in bytes(raw.command("INFO", "replication"))

                def request() -> None:
                    started = time.monotonic()
                    statuses.append(alice.request("GET", f"http://app.test:{port}/").status)
                    assert time.monotonic() - started < 5, "a request hung during failover"
                    time.sleep(0.2)

                deadline = time.monotonic() + 40
                while not promoted():  # traffic through the failover, bounded in time
                    assert time.monotonic() < deadline, "sentinel did not promote the replica"
                    request()
                during = len(statuses)
                settle = time.monotonic() + 8  # past the 2 s re-read and a reconnect
                while time.monotonic() < settle:
                    request()
                assert set(statuses) <= {200, 503}, statuses
                assert statuses[-10:] == [200] * 10, f"no recovery: {statuses[during:]}"
                bob = Browser()
                assert bob.sign_in(f"http://app.test:{port}/", "bob@example.test"
                                   ).status == 200
                wait_until(lambda: on_replica(2), 10, what="new session on the new master")
