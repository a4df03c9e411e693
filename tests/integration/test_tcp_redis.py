"""redis-cli through ``gateway tcp`` to a real redis-server behind a plain-HTTP gateway
that signs people in: a local listener serving concurrent tunnels after one shared
sign-in, a refused cached token replaced by a new sign-in, and the messages for a
denied route, a missing route, a service that is down and an unreachable gateway."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider, redis_server
from tests.support.processes import free_port, wait_until
from tests.support.tcp_client import (
    Listener,
    browser_cmd,
    callback_uri,
    client_argv,
    client_env,
    listening_client,
    run_client,
    signing_in_config,
    wait_for_log,
)

pytestmark = pytest.mark.integration


@dataclass
class Env:
    port: int
    redis_port: int
    tmp: Path

    @property
    def url(self) -> str:
        return f"http://redis.localhost:{self.port}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("tcp-redis")
    port, closed_port = free_port(), free_port()
    with redis_server(tmp / "redis") as redis, \
            oidc_provider(tmp / "oidc", [callback_uri(port)]) as op, \
            gateway_daemon(tmp, signing_in_config(op, port, [
                {"from": "tcp+https://redis.localhost:6379",
                 "to": f"tcp://127.0.0.1:{redis.port}",
                 "allowed_users": ["alice@example.test"]},
                {"from": "tcp+https://denied.localhost:6379",
                 "to": f"tcp://127.0.0.1:{redis.port}",
                 "allowed_users": ["bob@example.test"]},
                {"from": "tcp+https://down.localhost:6379",
                 "to": f"tcp://127.0.0.1:{closed_port}",
                 "allow_public_unauthenticated_access": True},
                {"from": "http://web.localhost", "to": f"http://127.0.0.1:{closed_port}",
                 "allow_public_unauthenticated_access": True},
            ]), port=port):
        yield Env(port, redis.port, tmp)


def redis_cli(listener: Listener, *command: str, timeout: float = 60
              ) -> subprocess.Popen[str]:
    return subprocess.Popen(["redis-cli", "-h", listener.host, "-p", str(listener.port),
                             *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


def sign_ins(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_concurrent_tunnels_after_one_sign_in(env: Env, tmp_path: Path,
                                              require_binary: Any) -> None:
    """Two redis-cli start at once with no token: one sign-in serves both, and the
    first tunnels after it work. A BLPOP blocked in one tunnel is answered by an RPUSH
    sent through another, so both are open at the same time."""
    require_binary("redis-cli", "apt-get install -y redis-tools")
    record = tmp_path / "browser.jsonl"
    browser = browser_cmd("alice@example.test", record)
    with listening_client(tmp_path, tmp_path / "cache", "--gateway-url", env.url,
                          "--browser-cmd", browser, "redis.localhost:6379") as listener:
        blpop = redis_cli(listener, "BLPOP", "queue", "30")
        ping = redis_cli(listener, "PING")
        assert finish(ping) == "PONG\n"
        wait_for_log(listener, "tunnel open", count=2)
        assert blpop.poll() is None  # still blocked in its own tunnel
        assert finish(redis_cli(listener, "RPUSH", "queue", "hello")) == "1\n"
        assert finish(blpop) == "queue\nhello\n"
        wait_for_log(listener, "tunnel closed", count=3)
        log = listener.log()
    assert len(sign_ins(record)) == 1
    assert log.count("sign-in required for redis.localhost:6379") == 1
    assert log.count("tunnel open") == 3
    print("\n" + log)


def test_refused_token_is_deleted_and_sign_in_starts_again(env: Env, tmp_path: Path) -> None:
    """A cached token the gateway refuses (expired, signed out, or just wrong) is
    deleted; the client signs in again, caches the new token and the tunnel works."""
    cache = tmp_path / "cache"
    record = tmp_path / "browser.jsonl"
    args = ["--listen", "-", "--gateway-url", env.url,
            "--browser-cmd", browser_cmd("alice@example.test", record), "redis.localhost:6379"]
    first = run_client(args, cache, stdin=b"PING\r\n")
    assert first.returncode == 0, first.stderr.decode()
    assert first.stdout == b"+PONG\r\n"
    token_file = next((cache / "gateway").glob("tcp-*.token"))
    token_file.write_text("not-a-token-the-gateway-issued\n")
    second = run_client(args, cache, stdin=b"ECHO again\r\n")
    assert second.returncode == 0, second.stderr.decode()
    assert second.stdout == b"$5\r\nagain\r\n"
    assert b"sign-in required" in second.stderr
    assert len(sign_ins(record)) == 2
    token = token_file.read_text().strip()
    assert token and token != "not-a-token-the-gateway-issued"
    third = run_client([*args[:4], "--browser-cmd", "false", args[-1]], cache,
                       stdin=b"PING\r\n")
    assert third.stdout == b"+PONG\r\n"
    assert third.stderr == b""


def test_messages_a_person_can_act_on(env: Env, tmp_path: Path) -> None:
    """403 after signing in as someone the route does not allow, 404 for a destination
    without a TCP route, 405 for an HTTP route, 503 when the service is down, and a
    gateway that does not listen: each one line on stderr, exit status 1."""
    cache = tmp_path / "cache"
    record = tmp_path / "browser.jsonl"
    browser = browser_cmd("alice@example.test", record)
    closed = free_port()
    cases = [
        ("denied.localhost:6379", env.url,
         "access denied to denied.localhost:6379 through "
         f"http://redis.localhost:{env.port} (the gateway says: You are signed in as "
         "alice@example.test, but this route does not allow you in.). Ask the gateway's "
         "administrator for access; "
         "to sign in as someone else, delete "),
        ("nothing.localhost:6379", env.url,
         f"no TCP route for nothing.localhost:6379 at http://redis.localhost:{env.port}: "
         "check the destination"),
        ("web.localhost:80", env.url, "web.localhost:80 is not a TCP route at "),
        ("down.localhost:6379", env.url,
         "the TCP service behind down.localhost:6379 through "
         f"http://redis.localhost:{env.port} is down or unreachable (the gateway says: "
         "the TCP service is not reachable (connection refused))"),
        ("redis.localhost:6379", f"http://127.0.0.1:{closed}",
         f"cannot reach the gateway at http://127.0.0.1:{closed}: connection refused; "
         "check --gateway-url and your network"),
    ]
    for destination, url, expected in cases:
        result = run_client(["--listen", "-", "--gateway-url", url, "--browser-cmd", browser,
                             destination], cache, stdin=b"PING\r\n")
        stderr = result.stderr.decode()
        # The browser command shares stderr and may print its own line after the
        # client's last one (it finishes after the callback the client was waiting for).
        last = [line for line in stderr.splitlines()
                if not line.startswith("browser_cmd:")][-1]
        print(f"\n{destination} via {url}: exit {result.returncode}\n{stderr}")
        assert result.returncode == 1, stderr
        assert result.stdout == b""
        assert last.startswith("gateway tcp: " + expected), last
    assert len(sign_ins(record)) == 1  # only the denied route needed one


def test_ctrl_c_while_waiting_for_the_sign_in(env: Env, tmp_path: Path) -> None:
    """Nobody signs in (the browser command does nothing): Ctrl-C ends the wait at once,
    with a short message and no traceback, exit 130; nothing is cached."""
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:
        process = subprocess.Popen(
            client_argv("--listen", "-", "--gateway-url", env.url, "--browser-cmd", "true",
                        "redis.localhost:6379"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            env=client_env(tmp_path / "cache"), cwd=REPO_ROOT)
        try:
            wait_until(lambda: b"waiting for the sign-in" in log.read_bytes(), 30,
                       what="the client waiting for the sign-in")
            process.send_signal(signal.SIGINT)
            out, _ = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    stderr = log.read_text()
    assert process.returncode == 130, stderr
    assert stderr.endswith("gateway tcp: interrupted\n"), stderr
    assert "Traceback" not in stderr
    assert out == b""
    assert not list((tmp_path / "cache").glob("gateway/*.token"))


def test_expired_session_ends_the_tunnel_and_signs_in_again(tmp_path: Path,
                                                            require_binary: Any) -> None:
    """With 5-second sessions: an open tunnel is closed by the gateway when the session
    expires; the next connection is refused with the cached (now expired) token, which
    is deleted, and a new sign-in opens it."""
    require_binary("redis-cli", "apt-get install -y redis-tools")
    port = free_port()
    record = tmp_path / "browser.jsonl"
    with redis_server(tmp_path / "redis") as redis, \
            oidc_provider(tmp_path / "oidc", [callback_uri(port)]) as op, \
            gateway_daemon(tmp_path, {**signing_in_config(op, port, [
                {"from": "tcp+https://redis.localhost:6379",
                 "to": f"tcp://127.0.0.1:{redis.port}",
                 "allow_any_authenticated_user": True}]), "cookie_expire": "5s"}, port=port), \
            listening_client(tmp_path, tmp_path / "cache", "--gateway-url",
                             f"http://redis.localhost:{port}", "--browser-cmd",
                             browser_cmd("alice@example.test", record),
                             "redis.localhost:6379") as listener:
        blpop = redis_cli(listener, "BLPOP", "never", "30")
        wait_for_log(listener, "tunnel open")
        out, _ = blpop.communicate(timeout=30)  # ends when the session does, not at 30 s
        wait_for_log(listener, "tunnel closed (the gateway closed the tunnel")
        token_file = next((tmp_path / "cache" / "gateway").glob("tcp-*.token"))
        expired = token_file.read_text()
        assert finish(redis_cli(listener, "PING")) == "PONG\n"
        assert token_file.read_text() != expired
        log = listener.log()
    assert len(sign_ins(record)) == 2
    assert log.count("sign-in required for redis.localhost:6379") == 2
    print(f"\nBLPOP printed {out!r}\n{log}")
