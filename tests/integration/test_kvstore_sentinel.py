"""Sessions through Redis Sentinel: the gateway asks the sentinel for the master."""

from __future__ import annotations

import base64
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
