"""autocert end to end against pebble: TLS-ALPN-01 answered on the main listener, the
certificate stored, served, and reused after a restart."""

from __future__ import annotations

import socket
import ssl
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.pebble import PEBBLE_HINT, pebble
from tests.support.peers import echo_upstream
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration
DOMAIN = "app.localhost.test"


def fetch(port: int, roots: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(roots))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=DOMAIN) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {DOMAIN}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    return data


def test_autocert_with_pebble(tmp_path: Path, require_binary: Any) -> None:
    """A certificate is obtained through TLS-ALPN-01 on the gateway's own listener,
    served to clients, stored privately, and reused by the next start without an order."""
    require_binary("pebble", PEBBLE_HINT)
    require_binary("pebble-challtestsrv", PEBBLE_HINT)
    port = free_port()
    with pebble(tmp_path, port) as ca, echo_upstream(tmp_path) as up:
        roots = tmp_path / "pebble-roots.pem"
        roots.write_bytes(ca.roots())
        config = {
            "insecure_server": False, "autocert": True,
            "autocert_dir": str(tmp_path / "autocert"), "autocert_ca": ca.directory,
            "autocert_trusted_ca_file": str(ca.wfe_ca),
            "policy": [{"from": f"https://{DOMAIN}", "to": up.url,
                        "allow_public_unauthenticated_access": True}],
        }
        with gateway_daemon(tmp_path, config, port=port) as gw:
            def served() -> bool:
                try:
                    return fetch(port, roots).startswith(b"HTTP/1.1 200")
                except (ssl.SSLError, OSError):
                    return False

            wait_until(served, 60, interval=0.5, what="certificate from pebble served")
            messages = [e["message"] for e in gw.log_events()]
            assert any(m.startswith(f"autocert: certificate for {DOMAIN} issued") for m in messages)
        stored = tmp_path / "autocert" / "certs" / f"{DOMAIN}.key"
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        again = tmp_path / "again"
        again.mkdir()
        with gateway_daemon(again, config, port=port) as gw:
            assert fetch(port, roots).startswith(b"HTTP/1.1 200")
            messages = [e["message"] for e in gw.log_events()]
            assert not any("requesting a certificate" in m for m in messages)
