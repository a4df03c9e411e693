"""The databroker over gRPC: each RPC runs the matching RecordStore method of this process's
store (memory or kvstore) on the reactor thread, through the bridge.

Failures keep their meaning across the wire: ``StorageUnavailable`` becomes
``UNAVAILABLE`` (the client answers 503, never a decision on missing data), a record
written with another secret ``FAILED_PRECONDITION``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import grpc

from gateway.databroker.cipher import RecordKeyError
from gateway.databroker.records import RecordStore, StorageUnavailable
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.change_signal import ChangeSignal
from gateway.rpc.databroker_wire import changes_to_pb, record_to_pb
from gateway.rpc.protos import databroker_pb2 as pb
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.trace_context import ServerTracing

SERVICE_NAME = "gateway.databroker.v1.Databroker"
WATCH_INTERVAL = 0.25
SIGNAL_WAIT = 5.0  # with a signal, still look every so often (a missed wake-up)
MAX_WATCH_ROUNDS = 1_000_000


class DatabrokerServicer(pb_grpc.DatabrokerServicer):
    def __init__(self, bridge: AsyncioThread, store: RecordStore,
                 watch_seconds: float = 300.0, signal: ChangeSignal | None = None,
                 tracing: ServerTracing | None = None) -> None:
        self.bridge = bridge
        self.store = store
        self.tracing = tracing or ServerTracing()
        # Without a signal (tests), each stream polls the store every WATCH_INTERVAL.
        self.signal = signal
        # A change stream ends after this long (grpc_server_max_connection_age): the
        # client opens another, perhaps to another databroker.
        self.watch_seconds = watch_seconds

    async def _run(self, context: Any, fn: Callable[[], Any], method: str = "") -> Any:
        """``fn`` on the reactor; with ``method``, under a server span of the caller's
        trace when it sent one (trace_context)."""
        if method:
            metadata, work = context.invocation_metadata(), fn
            fn = lambda: self.tracing.traced(  # noqa: E731
                metadata, f"grpc {SERVICE_NAME}/{method}", work)
        try:
            return await self.bridge.in_reactor(fn)
        except StorageUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"databroker storage unavailable: {exc}")
        except RecordKeyError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))

    async def Get(self, request: pb.GetRequest, context: Any) -> pb.GetResponse:
        record = await self._run(context, lambda: self.store.get(request.type, request.id),
                                 "Get")
        if record is None:
            return pb.GetResponse()
        return pb.GetResponse(record=record_to_pb(record))

    def _written(self) -> None:
        if self.signal is not None:
            self.bridge.report(self.signal.kick)

    async def Put(self, request: pb.PutRequest, context: Any) -> pb.PutResponse:
        record = await self._run(context, lambda: self.store.put(
            request.type, request.id, request.data, request.expires_at, request.revive), "Put")
        self._written()
        if record is None:
            return pb.PutResponse()
        return pb.PutResponse(record=record_to_pb(record))

    async def Delete(self, request: pb.DeleteRequest, context: Any) -> pb.DeleteResponse:
        await self._run(context, lambda: self.store.delete(request.type, request.id), "Delete")
        self._written()
        return pb.DeleteResponse()

    async def Query(self, request: pb.QueryRequest, context: Any) -> pb.QueryResponse:
        records = await self._run(context, lambda: self.store.query(request.type), "Query")
        return pb.QueryResponse(records=[record_to_pb(r) for r in records])

    async def Sync(self, request: pb.SyncRequest, context: Any) -> pb.Changes:
        changes = await self._run(context, lambda: self.store.sync(request.since), "Sync")
        return changes_to_pb(changes)

    async def Watch(self, request: pb.SyncRequest, context: Any) -> AsyncIterator[pb.Changes]:
        """Batches after ``since`` as they appear; ``since`` < 0 starts from now (the
        first batch is then the store's current version, with no records). Ends after
        ``watch_seconds``: the client opens another (perhaps to another databroker)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.watch_seconds
        wait = SIGNAL_WAIT if self.signal is not None else WATCH_INTERVAL
        woken = asyncio.Event()
        if self.signal is not None:
            self.signal.add(woken)
        since = request.since
        try:
            for _ in range(MAX_WATCH_ROUNDS):
                changes = await self._run(context, partial(self.store.sync, since))
                if changes.reset or changes.records or changes.version != since:
                    yield changes_to_pb(changes)
                    since = changes.version
                    if changes.more:
                        continue
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(wait, remaining))
                woken.clear()
        finally:
            if self.signal is not None:
                self.signal.discard(woken)

    async def Sweep(self, request: pb.SweepRequest, context: Any) -> pb.SweepResponse:
        dropped = await self._run(context, lambda: self.store.sweep(request.now), "Sweep")
        return pb.SweepResponse(dropped=dropped)

    async def Lease(self, request: pb.LeaseRequest, context: Any) -> pb.LeaseResponse:
        held = await self._run(context, lambda: self.store.lease(
            request.name, request.holder, request.seconds), "Lease")
        return pb.LeaseResponse(held=held)

    async def Release(self, request: pb.ReleaseRequest, context: Any) -> pb.ReleaseResponse:
        await self._run(context, lambda: self.store.release(request.name, request.holder),
                        "Release")
        return pb.ReleaseResponse()
