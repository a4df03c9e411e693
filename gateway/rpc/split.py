"""What a split process (``services`` other than ``all``) adds to its service tree for gRPC,
kept out of gateway.tree so that all-in-one never imports grpc nor starts its thread.

- ``services: databroker``: the databroker gRPC service (and health) on ``grpc_address``.
- ``services: authorize``: the authorize gRPC service (and health) on ``grpc_address``,
  deciding with this process's identity layer (authorize_server).
- ``services: proxy``, ``authenticate`` or ``authorize`` with ``databroker_service_url(s)``:
  the records are read and written in that databroker, through a RemoteRecordStore.
- ``services: proxy`` with ``authorize_service_url(s)``: every decision is asked of that
  authorize service (authorize_client); without one, the proxy decides in process as
  before (its policy and sessions in this process, records in the databroker).
- ``services: proxy`` or ``authenticate`` with ``authorize_service_url(s)``: a check that
  this process publishes the key authorize signs with (signing_check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import IService, MultiService, Service
from twisted.internet.defer import Deferred

from gateway.authenticate.holder import IdentityHolder
from gateway.config.running import ConfigSource
from gateway.config.snapshot import Snapshot
from gateway.databroker.broker import Databroker
from gateway.databroker.records import RecordStore
from gateway.observability.tracing.service import TracingService
from gateway.rpc.aio_thread import AsyncioThread, BridgeService
from gateway.rpc.authorize_client import RemoteAuthorizer, authorize_failover
from gateway.rpc.authorize_server import SERVICE_NAME as AUTHORIZE_SERVICE
from gateway.rpc.authorize_server import AuthorizeDecider, AuthorizeServicer
from gateway.rpc.change_signal import ChangeSignal
from gateway.rpc.databroker_client import RemoteRecordStore
from gateway.rpc.databroker_server import SERVICE_NAME, DatabrokerServicer
from gateway.rpc.failover import FailoverClient
from gateway.rpc.protos import authorize_pb2_grpc as authorize_grpc
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService
from gateway.rpc.signing_check import SigningKeyCheck, published_kid
from gateway.rpc.trace_context import ServerTracing


class SplitRpc:
    """The bridge thread's service (the parent of the services that use the thread) and,
    in a client process, the remote record store."""

    def __init__(self, snapshot: Snapshot, reactor: Any, root: MultiService) -> None:
        self.snapshot = snapshot
        self.reactor = reactor
        self.bridge = AsyncioThread(reactor)
        self._authorize: FailoverClient | None = None
        self.tracing = ServerTracing()
        self._tracing_service: TracingService | None = None
        self.service = BridgeService(self.bridge)  # parent of what uses the thread
        root.addService(self.service)
        self.store = remote_store(self.bridge, snapshot) \
            if uses_remote_databroker(snapshot) else None

    def server(self, broker: Databroker, source: ConfigSource | None = None) -> IService:
        return databroker_server(self.bridge, self.snapshot, broker.store,
                                 ChangeSignal(broker.follower), self.server_tracing(source))

    def server_tracing(self, source: ConfigSource | None) -> ServerTracing:
        """The tracer of this process's gRPC servers (``tracing_*``, following reloads):
        calls from a traced request continue its trace here."""
        if self._tracing_service is None:
            service = TracingService(self.reactor, self.snapshot.options,
                                     self.tracing.changed)
            MultiService.addService(self.service, service)
            if source is not None:
                source.subscribe(lambda snapshot: service.apply(snapshot.options))
            self._tracing_service = service
        return self.tracing

    def authorize_server(self, holder: IdentityHolder, source: ConfigSource) -> IService:
        """``services: authorize``: decisions with ``holder`` (subscribed to ``source``
        already) and a plan of this process's own policy."""
        decider = AuthorizeDecider(holder, self.snapshot)
        source.subscribe(decider.apply)
        return GrpcServerService(self.bridge, self.snapshot, [
            (AuthorizeServicer(self.bridge, decider, self.server_tracing(source)),
             authorize_grpc.add_AuthorizeServicer_to_server, AUTHORIZE_SERVICE)])

    def authorizer(self, local: IdentityHolder) -> IdentityHolder | RemoteAuthorizer:
        """The proxy's authorizer: authorize's over gRPC with ``authorize_service_url(s)``,
        else ``local`` (in process)."""
        if not uses_remote_authorize(self.snapshot):
            return local
        return RemoteAuthorizer(self.bridge, local, self.authorize_client())

    def authorize_client(self) -> FailoverClient:
        """The one client of ``authorize_service_url(s)`` in this process; its channels
        close on stop, under the bridge (whose loop must still run then)."""
        if self._authorize is None:
            o, m = self.snapshot.options, self.snapshot.material
            self._authorize = authorize_failover(
                self.bridge, o.authorize_service_urls, m.shared_secret,
                float(o.grpc_client_timeout), m.certificate_authority,
                o.override_certificate_name, o.grpc_client_dns_roundrobin, o.service_label)
            MultiService.addService(self.service, ClosingService(
                lambda: self.bridge.submit(self._authorize_close)))
        return self._authorize

    async def _authorize_close(self) -> None:
        if self._authorize is not None:
            await self._authorize.close()

    def signing_check(self, holder: IdentityHolder) -> None:
        """A proxy or authenticate told of authorize: does it publish authorize's key?"""
        if checks_signing_key(self.snapshot):
            MultiService.addService(self.service, SigningKeyCheck(
                self.reactor, self.bridge, self.authorize_client(),
                lambda: published_kid(holder.signer), self.snapshot.options.service_label))


class ClosingService(Service):
    """Closes a gRPC client (its channels) when the process stops. A child of the
    BridgeService: the loop thread is stopped only after ``close`` has finished."""

    def __init__(self, close: Callable[[], Deferred[None]]) -> None:
        self.close = close

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        return self.close()


def split_rpc(snapshot: Snapshot, reactor: Any, root: MultiService) -> SplitRpc | None:
    """The gRPC parts this split process needs, or None when it needs none."""
    if snapshot.options.services in ("databroker", "authorize") \
            or uses_remote_databroker(snapshot) or uses_remote_authorize(snapshot) \
            or checks_signing_key(snapshot):
        return SplitRpc(snapshot, reactor, root)
    return None


def uses_remote_databroker(snapshot: Snapshot) -> bool:
    o = snapshot.options
    return (not o.all_in_one and o.services in ("proxy", "authenticate", "authorize")
            and bool(o.databroker_service_urls))


def uses_remote_authorize(snapshot: Snapshot) -> bool:
    return snapshot.options.remote_authorize


def checks_signing_key(snapshot: Snapshot) -> bool:
    """The processes that publish the JWKS but do not sign (authorize does) and know
    where authorize is: a proxy asking it, an authenticate given its URL(s)."""
    o = snapshot.options
    return o.services in ("proxy", "authenticate") and not o.signs_assertions \
        and bool(o.authorize_service_urls)


def remote_store(bridge: AsyncioThread, snapshot: Snapshot) -> RemoteRecordStore:
    o, m = snapshot.options, snapshot.material
    return RemoteRecordStore(bridge, o.databroker_service_urls, m.shared_secret,
                             float(o.grpc_client_timeout), ca=m.certificate_authority,
                             override_name=o.override_certificate_name, service=o.service_label,
                             round_robin=o.grpc_client_dns_roundrobin)


def databroker_server(bridge: AsyncioThread, snapshot: Snapshot, store: RecordStore,
                      signal: ChangeSignal | None = None,
                      tracing: ServerTracing | None = None) -> GrpcServerService:
    servicer = DatabrokerServicer(bridge, store,
                                  float(snapshot.options.grpc_server_max_connection_age),
                                  signal, tracing)
    return GrpcServerService(bridge, snapshot, [
        (servicer, pb_grpc.add_DatabrokerServicer_to_server, SERVICE_NAME)])
