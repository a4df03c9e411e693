"""What a split process (``services`` other than ``all``) adds to its service tree for gRPC,
kept out of tap.py so that all-in-one never imports grpc nor starts its thread.

- ``services: databroker``: the databroker gRPC service (and health) on ``grpc_address``.
- ``services: proxy`` or ``authenticate`` with ``databroker_service_url(s)``: the records
  are read and written in that databroker, through a RemoteRecordStore.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import IService, MultiService

from gateway.config.snapshot import Snapshot
from gateway.databroker.broker import Databroker
from gateway.databroker.records import RecordStore
from gateway.rpc.bridge import AsyncioThread, BridgeService
from gateway.rpc.change_signal import ChangeSignal
from gateway.rpc.databroker_client import RemoteRecordStore
from gateway.rpc.databroker_server import SERVICE_NAME, DatabrokerServicer
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService


class SplitRpc:
    """The bridge thread's service (the parent of the services that use the thread) and,
    in a client process, the remote record store."""

    def __init__(self, snapshot: Snapshot, reactor: Any, root: MultiService) -> None:
        self.snapshot = snapshot
        self.bridge = AsyncioThread(reactor)
        self.service = BridgeService(self.bridge)  # parent of what uses the thread
        root.addService(self.service)
        self.store = remote_store(self.bridge, snapshot) \
            if uses_remote_databroker(snapshot) else None

    def server(self, broker: Databroker) -> IService:
        return databroker_server(self.bridge, self.snapshot, broker.store,
                                 ChangeSignal(broker.follower))


def split_rpc(snapshot: Snapshot, reactor: Any, root: MultiService) -> SplitRpc | None:
    """The gRPC parts this split process needs, or None when it needs none."""
    if snapshot.options.services == "databroker" or uses_remote_databroker(snapshot):
        return SplitRpc(snapshot, reactor, root)
    return None


def uses_remote_databroker(snapshot: Snapshot) -> bool:
    o = snapshot.options
    return (not o.all_in_one and not o.runs("databroker")
            and (o.runs("proxy") or o.runs("authenticate"))
            and bool(o.databroker_service_urls))


def remote_store(bridge: AsyncioThread, snapshot: Snapshot) -> RemoteRecordStore:
    o, m = snapshot.options, snapshot.material
    return RemoteRecordStore(bridge, o.databroker_service_urls, m.shared_secret,
                             float(o.grpc_client_timeout), ca=m.certificate_authority,
                             override_name=o.override_certificate_name, service=o.services,
                             round_robin=o.grpc_client_dns_roundrobin)


def databroker_server(bridge: AsyncioThread, snapshot: Snapshot, store: RecordStore,
                      signal: ChangeSignal | None = None) -> GrpcServerService:
    servicer = DatabrokerServicer(bridge, store,
                                  float(snapshot.options.grpc_server_max_connection_age),
                                  signal)
    return GrpcServerService(bridge, snapshot, [
        (servicer, pb_grpc.add_DatabrokerServicer_to_server, SERVICE_NAME)])
