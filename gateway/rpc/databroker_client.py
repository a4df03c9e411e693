"""A RecordStore whose records live in a databroker process, reached over gRPC.

It answers the same protocol as the memory and kvstore stores (``backend = "remote"``),
so sessions, users and directory data work unchanged in a process that does not run the
databroker. Every call carries a shared-secret token and has ``grpc_client_timeout`` in
all; with several ``databroker_service_urls`` a URL that does not answer is skipped
(client-side failover) and the one that answered is tried first next time. grpc's own
reconnect backoff (``channels``) brings a restarted databroker back without a restart
here. Any failure is ``StorageUnavailable``: the caller answers 503, never "allowed".

``watch`` follows the databroker's change stream and calls back on each batch, so this
process syncs at once rather than at its next poll.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.databroker.records import Changes, Record, StorageUnavailable
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.channels import ServiceTarget
from gateway.rpc.databroker_wire import changes_from_pb, record_from_pb
from gateway.rpc.failover import FailoverClient, Unavailable
from gateway.rpc.protos import databroker_pb2 as pb
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.trace_context import Metadata, client_call, end

log = Logger(namespace="gateway.rpc")

T = TypeVar("T")

SERVICE = "gateway.databroker.v1.Databroker"
WATCH_BACKOFF = (0.2, 5.0)


class RemoteRecordStore:
    backend = "remote"

    def __init__(self, bridge: AsyncioThread, urls: tuple[str, ...], secret: bytes,
                 timeout: float, ca: bytes | None = None, override_name: str = "",
                 clock: Callable[[], float] = time.monotonic,
                 service: str = "gateway", round_robin: bool = True) -> None:
        self.bridge = bridge
        self.calls = FailoverClient(bridge, "databroker", SERVICE, pb_grpc.DatabrokerStub,
                                    urls, secret, timeout, ca, override_name, round_robin,
                                    process=service, clock=clock)
        self._watching: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def targets(self) -> tuple[ServiceTarget, ...]:
        return self.calls.targets

    @property
    def preferred(self) -> int:
        """The URL tried first (the one that answered last)."""
        return self.calls.preferred

    # -- RecordStore

    def get(self, type: str, id: str) -> Deferred[Record | None]:
        async def call(md: Metadata) -> Record | None:
            answer = await self._invoke(md, "Get", pb.GetRequest(type=type, id=id))
            return record_from_pb(answer.record) if answer.HasField("record") else None
        return self._submit(call, "Get")

    def put(self, type: str, id: str, data: bytes, expires_at: float = 0.0,
            revive: bool = True) -> Deferred[Record | None]:
        async def call(md: Metadata) -> Record | None:
            answer = await self._invoke(md, "Put", pb.PutRequest(
                type=type, id=id, data=data, expires_at=expires_at, revive=revive))
            return record_from_pb(answer.record) if answer.HasField("record") else None
        return self._submit(call, "Put")

    def delete(self, type: str, id: str) -> Deferred[None]:
        async def call(md: Metadata) -> None:
            await self._invoke(md, "Delete", pb.DeleteRequest(type=type, id=id))
        return self._submit(call, "Delete")

    def query(self, type: str) -> Deferred[list[Record]]:
        async def call(md: Metadata) -> list[Record]:
            answer = await self._invoke(md, "Query", pb.QueryRequest(type=type))
            return [record_from_pb(r) for r in answer.records]
        return self._submit(call, "Query")

    def sync(self, since: int) -> Deferred[Changes]:
        async def call(md: Metadata) -> Changes:
            return changes_from_pb(await self._invoke(md, "Sync", pb.SyncRequest(since=since)))
        return self._submit(call, "Sync")

    def sweep(self, now: float) -> Deferred[int]:
        async def call(md: Metadata) -> int:
            return int((await self._invoke(md, "Sweep", pb.SweepRequest(now=now))).dropped)
        return self._submit(call, "Sweep")

    def lease(self, name: str, holder: str, seconds: float) -> Deferred[bool]:
        async def call(md: Metadata) -> bool:
            answer = await self._invoke(md, "Lease", pb.LeaseRequest(
                name=name, holder=holder, seconds=seconds))
            return bool(answer.held)
        return self._submit(call, "Lease")

    def release(self, name: str, holder: str) -> Deferred[None]:
        async def call(md: Metadata) -> None:
            await self._invoke(md, "Release", pb.ReleaseRequest(name=name, holder=holder))
        return self._submit(call, "Release")

    def close(self) -> Deferred[None]:
        self._closed = True
        return self.bridge.submit(self._close)

    # -- the change stream

    def watch(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` (on the reactor) after each batch of the change stream,
        reconnecting with backoff until ``close``."""
        loop = self.bridge.loop
        if loop is None or self._watching is not None:
            return

        def begin() -> None:
            self._watching = loop.create_task(self._watch(changed))
        loop.call_soon_threadsafe(begin)

    async def _watch(self, changed: Callable[[], None]) -> None:
        delay = WATCH_BACKOFF[0]
        while not self._closed:
            index = self.calls.preferred
            try:
                stream = self.calls.stub(index).Watch(
                    pb.SyncRequest(since=-1), metadata=self.calls.credentials.metadata())
                async for _batch in stream:
                    delay = WATCH_BACKOFF[0]
                    self.bridge.report(changed)
            except grpc.aio.AioRpcError as exc:
                self.calls.note_failure(index, exc.code(), exc.details() or "")
            except asyncio.CancelledError:
                return
            except Exception as exc:  # never let the stream's task die quietly
                self.bridge.report(log.warn, "databroker change stream: {error}",
                                   error=repr(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, WATCH_BACKOFF[1])

    # -- calls

    def _submit(self, factory: Callable[[Metadata], Coroutine[Any, Any, T]],
                method: str) -> Deferred[T]:
        """Run the call on the loop; on the reactor (where a traced request's span is
        active) first, a client span whose traceparent goes with it (trace_context)."""
        span, metadata = client_call(SERVICE, method)
        d = self.bridge.submit(lambda: factory(metadata))
        d.addBoth(end, span)

        def unavailable(failure: Any) -> Any:
            if failure.check(StorageUnavailable):
                return failure
            raise StorageUnavailable(f"databroker unreachable: {failure.getErrorMessage()}")
        return d.addErrback(unavailable)

    async def _invoke(self, metadata: Metadata, method: str, request: Any) -> Any:
        try:
            return await self.calls.invoke(method, request, metadata)
        except Unavailable as exc:
            raise StorageUnavailable(str(exc)) from None

    async def _close(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            self._watching = None
        await self.calls.close()
