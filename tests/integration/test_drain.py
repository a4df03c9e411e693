"""SIGTERM drains (``gateway/services/drain.py``), through the real daemon: new
connections are refused at once, an idle keep-alive connection is closed, a request in
flight to a slow upstream is answered (HTTP/1.1 with ``connection: close``, HTTP/2 after
a GOAWAY NO_ERROR), a health check on its way says 503, the drain timeout or a second
SIGTERM cuts what is left, and the daemon exits 0; with ``workers: 2`` too; a native
SSH session goes on until the timeout and is then told why.

Before the drain, a SIGTERM 0.7 s into a 2 s request stopped every service within
about a millisecond and the client got no response at all."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hyperframe.frame import DataFrame, HeadersFrame

from tests.support import h2frames as f
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import (
    cert_sshd,
    gateway_keys,
    read_until,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration

HOST = "app.localhost.test"
IN_FLIGHT = 0.5  # how far into a request the SIGTERM comes


def route(up: Upstream) -> dict[str, Any]:
    return {"from": f"https://{HOST}", "to": up.url,
            "allow_public_unauthenticated_access": True}


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()


def read_to_close(sock: socket.socket) -> bytes:
    """Everything until the server closes (b"" at once for a reset)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def refused(port: int) -> bool:
    """Whether a new connection is refused (not accepted, nor left unanswered: a
    connect that times out, the accept queue full while the daemon is busy, is no
    refusal yet)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except ConnectionRefusedError:
        return True
    except TimeoutError:
        return False
    return False


def exit_code(gw: Daemon, timeout: float) -> int:
    """Wait for the daemon to end by itself (``stop`` would send another SIGTERM)."""
    wait_until(lambda: gw.process.returncode is not None, timeout, what="the daemon's exit")
    code = gw.process.returncode
    assert code is not None
    return code


def drained(gw: Daemon) -> dict[str, Any]:
    return gw.wait_for_event(lambda e: str(e.get("message", "")).startswith("drained in"),
                             what="drain's end")


def test_sigterm_lets_requests_in_flight_finish(tmp_path: Path) -> None:
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "shutdown_drain_timeout": "10s",
            "codec_type": "auto"}) as gw:
        idle = connect(gw.port)
        idle.sendall(request("/ping"))
        answered = b""
        while not answered.endswith(b"\r\n\r\nOK\n"):  # then idle, kept alive
            answered += idle.recv(4096) or b"closed"
            assert not answered.endswith(b"closed"), answered
        slow = connect(gw.port)
        slow.sendall(request("/delay/1.5"))
        health = connect(gw.port)  # a health check whose head is still arriving
        health.sendall(f"GET /ping HTTP/1.1\r\nHost: {HOST}\r\n".encode())
        h2 = f.FrameClient(gw.port)
        h2.send(f.hello() + f.Frames().headers(
            1, f.request_headers(b"/delay/1.5", HOST.encode())))
        time.sleep(IN_FLIGHT)
        signalled = time.monotonic()
        os.kill(gw.process.pid or 0, signal.SIGTERM)

        assert read_to_close(idle) == b""  # the idle connection is closed at once
        wait_until(lambda: refused(gw.port), 2, what="new connections refused")
        health.sendall(b"\r\n")
        answer = read_to_close(health)
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"draining\n")
        assert b"\r\nconnection: close\r\n" in answer

        head, _, body = read_to_close(slow).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"\r\nconnection: close\r\n" in head + b"\r\n"
        assert json.loads(body)["path"] == "/delay/1.5"

        goaway = h2.goaway(5)
        assert goaway is not None
        assert (goaway.error_code, goaway.last_stream_id) == (0, 1)
        assert h2.wait_for(lambda frames: any(
            isinstance(fr, DataFrame) and fr.stream_id == 1 and "END_STREAM" in fr.flags
            for fr in frames), 5)
        assert any(isinstance(fr, HeadersFrame) and fr.stream_id == 1 for fr in h2.frames)
        assert h2.wait_closed(5)
        h2.close()

        assert exit_code(gw, 10) == 0
        took = time.monotonic() - signalled
        assert took < 5.0, took  # the slow requests' rest (1 s), not the drain timeout
        end = drained(gw)
        assert (end["started"], end["finished"], end["cut"]) == (4, 4, 0)
        assert any(str(e.get("message", "")).startswith("draining: 4 connection(s)")
                   for e in gw.log_events())
        for sock in (idle, slow, health):
            sock.close()


def test_drain_timeout_cuts_a_longer_request(tmp_path: Path) -> None:
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "shutdown_drain_timeout": "1s"}) as gw:
        slow = connect(gw.port)
        slow.sendall(request("/delay/5"))
        time.sleep(IN_FLIGHT)
        signalled = time.monotonic()
        os.kill(gw.process.pid or 0, signal.SIGTERM)
        assert read_to_close(slow) == b""  # cut, with no response
        cut_after = time.monotonic() - signalled
        assert 0.9 < cut_after < 3.0, cut_after  # not the upstream's answer, at 4.5 s
        assert exit_code(gw, 10) == 0
        end = drained(gw)
        assert (end["started"], end["cut"], end["ended_by"]) == (1, 1, "timeout")
        slow.close()


def test_second_sigterm_stops_at_once(tmp_path: Path) -> None:
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "shutdown_drain_timeout": "20s"}) as gw:
        slow = connect(gw.port)
        slow.sendall(request("/delay/5"))
        time.sleep(IN_FLIGHT)
        os.kill(gw.process.pid or 0, signal.SIGTERM)
        gw.wait_for_event(lambda e: str(e.get("message", "")).startswith("draining:"),
                          what="the drain's start")
        signalled = time.monotonic()
        os.kill(gw.process.pid or 0, signal.SIGTERM)
        assert read_to_close(slow) == b""
        assert exit_code(gw, 10) == 0
        assert time.monotonic() - signalled < 3.0  # not the upstream's 4.5 s, nor 20 s
        assert drained(gw)["ended_by"] == "signal"
        slow.close()


@pytest.fixture
def redis_url(tmp_path: Path, require_binary: Any) -> Iterator[str]:
    require_binary("redis-server", "apt-get install -y redis-server")
    with redis_server(tmp_path / "redis") as redis:
        yield f"kvstore://127.0.0.1:{redis.port}/0"


def test_workers_drain_too(tmp_path: Path, redis_url: str) -> None:
    """The supervisor passes SIGTERM on and closes its copies of the listening sockets:
    new connections are refused, and a worker's request in flight is answered."""
    secret = base64.b64encode(b"s" * 32).decode()
    port = free_port()
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "workers": 2, "shared_secret": secret, "cookie_secret": secret,
            "databroker_storage_type": "kvstore",
            "databroker_storage_connection_string": redis_url,
            "policy": [route(up)], "shutdown_drain_timeout": "10s"}, port=port) as gw:
        slow = connect(port)
        slow.sendall(request("/delay/1.5"))
        time.sleep(IN_FLIGHT)
        signalled = time.monotonic()
        os.kill(gw.process.pid or 0, signal.SIGTERM)
        wait_until(lambda: refused(port), 2, what="new connections refused")
        head, _, body = read_to_close(slow).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert json.loads(body)["path"] == "/delay/1.5"
        assert exit_code(gw, 15) == 0
        assert time.monotonic() - signalled < 6.0  # the request's rest, not the 10 s drain
        assert any(e.get("ended_by") == "done" and e.get("cut") == 0 for e in gw.log_events()
                   if str(e.get("message", "")).startswith("drained in"))
        slow.close()


def test_ssh_session_goes_on_through_the_drain_then_is_told_why(tmp_path: Path) -> None:
    """A native SSH session is long-lived: it goes on until shutdown_drain_timeout, then
    OpenSSH prints the gateway's disconnect message; new SSH connections are refused."""
    keys = gateway_keys(tmp_path)
    port, ssh_port = free_port(), free_port()
    with cert_sshd(tmp_path, keys.ca_public) as sshd, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        config = {**signing_in_config(op, port, [sshd.route(allow_any_authenticated_user=True)]),
                  **keys.settings(ssh_port), "shutdown_drain_timeout": "2s"}
        with gateway_daemon(tmp_path, config, port=port) as gw:
            wait_until(lambda: gw.logged("ssh: listening"), 10, what="ssh listener")
            proc, seen, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                 f"{sshd.user}@db", "echo held; sleep 60"),
                                        "alice@example.test")
            try:
                read_until(proc.stdout, b"held", 30)
                signalled = time.monotonic()
                os.kill(gw.process.pid or 0, signal.SIGTERM)
                wait_until(lambda: refused(ssh_port), 2, what="new SSH connections refused")
                with pytest.raises(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)  # still going, a second into the drain
                _, err = proc.communicate(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            took = time.monotonic() - signalled
            assert 1.9 < took < 5.0, took
            assert b"the gateway is shutting down" in err, (seen + err).decode()
            assert exit_code(gw, 10) == 0
            end = drained(gw)
            assert (end["started"], end["cut"], end["ended_by"]) == (1, 1, "timeout")
