"""``gateway tcp`` to a TLS gateway (certificates from a private trustme CA): the
verification failure names the CA options, each of them then works, and a command
piped into ``--listen -`` still gets its answer although a TLS tunnel cannot be
half-closed."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.daemon import gateway_daemon
from tests.support.peers import redis_server
from tests.support.tcp_client import listening_client, run_client

pytestmark = pytest.mark.integration


@dataclass
class Env:
    port: int
    ca_path: Path
    ca_pem: bytes
    tmp: Path

    def args(self, *extra: str) -> list[str]:
        return ["--listen", "-", "--gateway-url", f"https://redis.localhost:{self.port}",
                *extra, "redis.localhost:6379"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("tcp-tls")
    ca = trustme.CA()
    ca.issue_cert("redis.localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "redis.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    with redis_server(tmp / "redis") as redis, gateway_daemon(tmp, {
            "insecure_server": False,
            "certificates": [{"cert": str(tmp / "redis.pem"), "key": str(tmp / "redis.pem")}],
            "policy": [{"from": "tcp+https://redis.localhost:6379",
                        "to": f"tcp://127.0.0.1:{redis.port}",
                        "allow_public_unauthenticated_access": True}]}) as gw:
        yield Env(gw.port, tmp / "ca.pem", ca.cert_pem.bytes(), tmp)


def test_untrusted_certificate_names_the_ca_options(env: Env, tmp_path: Path) -> None:
    result = run_client(env.args(), tmp_path / "cache", stdin=b"PING\r\n")
    stderr = result.stderr.decode()
    print(f"\nwithout a CA option: exit {result.returncode}\n{stderr}")
    assert result.returncode == 1
    assert stderr.startswith(f"gateway tcp: TLS verification of the gateway "
                             f"https://redis.localhost:{env.port} failed (certificate verify "
                             "failed)")
    assert "--alternate-ca-path FILE or --ca-cert BASE64" in stderr
    assert result.stdout == b""


def test_each_ca_option_works_and_piped_input_gets_its_answer(env: Env, tmp_path: Path
                                                              ) -> None:
    inline = base64.b64encode(env.ca_pem).decode()
    for extra, warning in ((["--alternate-ca-path", str(env.ca_path)], False),
                           (["--ca-cert", inline], False),
                           (["--disable-tls-verification"], True)):
        started = time.monotonic()
        result = run_client(env.args(*extra), tmp_path / "cache",
                            stdin=b"PING\r\nECHO tls\r\n")
        took = time.monotonic() - started
        stderr = result.stderr.decode()
        assert result.returncode == 0, stderr
        assert result.stdout == b"+PONG\r\n$3\r\ntls\r\n"
        assert ("TLS verification of the gateway is disabled" in stderr) is warning, stderr
        assert took < 15  # stdin's end lingers for 2 quiet seconds, then the tunnel ends


def test_listener_over_tls(env: Env, tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-cli", "apt-get install -y redis-tools")
    with listening_client(tmp_path, tmp_path / "cache", "--gateway-url",
                          f"https://redis.localhost:{env.port}", "--alternate-ca-path",
                          str(env.ca_path), "redis.localhost:6379") as listener:
        result = subprocess.run(["redis-cli", "-h", listener.host, "-p", str(listener.port),
                                 "SET", "k", "over-tls"], capture_output=True, text=True,
                                timeout=30)
        assert result.stdout == "OK\n", result.stderr
        result = subprocess.run(["redis-cli", "-h", listener.host, "-p", str(listener.port),
                                 "GET", "k"], capture_output=True, text=True, timeout=30)
        assert result.stdout == "over-tls\n", result.stderr
