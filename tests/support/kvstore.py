"""Shared pieces of the kvstore tests: a gateway config that keeps sessions in Redis,
and a Redis Sentinel watching a master."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.peers import find_binary
from tests.support.processes import ManagedProcess, free_port, port_open

SECRET = base64.b64encode(b"s" * 32).decode()
COOKIE = base64.b64encode(b"c" * 32).decode()


def kv_gateway_config(op: Any, redis_url: str, port: int, upstream: str,
                      **rule: Any) -> dict[str, Any]:
    """A gateway on ``port`` with sessions at ``redis_url`` and one route to ``upstream``
    (by default allowing alice; ``rule`` replaces the allow rule)."""
    return {
        "authenticate_service_url": f"http://auth.test:{port}",
        "idp_provider": "oidc", "idp_provider_url": op.issuer,
        "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
        "idp_scopes": ["openid", "email", "groups", "offline_access"],
        "cookie_secure": False, "shared_secret": SECRET, "cookie_secret": COOKIE,
        "databroker_storage_type": "kvstore",
        "databroker_storage_connection_string": redis_url,
        "policy": [{"from": f"http://app.test:{port}", "to": upstream,
                    **(rule or {"allowed_users": ["alice@example.test"]})}],
    }


@contextmanager
def sentinel(tmp_path: Path, master_port: int, extra: str = "", *,
             tls: bool = False) -> Iterator[int]:
    """Run a sentinel monitoring ``mymaster`` at ``master_port``; yields its port (a TLS
    port when ``tls``, with ``extra`` carrying the tls-* lines). ``extra`` comes after the
    monitor line, so it may set ``sentinel ... mymaster`` options."""
    port = free_port()
    listen = f"port 0\ntls-port {port}\n" if tls else f"port {port}\n"
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"{listen}bind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {master_port} 1\n{extra}")
    binary = find_binary("redis-server")
    assert binary, "redis-server is needed for sentinel"
    with ManagedProcess([binary, str(conf), "--sentinel"], log_dir=tmp_path,
                        name="sentinel") as process:
        process.wait_ready(lambda: port_open("127.0.0.1", port), 10)
        yield port
