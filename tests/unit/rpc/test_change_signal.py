"""The databroker's change streams wake when its own follower sees a new version (no
polling of the store per stream), and writes over gRPC make that follower poll at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.databroker.records import SESSION
from gateway.rpc.change_signal import ChangeSignal
from gateway.rpc.databroker_client import RemoteRecordStore

from .loopback import SECRET, QueueReactor, start_server


class FakeFollower:
    """What ChangeSignal uses of ChangeFollower: the version, on_ok and kick."""

    def __init__(self) -> None:
        self.version = 0
        self.kicks = 0
        self.callbacks: list[Callable[[], None]] = []

    def on_ok(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def kick(self) -> None:
        self.kicks += 1

    def polled(self, version: int) -> None:
        self.version = version
        for callback in self.callbacks:
            callback()


def _pump_until(reactor: QueueReactor, done: Callable[[], bool], seconds: float) -> float:
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < seconds, "not woken in time"
        reactor.run_one(seconds)
    return time.monotonic() - started


def test_streams_wake_on_the_followers_new_version(rig: Any) -> None:
    bridge, reactor = rig
    follower = FakeFollower()
    signal = ChangeSignal(follower)  # type: ignore[arg-type]
    server, store = start_server(bridge, reactor, signal=signal)
    client = RemoteRecordStore(bridge, (f"http://127.0.0.1:{server.port}",), SECRET, 5.0)
    rang: list[int] = []
    try:
        client.watch(lambda: rang.append(1))
        _pump_until(reactor, lambda: bool(rang), 5)  # the first batch: the version now
        rang.clear()
        record = store.put(SESSION, "s1", b"{}").result  # type: ignore[attr-defined]
        reactor.drain()
        follower.polled(record.version)  # what the databroker's own poll would see
        waited = _pump_until(reactor, lambda: bool(rang), 4)
        assert waited < 1.0  # woken, not found by the 5 s safety look
        reactor.wait(client.put(SESSION, "s2", b"{}"))
        reactor.drain()
        assert follower.kicks >= 1  # a write over gRPC makes the follower poll now
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())
