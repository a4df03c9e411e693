"""Sessions through Redis Sentinel: the gateway asks the sentinel for the master."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.peers import echo_upstream, find_binary, oidc_provider, redis_server
from tests.support.processes import ManagedProcess, free_port, port_open, wait_until

pytestmark = pytest.mark.integration


def test_sessions_via_sentinel(tmp_path: Path, require_binary: Any) -> None:
    """kvstore+sentinel://: a sign-in's session lands in the master the sentinel names."""
    server = require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port, sentinel_port = free_port(), free_port()
    with redis_server(tmp_path) as master:
        conf = tmp_path / "sentinel.conf"
        conf.write_text(f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n"
                        "sentinel down-after-milliseconds mymaster 5000\n")
        sentinel = ManagedProcess([find_binary("redis-server") or server, str(conf),
                                   "--sentinel"], log_dir=tmp_path, name="sentinel")
        with sentinel, oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]
                                     ) as op, echo_upstream(tmp_path) as up:
            sentinel.wait_ready(lambda: port_open("127.0.0.1", sentinel_port), 10)
            config = {
                "authenticate_service_url": f"http://auth.test:{port}",
                "idp_provider": "oidc", "idp_provider_url": op.issuer,
                "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
                "idp_scopes": ["openid", "email", "groups", "offline_access"],
                "cookie_secure": False,
                "shared_secret": base64.b64encode(b"s" * 32).decode(),
                "cookie_secret": base64.b64encode(b"c" * 32).decode(),
                "databroker_storage_type": "kvstore",
                "databroker_storage_connection_string":
                    f"kvstore+sentinel://127.0.0.1:{sentinel_port}/mymaster/0",
                "policy": [{"from": f"http://app.test:{port}", "to": up.url,
                            "allow_any_authenticated_user": True}],
            }
            with gateway_daemon(tmp_path, config, port=port):
                browser = Browser()
                assert browser.sign_in(f"http://app.test:{port}/",
                                       "alice@example.test").status == 200

                def stored() -> bool:
                    with master.client() as raw:
                        return bool(raw.command("HLEN", "gateway:session") == 1)

                wait_until(stored, 10, what="session written to the sentinel's master")


def test_failover_during_traffic(tmp_path: Path, require_binary: Any) -> None:
    """The master dies under steady requests: while Sentinel promotes the replica,
    requests get 200 or a prompt 503 (never a sign-in redirect or a hang); afterwards the
    gateway follows the new master by itself, sessions written before the failover are
    still there, and new sign-ins land on the new master."""
    server = require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port, sentinel_port = free_port(), free_port()
    with redis_server(tmp_path / "m") as master, \
            redis_server(tmp_path / "r") as replica:
        with replica.client() as raw:
            raw.command("REPLICAOF", "127.0.0.1", str(master.port))
        conf = tmp_path / "sentinel.conf"
        conf.write_text(f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n"
                        "sentinel down-after-milliseconds mymaster 1000\n"
                        "sentinel failover-timeout mymaster 3000\n")
        sentinel = ManagedProcess([find_binary("redis-server") or server, str(conf),
                                   "--sentinel"], log_dir=tmp_path, name="sentinel")
        with sentinel, oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]
                                     ) as op, echo_upstream(tmp_path) as up:
            sentinel.wait_ready(lambda: port_open("127.0.0.1", sentinel_port), 10)

            def replicated() -> bool:
                with replica.client() as raw:
                    return b"master_link_status:up" in bytes(raw.command("INFO", "replication"))

            wait_until(replicated, 15, what="replica in sync")
            config = {
                "authenticate_service_url": f"http://auth.test:{port}",
                "idp_provider": "oidc", "idp_provider_url": op.issuer,
                "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
                "idp_scopes": ["openid", "email", "groups", "offline_access"],
                "cookie_secure": False,
                "shared_secret": base64.b64encode(b"s" * 32).decode(),
                "cookie_secret": base64.b64encode(b"c" * 32).decode(),
                "databroker_storage_type": "kvstore",
                "databroker_storage_connection_string":
                    f"kvstore+sentinel://127.0.0.1:{sentinel_port}/mymaster/0",
                "policy": [{"from": f"http://app.test:{port}", "to": up.url,
                            "allow_any_authenticated_user": True}],
            }
            with gateway_daemon(tmp_path, config, port=port):
                alice = Browser()
                assert alice.sign_in(f"http://app.test:{port}/", "alice@example.test"
                                     ).status == 200

                def on_replica(count: int) -> bool:
                    with replica.client() as raw:
                        return bool(raw.command("HLEN", "gateway:session") == count)

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
