"""conf/tcp.example.yaml, the configuration of the TCP tunnel tutorial
(docs/tutorials/tcp-tunnel.md, which includes the file itself: tests/docs/test_examples.py
holds it to that): it passes ``gateway check`` exactly as shipped, and it runs with only
its ports moved (the gateway's :8080, the provider's :9000 and the three services' usual
ports), with a real sshd, PostgreSQL and redis-server behind it and the tutorial's three
client commands in front: ssh with a ProxyCommand, psql and redis-cli through local
listeners."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli.check import run_check
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider, redis_server
from tests.support.postgres import INSTALL_HINT as POSTGRES_HINT
from tests.support.postgres import postgres, server_binary
from tests.support.processes import free_port
from tests.support.sshd import INSTALL_HINT as SSH_HINT
from tests.support.sshd import sshd
from tests.support.tcp_client import (
    browser_cmd,
    callback_uri,
    client_env,
    listening_client,
    proxy_command,
    run_client,
)

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "tcp.example.yaml"
TUTORIAL = REPO_ROOT / "docs" / "tutorials" / "tcp-tunnel.md"


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert text.count(old) >= 1, f"{old!r} is no longer in {EXAMPLE.name}"
        text = text.replace(old, new)
    return text


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "routes=3 (hosts=3, public=0, tcp=3) warnings=0" in out.out, out


def test_tutorial_shows_the_commands_run_here() -> None:
    """The three client commands the tutorial shows are the ones run below (with the
    ports the test moves)."""
    page = TUTORIAL.read_text()
    for command in (
        "ssh -o ProxyCommand='gateway tcp --listen - --gateway-url "
        "http://ssh.localhost:8080 %h:%p' \\\n    alice@ssh.localhost",
        "gateway tcp --gateway-url http://db.localhost:8080 db.localhost:5432",
        "psql -h 127.0.0.1 -p 40123 -U postgres",
        "gateway tcp --listen 127.0.0.1:6380 --gateway-url http://redis.localhost:8080 "
        "redis.localhost:6379",
        "redis-cli -h 127.0.0.1 -p 6380 PING",
    ):
        assert command in page, command


def test_tutorial_commands_against_the_example(tmp_path: Path, require_binary: Any) -> None:
    for name in ("sshd", "ssh"):
        require_binary(name, SSH_HINT)
    require_binary("psql", POSTGRES_HINT)
    require_binary("redis-cli", "apt-get install -y redis-tools")
    if server_binary("initdb") is None:
        pytest.skip(f"initdb is not installed ({POSTGRES_HINT})")
    port = free_port()
    cache = tmp_path / "cache"
    record = tmp_path / "browser.jsonl"
    alice = browser_cmd("alice@example.test", record)
    with sshd(tmp_path) as ssh_server, postgres(tmp_path) as pg, \
            redis_server(tmp_path / "redis") as redis, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        config = yaml.safe_load(moved(EXAMPLE.read_text(), {
            ":8080": f":{port}",
            "http://127.0.0.1:9000": op.issuer,
            "to: tcp://127.0.0.1:22\n": f"to: tcp://127.0.0.1:{ssh_server.port}\n",
            "to: tcp://127.0.0.1:5432\n": f"to: tcp://127.0.0.1:{pg.port}\n",
            "to: tcp://127.0.0.1:6379\n": f"to: tcp://127.0.0.1:{redis.port}\n",
        }))
        with gateway_daemon(tmp_path, config, port=port):
            # ssh -o ProxyCommand='gateway tcp --listen - --gateway-url
            #     http://ssh.localhost:8080 %h:%p' alice@ssh.localhost
            command = proxy_command(f"http://ssh.localhost:{port}", alice)
            ssh = subprocess.run(
                ssh_server.ssh_argv("ssh.localhost", "echo hello from sshd", port=22,
                                    options=[f"ProxyCommand={command}"]),
                capture_output=True, env=client_env(cache), cwd=REPO_ROOT, timeout=90)
            assert ssh.returncode == 0, ssh.stderr.decode()
            assert ssh.stdout == b"hello from sshd\n"

            # gateway tcp --gateway-url http://db.localhost:8080 db.localhost:5432
            # psql -h 127.0.0.1 -p PORT -U postgres
            with listening_client(tmp_path, cache, "--gateway-url",
                                  f"http://db.localhost:{port}", "--browser-cmd", alice,
                                  "db.localhost:5432", name="gateway-tcp-db") as db:
                psql = subprocess.run(
                    ["psql", "-h", db.host, "-p", str(db.port), "-U", "postgres", "-At",
                     "-c", "select current_user, 6 * 7"],
                    capture_output=True, text=True, timeout=90)
                assert psql.returncode == 0, psql.stderr + db.log()
                assert psql.stdout == "postgres|42\n"

            # gateway tcp --listen 127.0.0.1:6380 --gateway-url http://redis.localhost:8080
            #     redis.localhost:6379;  redis-cli -h 127.0.0.1 -p 6380 PING
            local = free_port()
            with listening_client(tmp_path, cache, "--listen", f"127.0.0.1:{local}",
                                  "--gateway-url", f"http://redis.localhost:{port}",
                                  "--browser-cmd", alice, "redis.localhost:6379",
                                  name="gateway-tcp-redis") as rd:
                assert rd.port == local
                cli = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(local), "PING"],
                                     capture_output=True, text=True, timeout=90)
                assert cli.stdout == "PONG\n", cli.stderr + rd.log()

            # allowed_groups: [engineering] keeps carol (group "users") out of the database
            carol = run_client(["--listen", "-", "--gateway-url", f"http://db.localhost:{port}",
                              "--browser-cmd", browser_cmd("carol@example.test", record),
                              "db.localhost:5432"], tmp_path / "carol-cache")
            assert carol.returncode == 1
            assert b"access denied to db.localhost:5432" in carol.stderr
    print(f"\nssh: {ssh.stdout!r}\npsql: {psql.stdout!r}\nredis-cli: {cli.stdout!r}\n"
          f"carol: {carol.stderr.decode().splitlines()[-1]}")
