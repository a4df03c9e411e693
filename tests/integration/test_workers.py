"""``workers: 2`` through the real daemon: both workers serve, sessions and sign-outs
hold across them (kvstore), a reload reaches every worker with the snapshot the
supervisor validated, a killed worker is restarted while the others serve, the metrics
endpoint adds the workers up, SIGTERM stops them all and no worker outlives its
supervisor."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.cli.check import run_check
from tests.support.browser import Browser
from tests.support.daemon import REPO_ROOT, Daemon, gateway_daemon
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, pid_alive, wait_until

pytestmark = pytest.mark.integration

SECRET = base64.b64encode(b"s" * 32).decode()
EXAMPLE = REPO_ROOT / "conf" / "workers.example.yaml"


def signing_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return base64.b64encode(key).decode()


def public_config(redis_url: str, port: int, upstream: str, **route: Any) -> dict[str, Any]:
    return {
        "insecure_server": True, "address": f"127.0.0.1:{port}",
        "workers": 2, "shared_secret": SECRET, "cookie_secret": SECRET,
        "databroker_storage_type": "kvstore",
        "databroker_storage_connection_string": redis_url,
        "policy": [{"from": f"http://127.0.0.1:{port}", "to": upstream,
                    "allow_public_unauthenticated_access": True, **route}],
    }


def worker_pids(daemon: Daemon) -> dict[int, int]:
    """The newest pid of each worker, from the supervisor's 'worker N started' lines."""
    pids: dict[int, int] = {}
    for event in daemon.log_events():
        if event.get("namespace") == "gateway.workers" and \
                str(event.get("message", "")).endswith(f"started (pid {event.get('pid')})"):
            pids[int(event["index"])] = int(event["pid"])
    return pids


def served_by(daemon: Daemon, since: int) -> list[int]:
    """The worker of each access-log line after the first ``since`` log lines."""
    return [int(e["worker"]) for e in daemon.log_events()[since:]
            if e.get("namespace") == "gateway.access" and "worker" in e]


def on_both_workers(daemon: Daemon, send: Any, least: int = 8) -> list[Any]:
    """Call ``send()`` (a request on a new connection) at least ``least`` times and
    until both workers have served one (the kernel picks the worker by a hash of the
    connection's addresses: 64 tries all on one worker has odds of 2**-63)."""
    results = []
    mark = len(daemon.log_events())
    for count in range(1, 65):
        results.append(send())
        if count >= least:
            wait_until(lambda count=count: len(served_by(daemon, mark)) >= count, 5,
                       what="access log")
            if set(served_by(daemon, mark)) == {0, 1}:
                return results
    raise AssertionError("64 connections, all to one worker")


def echo(daemon: Daemon, path: str = "/") -> dict[str, Any]:
    status, _, body = daemon.get(path)
    assert status == 200, body[:200]
    reply: dict[str, Any] = json.loads(body)
    return reply


@pytest.fixture
def redis_url(tmp_path: Path, require_binary: Any) -> Iterator[str]:
    require_binary("redis-server", "apt-get install -y redis-server")
    with redis_server(tmp_path / "redis") as redis:
        yield f"kvstore://127.0.0.1:{redis.port}/0"


def test_workers_serve_reload_restart_and_stop(tmp_path: Path, redis_url: str) -> None:
    port = free_port()
    with echo_upstream(tmp_path, quiet=True) as up, \
            gateway_daemon(tmp_path, public_config(redis_url, port, up.url),
                           port=port) as daemon:
        pids = worker_pids(daemon)
        assert sorted(pids) == [0, 1]
        assert all(pid_alive(p) for p in pids.values())
        # each request is a new connection: the kernel spreads them over both workers
        on_both_workers(daemon, lambda: echo(daemon))

        # a file change: the supervisor validates it, every worker takes its snapshot
        config = public_config(redis_url, port, up.url,
                               set_request_headers={"X-Reloaded": "yes"})
        daemon.write_config(config)
        wait_until(lambda: sum(1 for e in daemon.log_events()
                               if "configuration reloaded (supervisor)" in str(e.get("message"))
                               ) == 2, 10, what="both workers reloaded")
        for _ in range(16):
            assert ["X-Reloaded", "yes"] in echo(daemon)["headers"]

        # an invalid file is refused by the supervisor: the workers keep the last good one,
        # and a worker started now starts with it too, not with the file on disk
        daemon.config_path.write_text("workers: 2\npolicy: [{from: nowhere}]\n")
        wait_until(lambda: any("failed; keeping the running configuration"
                               in str(e.get("message")) for e in daemon.log_events()),
                   10, what="reload refused")
        os.kill(pids[0], signal.SIGKILL)
        wait_until(lambda: worker_pids(daemon).get(0) not in (None, pids[0]), 10,
                   what="worker 0 restarted")
        # while it starts again, requests on its socket wait in the backlog: none fails
        for _ in range(16):
            assert ["X-Reloaded", "yes"] in echo(daemon)["headers"]
        restarted = worker_pids(daemon)[0]
        assert any(e.get("message") == f"worker ready: services=all pid={restarted}"
                   for e in daemon.log_events())
        events = daemon.log_events()
        assert any("worker 0" in str(e.get("message")) and "killed by signal 9"
                   in str(e.get("message")) and e.get("level") == "error" for e in events)
        supervisor = daemon.process
        assert supervisor.stop() in (0, -signal.SIGTERM)  # (twistd re-raises it)
        all_pids = [pids[1], restarted]
    for pid in all_pids:
        wait_until(lambda pid=pid: not pid_alive(pid), 5, what=f"worker {pid} gone")


def test_workers_do_not_outlive_their_supervisor(tmp_path: Path, redis_url: str) -> None:
    port = free_port()
    with echo_upstream(tmp_path, quiet=True) as up, \
            gateway_daemon(tmp_path, public_config(redis_url, port, up.url),
                           port=port) as daemon:
        pids = list(worker_pids(daemon).values())
        assert len(pids) == 2
        os.kill(daemon.process.pid or 0, signal.SIGKILL)
        for pid in pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 5, what=f"worker {pid} gone")


def make_secrets(directory: Path) -> None:
    """The three files conf/workers.example.yaml names, as its header makes them."""
    secrets = directory / "secrets"
    secrets.mkdir()
    (secrets / "shared_secret").write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    (secrets / "cookie_secret").write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    (secrets / "signing-key.pem").write_bytes(base64.b64decode(signing_key()))


def test_example_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """conf/workers.example.yaml as shipped, beside the secret files its header makes."""
    make_secrets(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    assert run_check(str(tmp_path / EXAMPLE.name), sys.stdout, sys.stderr) == 0, \
        capsys.readouterr()


def test_example_shares_sign_in_and_sign_out(tmp_path: Path, redis_url: str,
                                             require_binary: Any) -> None:
    """The example, with its ports moved: a session made through one worker is one on
    every worker; a sign-out through one ends it on all of them within a second (the
    kvstore's change stream)."""
    require_binary("node", "apt-get install -y nodejs npm")
    port, metrics = free_port(), free_port()
    make_secrets(tmp_path)
    with oidc_provider(tmp_path, [f"http://authenticate.localhost:{port}/oauth2/callback"]
                       ) as op, echo_upstream(tmp_path, quiet=True) as up:
        config = yaml.safe_load(moved(EXAMPLE.read_text(), {
            "workers: auto": "workers: 2",  # (auto: as many as this machine's CPUs)
            ":8080": f":{port}", "http://127.0.0.1:9000": op.issuer,
            "http://127.0.0.1:8081": up.url, "kvstore://127.0.0.1:6379/0": redis_url,
            "127.0.0.1:9090": f"127.0.0.1:{metrics}"}))
        with gateway_daemon(tmp_path, config, port=port) as daemon:
            assert sorted(worker_pids(daemon)) == [0, 1]
            # the sign-in's hand-off link works once, on whichever worker: a copy of it
            # (proxies log URLs) is refused by every worker
            stopped = Browser().sign_in(f"http://localhost:{port}/", "alice@example.test",
                                        stop=f"http://localhost:{port}/.gateway/callback")
            assert Browser().request("GET", stopped.url).status == 302
            replays = on_both_workers(
                daemon, lambda: Browser().request("GET", stopped.url).status)
            assert set(replays) == {400}, replays

            browser = Browser()
            assert browser.sign_in(f"http://localhost:{port}/", "alice@example.test").status \
                == 200
            # a new connection each: every worker sees the session
            statuses = on_both_workers(
                daemon, lambda: browser.request("GET", f"http://localhost:{port}/x").status)
            assert set(statuses) == {200}, statuses
            assert browser.request("GET", f"http://public.localhost:{port}/").status == 200
            confirm = browser.request("GET", f"http://localhost:{port}/.gateway/signout/")
            token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0]
            out = browser.request("POST", f"http://localhost:{port}/.gateway/signout/",
                                  b"csrf=" + token)
            assert out.status in (200, 302)
            ended = time.monotonic()

            def signed_out_everywhere() -> bool:
                replies = [browser.request("GET", f"http://localhost:{port}/after").status
                           for _ in range(8)]
                return all(status == 302 for status in replies)

            wait_until(signed_out_everywhere, 3, what="sign-out seen by every worker")
            assert time.monotonic() - ended < 2.0


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in {EXAMPLE.name}"
        text = text.replace(old, new)
    return text


def test_metrics_add_the_workers_up(tmp_path: Path, redis_url: str) -> None:
    """The supervisor's endpoint asks every worker and adds their series up: the request
    counter is the number of requests, whichever worker answered them."""
    port, metrics = free_port(), free_port()
    with echo_upstream(tmp_path, quiet=True) as up:
        config = {**public_config(redis_url, port, up.url),
                  "metrics_address": f"127.0.0.1:{metrics}"}
        with gateway_daemon(tmp_path, config, port=port) as daemon:
            sent = len(on_both_workers(daemon, lambda: echo(daemon)))
            scraper = Daemon(f"http://127.0.0.1:{metrics}", metrics,
                             daemon.config_path, daemon.process)
            status, _, body = scraper.get("/metrics")
            assert status == 200
            lines = body.decode().splitlines()
            requests = sum(float(line.rsplit(" ", 1)[1]) for line in lines
                           if line.startswith("http_server_requests_total{")
                           and 'status="200"' in line)
            assert requests == sent, [x for x in lines if x.startswith("http_server_req")]
            # one series per label set (merged, not one per worker) ...
            assert len([x for x in lines if x.startswith("gateway_build_info{")]) == 1
            # ... and the kvstore pools, held only by the workers, from both
            conns = [float(x.rsplit(" ", 1)[1]) for x in lines
                     if x.startswith("kvstore_conns{")]
            assert conns and conns[0] >= 2
