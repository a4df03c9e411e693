"""The one bridge between the reactor and gRPC: an asyncio loop in one dedicated thread.

The data plane stays on Twisted's epoll reactor (an asyncio reactor costs a third of
its throughput), so ``grpc.aio`` gets a loop of its own in a thread named
``grpc-aio``. Crossing goes through here only, both ways:

- reactor → loop: ``submit(factory)`` runs ``factory()`` (a coroutine) on the loop and
  answers with a Deferred fired on the reactor thread (``reactor.callFromThread``);
  cancelling the Deferred cancels the coroutine.
- loop → reactor: ``await in_reactor(fn)`` runs ``fn`` on the reactor thread (where the
  record stores live: they are not thread-safe) and awaits its result, Deferred or not.

All-in-one mode never makes one of these: no thread is started there.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from twisted.application.service import MultiService
from twisted.internet.defer import CancelledError, Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

T = TypeVar("T")

START_SECONDS = 5.0
STOP_SECONDS = 5.0


class BridgeStopped(Exception):
    """The loop thread is not running: nothing can be sent over gRPC now."""


class AsyncioThread:
    """An asyncio event loop running in one daemon thread, started and stopped from the
    reactor thread."""

    def __init__(self, reactor: Any, name: str = "grpc-aio") -> None:
        self.reactor = reactor
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.loop is not None and self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread and wait (bounded) until its loop runs."""
        if self.running:
            return
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(
                        asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        thread = threading.Thread(target=run, name=self.name, daemon=True)
        thread.start()
        if not ready.wait(START_SECONDS):
            raise RuntimeError(f"{self.name}: the asyncio loop did not start")
        self.loop, self._thread = loop, thread

    def stop(self, before: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``before()`` on the loop (closing servers and channels), then stop the loop
        and join the thread; both bounded by ``STOP_SECONDS``."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        self.loop = None
        if before is not None and thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(before(), loop)
            try:
                future.result(STOP_SECONDS)
            except Exception as exc:
                log.warn("{name}: shutdown step failed: {error}", name=self.name,
                         error=repr(exc))
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_SECONDS)
        self._thread = None

    # -- reactor → loop

    def run(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        """Run ``factory()`` on the loop and block this thread for its result, at most
        ``timeout`` seconds: for start-up and shutdown only (binding a port, closing a
        server), never on a request's path."""
        loop = self.loop
        if loop is None:
            raise BridgeStopped(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(factory(), loop).result(timeout)

    def submit(self, factory: Callable[[], Coroutine[Any, Any, T]]) -> Deferred[T]:
        """Run the coroutine ``factory()`` makes on the loop; its result on the reactor."""
        loop = self.loop
        if loop is None:
            return _failed(BridgeStopped(f"{self.name} is not running"))
        future: Future[T] = asyncio.run_coroutine_threadsafe(factory(), loop)

        def cancel(_: Deferred[T]) -> None:
            future.cancel()

        result: Deferred[T] = Deferred(cancel)

        def deliver(done: Future[T]) -> None:
            self.reactor.callFromThread(_fire, result, done)

        future.add_done_callback(deliver)
        return result

    # -- loop → reactor

    async def in_reactor(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the reactor thread and await its (possibly deferred) result.
        Called from a coroutine running on this loop."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()

        def settle(outcome: Any) -> None:
            if waiter.done():
                return
            if isinstance(outcome, Failure):
                waiter.set_exception(outcome.value or Exception(outcome.getErrorMessage()))
            else:
                waiter.set_result(outcome)

        def run() -> None:
            d = maybeDeferred(fn)
            d.addBoth(lambda outcome: loop.call_soon_threadsafe(settle, outcome))

        self.reactor.callFromThread(run)
        return await waiter

    def report(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """Call ``fn`` on the reactor thread (logging from the loop: twisted.logger's
        observers run on the reactor)."""
        self.reactor.callFromThread(fn, *args, **kwargs)


class BridgeService(MultiService):
    """The loop thread as the parent of the services that use it (the databroker's gRPC
    server, a databroker on a remote store): the thread starts before them and stops
    only once each of them has finished stopping (pending writes drained, the server
    closed), which a sibling in the root MultiService could not wait for."""

    def __init__(self, bridge: AsyncioThread) -> None:
        MultiService.__init__(self)
        self.bridge = bridge

    def startService(self) -> None:
        self.bridge.start()
        MultiService.startService(self)

    def stopService(self) -> Deferred[None]:
        d: Deferred[Any] = MultiService.stopService(self)

        def stop_thread(result: object) -> None:
            self.bridge.stop()
        return d.addBoth(stop_thread)


def _fire(result: Deferred[T], done: Future[T]) -> None:
    if result.called:  # cancelled on the reactor meanwhile
        return
    if done.cancelled():
        result.errback(Failure(CancelledError()))
        return
    exc = done.exception()
    if exc is not None:
        result.errback(Failure(exc))
    else:
        result.callback(done.result())


def _failed(exc: Exception) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.errback(Failure(exc))
    return d
