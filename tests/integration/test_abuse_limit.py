"""Descriptor exhaustion: past max_connections new connections are closed at once and
the log says so once; at the open-files limit itself (EMFILE) the listener neither
crashes nor spins; both ways the gateway serves again as soon as connections end."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.abuse import until_closed
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import cpu_seconds, free_port, wait_until
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration


def policy(url: str) -> list[dict[str, object]]:
    return [{"from": "https://app.test", "to": url, "allow_public_unauthenticated_access": True}]


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(5)


@contextlib.contextmanager
def held(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` open, silent connections, each seen to stay open: a connection the
    gateway has not yet seen close (the harness's readiness probe, say) still counts
    against the cap for a moment, so one opened then may be refused; it is replaced."""
    with contextlib.ExitStack() as stack:
        socks: list[socket.socket] = []
        for _ in range(5):
            socks = [s for s in socks if still_open(s)]
            if len(socks) == count:
                break
            for _ in range(count - len(socks)):
                sock = stack.enter_context(socket.create_connection(("127.0.0.1", port),
                                                                    timeout=5))
                socks.append(sock)
            time.sleep(0.3)
        assert len(socks) == count and all(still_open(s) for s in socks)
        yield socks


def served(gw: Daemon) -> bool:
    with RawClient(gw.port, timeout=5) as client:
        return client.request("GET", "/ok", "app.test").status == 200


def refused_at_once(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        seconds, received = until_closed(sock, 2.0)
    return seconds < 1.0 and received == b""


def limit_events(gw: Daemon, word: str) -> list[dict[str, object]]:
    return [e for e in gw.log_events()
            if str(e.get("message", "")).startswith(f"connection limit {word}")]


def test_cap_refuses_then_clears(tmp_path: Path) -> None:
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "max_connections": 20, "policy": policy(up.url)}) as gw:
        with held(gw.port, 20) as socks:
            assert all(refused_at_once(gw.port) for _ in range(15))
            assert len(limit_events(gw, "reached")) == 1
            socks[0].close()
            wait_until(lambda: served(gw), 5, what="a slot freed")
        wait_until(lambda: bool(limit_events(gw, "cleared")), 8, what="cleared logged")
        (cleared,) = limit_events(gw, "cleared")
        assert int(cleared["refused"]) >= 15  # (and any refused while held() replaced)
        assert served(gw)


def test_emfile_neither_crashes_nor_spins(tmp_path: Path) -> None:
    """With the cap out of the way the process meets EMFILE on accept: Twisted's
    reserved descriptor lets it accept and close the pending connections (no busy loop
    on a listening socket that stays readable); afterwards it serves again."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "max_connections": 100000, "policy": policy(up.url)}) as gw:
        pid = gw.process.pid
        assert pid is not None
        assert served(gw)
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        soft = f"--nofile={in_use + 10}:"  # the soft limit only, so it can be raised back
        subprocess.run(["prlimit", f"--pid={pid}", soft], check=True)
        try:
            with contextlib.ExitStack() as stack:
                for _ in range(30):  # 10 take the last descriptors, the rest meet EMFILE
                    stack.enter_context(socket.create_connection(("127.0.0.1", gw.port),
                                                                 timeout=5))
                time.sleep(0.5)
                for _ in range(12):
                    assert refused_at_once(gw.port)
                before = cpu_seconds(pid)
                time.sleep(1.0)
                assert cpu_seconds(pid) - before < 0.3  # idle, not spinning on accept
                assert gw.process.running
        finally:
            subprocess.run(["prlimit", f"--pid={pid}", "--nofile=4096:"], check=True)
        wait_until(lambda: served(gw), 5, what="served after EMFILE")


def test_redirector_has_a_deadline_and_shares_the_cap(tmp_path: Path) -> None:
    """http_redirect_addr: a silent connection is aborted at the setup deadline
    (timeout_read 2 s here), and its connections count against the same cap."""
    redirect_port = free_port()
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "max_connections": 10, "timeout_read": "2s", "policy": policy(up.url),
            "http_redirect_addr": f"127.0.0.1:{redirect_port}"}) as gw:
        with socket.create_connection(("127.0.0.1", redirect_port), timeout=5) as silent:
            started = time.monotonic()
            seconds, _ = until_closed(silent, 6.0, started)
        assert 1.7 < seconds < 3.5, seconds
        with held(redirect_port, 10):
            assert refused_at_once(gw.port)
        wait_until(lambda: served(gw), 5, what="served once the redirector's are gone")
