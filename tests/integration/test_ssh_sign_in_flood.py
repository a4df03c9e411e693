"""Issue 39, part 1, against the real daemon: a client with a key it made up proves
it, then asks keyboard-interactive again and again without ever answering. Before the
fix each ask made a new sign-in ticket (5 minutes), a log line, and reset the login
timer, and was never counted: one connection made about 4,300 tickets a second and
grew the daemon by 24-28 MiB every 10 s, and was never cut.

Now each connection has one ticket, shown again on every ask; each ask after the first
is a failed attempt, so the connection is cut after the failure limit, and that cut is a
strike: after three, the address's new connections are held unread and closed until its
penalty ends. Tickets stay pending until they expire, and an address may have 5
(``ssh_max_pending_sign_ins_per_address``). The raw client
(``tests/support/ssh_raw_flood.py``) asks at most 2,000 times or for 10 s per
connection; the daemon's records are read from its metrics and log, its memory from
``/proc``. No identity provider or SSH server is needed: nothing
gets past the sign-in."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway.databroker.kv_records import RECORDS, VERSION
from gateway.databroker.records import SSH_SIGN_IN
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.kvstore import kv_gateway_config
from tests.support.peers import redis_server
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import gateway_keys
from tests.support.ssh_raw_flood import flood
from tests.support.tcp_client import signing_in_config

pytestmark = pytest.mark.integration
AUTH_ATTEMPTS = 10  # gateway.ssh.limits.AUTH_ATTEMPTS
PENALTY = 10.0  # gateway.dataplane.penalty.PENALTY: the first one
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@dataclass
class Env:
    gateway: Daemon
    ssh_port: int
    metrics_port: int

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as reply:
            text = reply.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.split("{", 1)[0].split(" ", 1)[0] == name)  # every label

    def rss_kib(self) -> int:
        pid = self.gateway.process.pid
        assert pid is not None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def started(self) -> int:
        return self.gateway.process.log_text().count("sign-in started")


PROVIDER = SimpleNamespace(issuer="http://127.0.0.1:9/", client_id="gateway",
                           client_secret="secret")  # never reached
ROUTE = {"from": "ssh://db", "to": "ssh://127.0.0.1:9",  # never reached either
         "ssh_upstream_host_keys": [HOST_KEY], "allow_any_authenticated_user": True}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("ssh-flood")
    keys = gateway_keys(tmp)
    port, ssh_port, metrics_port = free_port(), free_port(), free_port()
    config = {**signing_in_config(PROVIDER, port, [ROUTE]), **keys.settings(ssh_port),
              "metrics_address": f"127.0.0.1:{metrics_port}"}
    with gateway_daemon(tmp, config, port=port) as gateway:
        wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
        yield Env(gateway, ssh_port, metrics_port)


def greeted(port: int, wait: float = 2.0) -> bool:
    """Whether a new connection gets the server's version line within ``wait``."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        try:
            return sock.recv(64).startswith(b"SSH-2.0-")
        except (TimeoutError, ConnectionResetError):
            return False


def test_asking_again_and_again_makes_one_ticket_and_is_cut(env: Env) -> None:
    rss_before = env.rss_kib()
    started_before = env.started()
    strikes_before = env.metric("gateway_ssh_strikes_total")
    results = []
    for _ in range(3):
        result = flood(env.ssh_port)
        results.append(result)
        print(f"flood: {result}, {env.started() - started_before} tickets so far, RSS "
              f"{rss_before} -> {env.rss_kib()} KiB")
        # the same link on every ask, cut at the limit: the partial success was
        # failure 1, the first ask starts the sign-in, asks 2..10 are failures 2..10
        assert result["distinct_links"] == 1, result
        assert result["asks"] == AUTH_ATTEMPTS + 1, result
        assert result["disconnect"] == [14, "too many authentication failures"], result
        assert result["stopped"] == "", result
    assert env.started() - started_before == 3, results  # one ticket per connection
    # (each pending until it expires: its person could still confirm it)
    assert env.metric("gateway_ssh_pending_sign_ins") == 3
    assert env.metric("gateway_ssh_strikes_total") - strikes_before == 3
    # three strikes within 30 s: the address is refused (held unread, no version line)
    refused_before = env.metric("gateway_ssh_refused_connections_total")
    assert not greeted(env.ssh_port)
    assert env.metric("gateway_ssh_refused_connections_total") == refused_before + 1
    assert env.gateway.logged("its connections keep breaking the rules")
    rss_after = env.rss_kib()
    print(f"flood: {sum(int(str(r['asks'])) for r in results)} asks on 3 connections, "
          f"{env.started() - started_before} tickets, RSS {rss_before} -> {rss_after} KiB")
    assert rss_after - rss_before < 4 * 1024, (rss_before, rss_after)
    # and once the penalty is over, the address is served again
    deadline = time.monotonic() + PENALTY + 5
    while not greeted(env.ssh_port, 1.0):
        assert time.monotonic() < deadline, "still refused after the penalty"
        time.sleep(0.5)
    # the three tickets are still pending (5 minutes): two more sign-ins from this
    # address (asking once each, then leaving) reach ssh_max_pending_sign_ins_per_address
    for _ in range(2):
        result = flood(env.ssh_port, asks=1)
        assert (result["links"], result["disconnect"]) == (1, None), result
    result = flood(env.ssh_port, asks=1)
    assert result["links"] == 0, result
    assert result["disconnect"] == [12, "too many sign-ins are pending from your address; "
                                        "finish one in the browser or try again later"]
    assert env.metric("gateway_ssh_pending_sign_ins") == 5
    assert env.metric("gateway_ssh_sign_ins_refused_total") == 1


def test_with_redis_a_connection_writes_one_ticket(tmp_path: Path) -> None:
    """With the records in Redis (``databroker_storage_type: kvstore``) the flood used to
    land there: one write per ask. Now a connection writes its ticket once."""
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with redis_server(tmp_path / "redis") as redis:
        base = kv_gateway_config(PROVIDER, f"kvstore://127.0.0.1:{redis.port}/0", port,
                                 "http://127.0.0.1:9")
        config = {**base, "policy": [ROUTE], **keys.settings(ssh_port)}
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            client = redis.client()
            try:
                version = int(client.command("GET", VERSION) or 0)  # type: ignore[arg-type]
                result = flood(ssh_port)
                print(f"flood with Redis: {result}")
                assert result["distinct_links"] == 1, result
                assert result["asks"] == AUTH_ATTEMPTS + 1, result

                def written() -> int:
                    return int(client.command("GET", VERSION) or 0) - version  # type: ignore[arg-type]
                wait_until(lambda: written() >= 1, 5, what="the ticket written")
                time.sleep(0.5)  # (nothing more comes)
                assert written() == 1
                assert client.command("HLEN", RECORDS + SSH_SIGN_IN) == 1
            finally:
                client.close()
