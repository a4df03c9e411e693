"""The reactor↔asyncio bridge: results come back as Deferreds fired on the reactor thread,
calls into the reactor from the loop are awaited, cancellation crosses over."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred, succeed

from gateway.rpc.aio_thread import AsyncioThread, BridgeStopped

from .loopback import QueueReactor


@pytest.fixture
def bridge() -> Iterator[tuple[AsyncioThread, QueueReactor]]:
    reactor = QueueReactor()
    thread = AsyncioThread(reactor, name="test-aio")
    thread.start()
    yield thread, reactor
    thread.stop()


def test_a_coroutine_result_fires_a_deferred_on_the_reactor_thread(bridge: Any) -> None:
    thread, reactor = bridge
    seen: list[str] = []

    async def work() -> int:
        seen.append(threading.current_thread().name)
        return 42

    d = thread.submit(work)
    fired_in: list[str] = []
    d.addCallback(lambda v: fired_in.append(threading.current_thread().name) or v)
    assert reactor.run_until(d) == [42]
    assert seen == ["test-aio"]
    assert fired_in == [threading.current_thread().name]


def test_an_exception_becomes_an_errback(bridge: Any) -> None:
    thread, reactor = bridge

    async def fail() -> None:
        raise ValueError("nope")

    [failure] = reactor.run_until(thread.submit(fail))
    assert failure.check(ValueError)


def test_the_loop_can_await_the_reactor(bridge: Any) -> None:
    thread, reactor = bridge
    ran_in: list[str] = []

    def on_reactor() -> Deferred[str]:
        ran_in.append(threading.current_thread().name)
        return succeed("from the reactor")

    async def work() -> str:
        value: str = await thread.in_reactor(on_reactor)
        return value + "!"

    assert reactor.run_until(thread.submit(work)) == ["from the reactor!"]
    assert ran_in == [threading.current_thread().name]


def test_a_reactor_failure_is_raised_in_the_loop(bridge: Any) -> None:
    thread, reactor = bridge

    def broken() -> None:
        raise KeyError("gone")

    async def work() -> str:
        try:
            await thread.in_reactor(broken)
        except KeyError:
            return "caught"
        return "not raised"

    assert reactor.run_until(thread.submit(work)) == ["caught"]


def test_cancelling_the_deferred_cancels_the_coroutine(bridge: Any) -> None:
    thread, reactor = bridge
    started = threading.Event()
    cancelled = threading.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    d = thread.submit(slow)
    assert started.wait(5)
    outcome: list[Any] = []
    d.addErrback(outcome.append)
    d.cancel()
    assert outcome and outcome[0].check(CancelledError)
    assert cancelled.wait(5)
    reactor.run_one()  # the late delivery finds the Deferred already fired


def test_a_stopped_bridge_fails_at_once() -> None:
    reactor = QueueReactor()
    thread = AsyncioThread(reactor)
    thread.start()
    thread.stop()
    assert not thread.running
    outcome: list[Any] = []

    async def work() -> None:
        return None

    thread.submit(work).addErrback(outcome.append)
    assert outcome and outcome[0].check(BridgeStopped)


def test_stop_runs_the_shutdown_step_on_the_loop() -> None:
    reactor = QueueReactor()
    thread = AsyncioThread(reactor, name="stopping-aio")
    thread.start()
    ran_in: list[str] = []

    async def closing() -> None:
        ran_in.append(threading.current_thread().name)

    thread.stop(closing)
    assert ran_in == ["stopping-aio"]


def test_the_thread_outlives_the_services_under_it() -> None:
    """BridgeService stops its thread only once every service under it has stopped
    (a databroker draining writes through the thread, say)."""
    from twisted.application.service import Service

    from gateway.rpc.aio_thread import BridgeService

    class Draining(Service):
        def __init__(self) -> None:
            self.done: Deferred[None] = Deferred()

        def stopService(self) -> Deferred[None]:
            Service.stopService(self)
            return self.done

    thread = AsyncioThread(QueueReactor(), name="parent-aio")
    parent = BridgeService(thread)
    child = Draining()
    child.setServiceParent(parent)
    parent.startService()
    assert thread.running and child.running
    stopped = parent.stopService()
    assert thread.running, "stopped before the service under it finished"
    child.done.callback(None)
    assert not thread.running
    assert stopped.called
