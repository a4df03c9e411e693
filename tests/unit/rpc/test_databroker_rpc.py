"""The remote RecordStore against a real databroker gRPC server on loopback: the same
answers as the store it wraps, shared_secret refusals, failover between URLs, and
StorageUnavailable (a 503 upstream) when nothing answers."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.python.failure import Failure

from gateway.config.settings import Options
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION, StorageUnavailable
from gateway.observability.metrics import REGISTRY
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.databroker_client import RemoteRecordStore
from gateway.rpc.databroker_server import SERVICE_NAME, DatabrokerServicer
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService
from gateway.rpc.split import remote_store
from tests.support.processes import free_port

from .loopback import SECRET, server_snapshot, start_server


def _client(bridge: AsyncioThread, *ports: int, secret: bytes = SECRET,
            timeout: float = 5.0) -> RemoteRecordStore:
    return RemoteRecordStore(bridge, tuple(f"http://127.0.0.1:{p}" for p in ports), secret,
                             timeout)


def test_records_round_trip(rig: Any) -> None:
    bridge, reactor = rig
    server, store = start_server(bridge, reactor)
    client = _client(bridge, server.port)
    try:
        put = reactor.wait(client.put(SESSION, "s1", b"{}", expires_at=2_000.0))
        assert (put.type, put.id, put.data, put.expires_at) == (SESSION, "s1", b"{}", 2_000.0)
        assert reactor.wait(client.get(SESSION, "s1")) == store.get_now(SESSION, "s1")
        assert [r.id for r in reactor.wait(client.query(SESSION))] == ["s1"]
        changes = reactor.wait(client.sync(-1))
        assert changes.reset and changes.epoch == store.epoch
        assert reactor.wait(client.delete(SESSION, "s1")) is None
        assert reactor.wait(client.get(SESSION, "s1")) is None
        assert reactor.wait(client.put(SESSION, "s1", b"{}", revive=False)) is None
        later = reactor.wait(client.sync(changes.version))
        assert [(r.id, r.deleted) for r in later.records] == [("s1", True)]
        assert reactor.wait(client.lease("dir", "a", 30)) is True
        assert reactor.wait(client.lease("dir", "b", 30)) is False
        reactor.wait(client.release("dir", "a"))
        assert reactor.wait(client.lease("dir", "b", 30)) is True
        assert reactor.wait(client.sweep(reactor.now)) == 0
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())


def test_a_wrong_shared_secret_is_refused_and_said_on_both_sides(rig: Any, events: Any) -> None:
    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    client = _client(bridge, server.port, secret=b"x" * 32)
    try:
        outcome = reactor.wait(client.get(SESSION, "s1"))
        assert isinstance(outcome, Failure) and outcome.check(StorageUnavailable)
        assert "UNAUTHENTICATED" in outcome.getErrorMessage()
        reactor.drain()
        texts = [e.get("log_format", "") for e in events]
        assert sum("shared_secret differs" in t for t in texts) >= 2, texts
        assert not any("Bearer" in repr(e) for e in events)
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())


def test_failover_to_the_url_that_answers(rig: Any, events: Any) -> None:
    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    dead = free_port()
    client = _client(bridge, dead, server.port)
    try:
        reactor.wait(client.put(SESSION, "s1", b"{}"))
        assert client.preferred == 1
        assert reactor.wait(client.get(SESSION, "s1")).id == "s1"
        reactor.drain()
        assert any("now using" in e.get("log_format", "") for e in events)
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())


def test_nothing_answering_is_storage_unavailable(rig: Any) -> None:
    bridge, reactor = rig
    client = _client(bridge, free_port(), free_port(), timeout=2.0)
    try:
        outcome = reactor.wait(client.get(SESSION, "s1"))
        assert isinstance(outcome, Failure) and outcome.check(StorageUnavailable)
        assert "no databroker answered" in outcome.getErrorMessage()
    finally:
        reactor.wait(client.close())


def test_a_call_waits_out_a_restart_within_grpc_client_timeout(rig: Any) -> None:
    """grpc_client_timeout: "the proxy retries during transient failures for this
    duration". A call made while the databroker is down is answered once it is back
    (within the timeout); with a shorter timeout it is StorageUnavailable when the
    timeout ends, not before."""
    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    port = server.port
    client = _client(bridge, port, timeout=8.0)
    short = _client(bridge, port, timeout=1.0)
    try:
        reactor.wait(client.put(SESSION, "s1", b"{}"))
        reactor.wait(server.stopService())
        started = time.monotonic()
        outcome = reactor.wait(short.get(SESSION, "s1"))
        assert isinstance(outcome, Failure) and outcome.check(StorageUnavailable)
        assert 0.8 <= time.monotonic() - started < 3.0
        pending = client.get(SESSION, "s1")  # the databroker is down now
        time.sleep(0.5)
        again, _ = start_server(bridge, reactor, port=port)
        try:
            assert reactor.wait(pending) is None  # a new, empty memory store answers
        finally:
            reactor.wait(again.stopService())
    finally:
        reactor.wait(client.close())
        reactor.wait(short.close())


class PeerRecorder(DatabrokerServicer):
    """The databroker, noting the client address (its connection) of each Get."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.peers: list[str] = []

    async def Get(self, request: Any, context: Any) -> Any:
        self.peers.append(context.peer())
        return await super().Get(request, context)


def test_grpc_server_max_connection_age_sends_clients_away(rig: Any) -> None:
    """grpc_server_max_connection_age(_grace) reach the wire: past the age the server
    sends the client away and its next call comes on a new connection (another client
    port); with the default 5 minutes the connection is kept."""
    bridge, reactor = rig
    servers, recorders = [], []
    for age in (0.5, 300.0):
        recorder = PeerRecorder(bridge, MemoryRecordStore(reactor.seconds))
        server = GrpcServerService(bridge, server_snapshot(
            grpc_server_max_connection_age=age, grpc_server_max_connection_age_grace=age), [
            (recorder, pb_grpc.add_DatabrokerServicer_to_server, SERVICE_NAME)])
        server.startService()
        servers.append(server)
        recorders.append(recorder)
    clients = [_client(bridge, server.port) for server in servers]
    try:
        for client in clients:
            reactor.wait(client.get(SESSION, "s1"))
        time.sleep(1.5)  # past the age and its grace (+10 % jitter)
        for client in clients:
            reactor.wait(client.get(SESSION, "s1"))
        aged, kept = ([p.rsplit(":", 1)[1] for p in r.peers] for r in recorders)
        assert aged[0] != aged[1], aged
        assert kept[0] == kept[1], kept
    finally:
        for client in clients:
            reactor.wait(client.close())
        for server in servers:
            reactor.wait(server.stopService())


def test_watch_calls_back_on_each_change(rig: Any) -> None:
    bridge, reactor = rig
    server, store = start_server(bridge, reactor)
    client = _client(bridge, server.port)
    rang: list[int] = []
    try:
        client.watch(lambda: rang.append(1))
        for _ in range(100):
            reactor.run_one()
            if rang:
                break
        assert rang  # the first batch: the store's version now
        rang.clear()
        store.put(SESSION, "s2", b"{}")
        for _ in range(100):
            reactor.run_one()
            if rang:
                break
        assert rang
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_grpc_metrics_on_both_sides(rig: Any) -> None:
    """grpc_client_* and grpc_server_* of the reference: counted by method and status,
    refused calls included; ``service`` is the process's label as in every other family
    (gateway-proxy, gateway-databroker), not the raw ``services``."""
    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    # a split proxy's client, as split.py makes it: its label is gateway-proxy
    proxy = SimpleNamespace(
        options=Options(services="proxy", grpc_client_timeout=5.0,
                        databroker_service_urls=(f"http://127.0.0.1:{server.port}",)),
        material=SimpleNamespace(shared_secret=SECRET, certificate_authority=None))
    client = remote_store(bridge, proxy)  # type: ignore[arg-type]
    stranger = _client(bridge, server.port, secret=b"x" * 32)
    ok = {"grpc_service": "gateway.databroker.v1.Databroker", "grpc_method": "Put",
          "service": "gateway-proxy"}
    served = {"grpc_service": ok["grpc_service"], "service": "gateway-databroker"}

    def counts() -> tuple[float, float, float]:
        return (_count("grpc_client_requests_total", grpc_client_status="OK", **ok),
                _count("grpc_server_requests_total", grpc_server_status="OK",
                       grpc_method="Put", **served),
                _count("grpc_server_requests_total", grpc_server_status="UNAUTHENTICATED",
                       grpc_method="Get", **served))
    before = counts()
    try:
        reactor.wait(client.put(SESSION, "s1", b"{}"))
        reactor.wait(stranger.get(SESSION, "s1"))
        after = counts()
        assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]
        assert (REGISTRY.get_sample_value("grpc_client_request_size_bytes_count",
                                          {**ok, "grpc_client_status": "OK"}) or 0) >= 1
    finally:
        reactor.wait(client.close())
        reactor.wait(stranger.close())
        reactor.wait(server.stopService())


def test_a_taken_grpc_address_stops_the_process(rig: Any, events: Any) -> None:
    """No SO_REUSEPORT: a second server on the same address fails at start, with one
    critical line naming grpc_address, instead of taking half the calls."""
    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    try:
        with pytest.raises(SystemExit):
            start_server(bridge, reactor, port=server.port)
        reactor.drain()
        assert any(e.get("log_format", "").startswith("grpc_address: cannot serve gRPC")
                   for e in events)
    finally:
        reactor.wait(server.stopService())


def test_standard_health_checks_answer_without_a_token(rig: Any) -> None:
    """grpc.health.v1: SERVING for the server and the databroker service, no token
    needed (load balancers probe it); our own methods still need one."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from gateway.rpc.protos import databroker_pb2, databroker_pb2_grpc

    bridge, reactor = rig
    server, _ = start_server(bridge, reactor)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", "gateway.databroker.v1.Databroker"):
                answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as refused:
                databroker_pb2_grpc.DatabrokerStub(channel).Get(
                    databroker_pb2.GetRequest(type=SESSION, id="s1"), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        reactor.wait(server.stopService())
