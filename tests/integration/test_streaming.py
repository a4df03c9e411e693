"""Bodies stream both ways in bounded memory; a client that leaves aborts the upstream."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.processes import wait_until
from tests.support.rawhttp import read_until

pytestmark = pytest.mark.integration
GIB = 1 << 30
CHUNK = 1 << 20


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Env:
    gw: Daemon
    up: Upstream


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("streaming")
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp, name="bulk", quiet=True))
        gw = stack.enter_context(gateway_daemon(tmp, {"policy": [{
            "from": "https://bulk.test", "to": up.url, "timeout": "60s",
            "allow_public_unauthenticated_access": True}]}))
        e = Env()
        e.gw, e.up = gw, up
        yield e


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))


def test_gib_download_in_bounded_memory(env: Env) -> None:
    """1 GiB from the upstream reaches a slow-ish client intact; RSS grows < 64 MiB."""
    assert env.gw.process.pid is not None
    before = rss_kib(env.gw.process.pid)
    sampler = RssSampler(env.gw.process.pid)
    sampler.start()
    digest = hashlib.sha256()
    received = 0
    with socket.create_connection(("127.0.0.1", env.gw.port), timeout=30) as sock:
        sock.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: bulk.test\r\n\r\n" % GIB)
        head, first = read_until(sock, b"\r\n\r\n").split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200")
        digest.update(first)
        received = len(first)
        deadline = time.monotonic() + 120
        while received < GIB and time.monotonic() < deadline:
            data = sock.recv(CHUNK)
            if not data:
                break
            digest.update(data)
            received += len(data)
    sampler.done.set()
    sampler.join()
    assert received == GIB
    pattern = bytes(range(256)) * (CHUNK // 256)
    expected = hashlib.sha256()
    for _ in range(GIB // CHUNK):
        expected.update(pattern)
    assert digest.hexdigest() == expected.hexdigest()
    assert sampler.peak - before < 64 * 1024, (before, sampler.peak)


def test_gib_upload_in_bounded_memory(env: Env) -> None:
    """1 GiB uploaded with Content-Length reaches the upstream intact, RSS < +64 MiB."""
    assert env.gw.process.pid is not None
    before = rss_kib(env.gw.process.pid)
    sampler = RssSampler(env.gw.process.pid)
    sampler.start()
    block = bytes(range(256)) * (CHUNK // 256)
    expected = hashlib.sha256()
    with socket.create_connection(("127.0.0.1", env.gw.port), timeout=60) as sock:
        sock.sendall(b"POST /upload HTTP/1.1\r\nHost: bulk.test\r\nContent-Length: %d\r\n\r\n"
                     % GIB)
        for _ in range(GIB // CHUNK):
            sock.sendall(block)
            expected.update(block)
        reply = read_until(sock, b"}\n")
    sampler.done.set()
    sampler.join()
    assert b"HTTP/1.1 200" in reply
    assert (b'"body_length": %d' % GIB) in reply
    assert expected.hexdigest().encode() in reply
    assert sampler.peak - before < 64 * 1024, (before, sampler.peak)


def test_client_disconnect_aborts_upstream(env: Env, tmp_path: Path) -> None:
    """A client leaving mid-response closes the upstream connection too."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    closed = threading.Event()

    def upstream() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000)
            conn.settimeout(10)
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            closed.set()

    thread = threading.Thread(target=upstream, daemon=True)
    thread.start()
    config = {"policy": [{"from": "https://slow.test", "to": f"http://127.0.0.1:{port}",
                          "allow_public_unauthenticated_access": True}]}
    with gateway_daemon(tmp_path, config) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: slow.test\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        wait_until(closed.is_set, 5, what="upstream connection closed")
    listener.close()


def test_write_timeout_cuts_off_a_stalled_reader(tmp_path: Path) -> None:
    """A client that stops reading a large response is dropped after timeout_write."""
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
        "timeout_write": "1s", "policy": [{
            "from": "https://bulk.test", "to": up.url, "timeout": "1s",
            "allow_public_unauthenticated_access": True}]}) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=15) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: bulk.test\r\n\r\n" % (256 << 20))
            time.sleep(4)  # read nothing: the gateway's buffers fill, its writes block
            received = 0
            try:
                while True:
                    data = sock.recv(1 << 20)
                    if not data:
                        break
                    received += len(data)
            except ConnectionResetError:
                pass
        assert received < (256 << 20)
        event = gw.wait_for_event(lambda e: e.get("namespace") == "gateway.access"
                                  and e.get("path") == f"/bytes/{256 << 20}")
        assert event["status"] == 200
        assert event["detail"] == "timeout_write: the client stopped reading"
