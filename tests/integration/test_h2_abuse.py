"""HTTP/2 abuse (issue 12) through the real daemon on loopback, from a raw-frame client:
the GOAWAY arrives with the limit's code, the gateway logs the cut, the upstream never
sees the requests it should not, and a normal HTTP/2 client on another connection is
served all along. Each test has a daemon of its own (an attack's log lines, up to one
per stream, must not push another test's out of the log tail that tests read)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import RstStreamFrame

from gateway.dataplane.http2 import guard as h2_guard
from tests.support import h2frames as f
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.peers import Upstream, echo_upstream

pytestmark = pytest.mark.integration
HOST = b"app.test"


@dataclass
class Stack:
    gateway: Daemon
    upstream: Upstream

    def upstream_saw(self, path: str) -> int:
        """Requests for ``path`` in the echo upstream's access log."""
        return self.upstream.process.log_text().count(f'"GET {path} HTTP/1.1"')


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "codec_type": "http2", "timeout_write": "2s",
            "policy": [{"from": "https://app.test", "to": up.url, "timeout": "2s",
                        "allow_public_unauthenticated_access": True}]}) as gw:
        yield Stack(gw, up)


@dataclass
class NormalClient:
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def normal_client(port: int) -> Iterator[NormalClient]:
    """A well-behaved HTTP/2 client requesting ``/`` in a loop on its own connection
    while the block runs; at least one answer after the block is waited for."""
    seen = NormalClient()
    stop = threading.Event()

    def run() -> None:
        try:
            with H2Client(port, timeout=10) as client:
                for _ in range(100_000):
                    seen.statuses.append(client.request("GET", "/", "app.test").status)
                    if stop.is_set():
                        return
                    time.sleep(0.02)
        except Exception as exc:  # reported by the test
            seen.errors.append(repr(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive(), "the normal client hung"
    assert seen.errors == [] and seen.statuses and set(seen.statuses) == {200}, seen


def attack(client: f.FrameClient, batches: Iterator[bytes], seconds: float = 10.0) -> None:
    """Send batches until the gateway closes the connection, GOAWAY comes, or time is up."""
    deadline = time.monotonic() + seconds
    for batch in batches:
        if time.monotonic() > deadline or not client.send(batch):
            return
        client.poll()
        if client.closed or f.goaway_in(client.frames) is not None:
            return


def assert_cut(client: f.FrameClient, stack: Stack, limit: str, code: ErrorCodes) -> None:
    goaway = client.goaway(timeout=10)
    assert goaway is not None, "no GOAWAY"
    assert ErrorCodes(goaway.error_code) == code
    assert client.wait_closed(timeout=10), "the connection stayed open"
    cut = stack.gateway.wait_for_event(lambda e: e.get("limit") == limit, what=limit)
    assert cut["client"] == "127.0.0.1"


def test_rapid_reset(stack: Stack) -> None:
    """Streams opened and reset in a loop: cut within the reset budget; the upstream saw
    at most that many of the requests."""
    frames = f.Frames()

    def batches() -> Iterator[bytes]:
        sid = 1
        for _ in range(200):
            batch = b""
            for _ in range(50):
                batch += frames.headers(sid, f.request_headers(b"/rapid", HOST)) + f.rst(sid)
                sid += 2
            yield batch

    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        client.send(f.hello())
        attack(client, batches())
        assert_cut(client, stack, "rapid_reset", ErrorCodes.ENHANCE_YOUR_CALM)
    time.sleep(0.5)  # requests already on their way upstream arrive
    assert stack.upstream_saw("/rapid") <= h2_guard.RESET_BURST


def test_continuation_flood(stack: Stack) -> None:
    """A header block that never ends: cut by its size, long before h2's own limit."""
    frames = f.Frames()
    first = frames.headers(1, f.request_headers(b"/continued", HOST), end_headers=False)
    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        client.send(f.hello() + first)
        attack(client, iter([f.continuation(1, b"\0" * 16384)] * 200))
        assert_cut(client, stack, "header_block_bytes", ErrorCodes.ENHANCE_YOUR_CALM)
    assert stack.upstream_saw("/continued") == 0


def test_hpack_bomb(stack: Stack) -> None:
    """One 4 KiB dynamic-table entry referenced a thousand times in one header block."""
    frames = f.Frames()
    seed = frames.headers(1, [*f.request_headers(b"/ping", HOST), (b"x-bomb", b"b" * 4000)])
    bomb = f.Frames.headers_block(3, b"\xbe" * 1000)  # the newest entry: index 62
    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        client.send(f.hello() + seed + bomb)
        assert_cut(client, stack, "max_header_list_size", ErrorCodes.ENHANCE_YOUR_CALM)
    assert stack.upstream_saw("/ping") == 0  # answered by the gateway itself


@pytest.mark.parametrize("kind", ["ping", "settings", "window_update"])
def test_control_flood(stack: Stack, kind: str) -> None:
    frame = {"ping": f.ping(), "settings": f.settings(),
             "window_update": f.window_update(0, 1)}[kind]
    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        client.send(f.hello())
        attack(client, iter([frame * 500] * 100))
        goaway = client.goaway()
        assert goaway is not None and goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert client.wait_closed()
    stack.gateway.wait_for_event(lambda e: e.get("limit") == "control_flood")


def test_streams_past_the_advertised_limit(stack: Stack) -> None:
    """Stream 129 is refused with REFUSED_STREAM; a client that keeps opening streams
    anyway is cut (PROTOCOL_ERROR); the upstream saw at most the 128 allowed."""
    frames = f.Frames()
    allowed = b"".join(frames.headers(2 * i + 1, f.request_headers(b"/delay/1", HOST))
                       for i in range(128))
    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        client.send(f.hello() + allowed + frames.headers(257, f.request_headers(b"/x", HOST)))
        assert client.wait_for(lambda got: any(
            isinstance(x, RstStreamFrame) and x.stream_id == 257 for x in got))
        refused = [x for x in client.frames if isinstance(x, RstStreamFrame)]
        assert [(x.stream_id, x.error_code) for x in refused] == [
            (257, ErrorCodes.REFUSED_STREAM)]
        client.send(b"".join(frames.headers(259 + 2 * i, f.request_headers(b"/x", HOST))
                             for i in range(h2_guard.REFUSED_BURST + 1)))
        assert_cut(client, stack, "max_concurrent_streams", ErrorCodes.PROTOCOL_ERROR)
    time.sleep(1.5)  # the /delay/1 requests that reached the upstream are answered
    assert stack.upstream_saw("/delay/1") <= 128
    assert stack.upstream_saw("/x") == 0


def test_zero_window_streams_are_reset(stack: Stack) -> None:
    """INITIAL_WINDOW_SIZE 0 and four large downloads: after timeout_write (2 s here)
    without window, each stream is reset (CANCEL) and the connection stays open."""
    frames = f.Frames()
    streams = [1, 3, 5, 7]
    requests = b"".join(frames.headers(sid, f.request_headers(b"/bytes/50000000", HOST))
                        for sid in streams)
    with normal_client(stack.gateway.port), f.FrameClient(stack.gateway.port) as client:
        started = time.monotonic()
        client.send(f.hello(INITIAL_WINDOW_SIZE=0) + requests)

        def all_reset(got: list[Any]) -> bool:
            return sorted(x.stream_id for x in got if isinstance(x, RstStreamFrame)) == streams

        assert client.wait_for(all_reset, timeout=10)
        assert time.monotonic() - started > 1.5
        assert all(x.error_code == ErrorCodes.CANCEL for x in client.frames
                   if isinstance(x, RstStreamFrame))
        assert f.goaway_in(client.frames) is None and not client.closed
    events = stack.gateway.log_events()
    stalled = [e for e in events if "no window" in str(e.get("detail", ""))]
    assert len(stalled) == len(streams), stalled


def test_a_client_cut_again_and_again_is_refused_for_a_while(stack: Stack) -> None:
    """An attacker reconnects after every cut: after three cuts within 30 s its address
    (127.0.0.2 here) is refused at the accept for PENALTY seconds (each connection held
    unread for a while, then reset), with one warning,
    while a client at another address (127.0.0.1) connects and is served meanwhile."""
    from gateway.dataplane import penalty
    from gateway.dataplane.listeners import tarpit
    frames = f.Frames()
    pairs = b"".join(frames.headers(2 * i + 1, f.request_headers(b"/rapid", HOST))
                     + f.rst(2 * i + 1) for i in range(h2_guard.RESETS_PER_READ + 1))
    for _ in range(penalty.STRIKES):
        with f.FrameClient(stack.gateway.port, source="127.0.0.2") as client:
            client.send(f.hello() + pairs)
            assert client.goaway() is not None and client.wait_closed()
    refused_at = time.monotonic()
    warning = stack.gateway.wait_for_event(lambda e: e.get("penalty") is not None,
                                           what="the penalty warning")
    assert (warning["client"], warning["penalty"]) == ("127.0.0.2", penalty.PENALTY)
    with f.FrameClient(stack.gateway.port, source="127.0.0.2") as client:
        client.send(f.hello())  # held unread at the accept (tarpit), then reset
        assert not client.wait_closed(timeout=2)
        assert client.wait_closed(timeout=tarpit.HOLD_SECONDS + 5)
        assert client.frames == []  # not a byte of HTTP/2
    with H2Client(stack.gateway.port, timeout=10) as normal:  # a new connection
        assert normal.request("GET", "/", "app.test").status == 200
    time.sleep(max(0.0, refused_at + penalty.PENALTY + 0.5 - time.monotonic()))
    with H2Client(stack.gateway.port, timeout=10, source="127.0.0.2") as client:
        assert client.request("GET", "/", "app.test").status == 200
    assert stack.upstream_saw("/rapid") == 0
