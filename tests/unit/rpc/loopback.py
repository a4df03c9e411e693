"""A databroker gRPC server and remote stores in this test process, on 127.0.0.1: the
bridge's thread runs grpc.aio, the test thread plays the reactor (QueueReactor)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gateway.config.settings import Options
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.databroker_server import SERVICE_NAME, DatabrokerServicer
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService

SECRET = b"s" * 32


class QueueReactor:
    """callFromThread queues the call; the test thread runs them (it is the reactor)."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] \
            = queue.Queue()
        self.thread = threading.current_thread()
        self.now = 1_000.0
        self.clock = Clock()  # callLater: the test advances it
        self.callLater = self.clock.callLater

    def seconds(self) -> float:
        return self.now

    def callFromThread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.calls.put((fn, args, kwargs))

    def run_one(self, timeout: float = 10.0) -> None:
        fn, args, kwargs = self.calls.get(timeout=timeout)
        fn(*args, **kwargs)

    def drain(self) -> None:
        while True:
            try:
                fn, args, kwargs = self.calls.get_nowait()
            except queue.Empty:
                return
            fn(*args, **kwargs)

    def wait(self, d: Deferred[Any], timeout: float = 10.0) -> Any:
        """The Deferred's result (a Failure for an error), pumping calls meanwhile."""
        outcome: list[Any] = []
        d.addBoth(outcome.append)
        for _ in range(1000):
            if outcome:
                return outcome[0]
            self.run_one(timeout)
        raise AssertionError("the Deferred never fired")

    def run_until(self, d: Deferred[Any], timeout: float = 10.0) -> list[Any]:
        return [self.wait(d, timeout)]


def server_snapshot(secret: bytes = SECRET, port: int = 0,
                    certificates: tuple[tuple[bytes, bytes], ...] = (),
                    **settings: Any) -> Any:
    options = Options(services="databroker", grpc_address=f"127.0.0.1:{port}",
                      grpc_insecure=not certificates, **settings)
    return SimpleNamespace(options=options,
                           material=SimpleNamespace(shared_secret=secret,
                                                    certificates=certificates))


def start_server(bridge: AsyncioThread, reactor: QueueReactor, secret: bytes = SECRET,
                 port: int = 0, certificates: tuple[tuple[bytes, bytes], ...] = (),
                 signal: Any = None, **settings: Any
                 ) -> tuple[GrpcServerService, MemoryRecordStore]:
    store = MemoryRecordStore(reactor.seconds)
    servicer = DatabrokerServicer(bridge, store, signal=signal)
    snapshot = server_snapshot(secret, port, certificates, **settings)
    service = GrpcServerService(bridge, snapshot, [
        (servicer, pb_grpc.add_DatabrokerServicer_to_server, SERVICE_NAME)])
    service.startService()
    return service, store
