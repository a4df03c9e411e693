"""Fixtures of the gRPC tests: the bridge's thread with the test thread as its reactor,
and the log events seen meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from twisted.logger import globalLogPublisher

from gateway.rpc.aio_thread import AsyncioThread

from .loopback import QueueReactor


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Iterator[tuple[AsyncioThread, QueueReactor]]:
    reactor = QueueReactor()
    bridge = AsyncioThread(reactor, name=f"{request.module.__name__.rsplit('.', 1)[-1]}")
    bridge.start()
    yield bridge, reactor
    bridge.stop()


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(seen.append)
    yield seen
    globalLogPublisher.removeObserver(seen.append)
