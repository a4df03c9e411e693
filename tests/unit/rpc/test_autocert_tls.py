"""gRPC TLS from autocert's certificates: a databroker with ``autocert`` and no
certificate of its own serves gRPC with those the proxies keep in ``autocert_dir`` (the
client's SNI choosing), a renewal reaches new connections without a restart, and with
nothing there yet the start fails with a line naming autocert_dir. Real gRPC on
loopback, real certificate files."""

from __future__ import annotations

import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trustme
from twisted.logger import globalLogPublisher

from gateway.autocert.storage import CertificateFiles
from gateway.config.settings import Options
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION
from gateway.rpc import autocert_tls
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.autocert_tls import AutocertCertificates
from gateway.rpc.databroker_client import RemoteRecordStore
from gateway.rpc.databroker_server import SERVICE_NAME, DatabrokerServicer
from gateway.rpc.protos import databroker_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService

from .loopback import SECRET, QueueReactor

HOSTS = ("app.example.test", "db.example.test")


def store(directory: Path, ca: trustme.CA, host: str) -> None:
    issued = ca.issue_cert(host)
    CertificateFiles(str(directory)).save(host, issued.cert_chain_pems[0].bytes(),
                                          issued.private_key_pem.bytes())


def start(bridge: AsyncioThread, reactor: QueueReactor, directory: Path
          ) -> GrpcServerService:
    options = Options(services="databroker", grpc_address="127.0.0.1:0",
                      grpc_insecure=False, autocert=True, autocert_dir=str(directory))
    snapshot = SimpleNamespace(
        options=options, material=SimpleNamespace(shared_secret=SECRET, certificates=()),
        routes=[SimpleNamespace(host=host) for host in HOSTS])
    servicer = DatabrokerServicer(bridge, MemoryRecordStore(reactor.seconds))
    service = GrpcServerService(bridge, snapshot, [  # type: ignore[arg-type]
        (servicer, pb_grpc.add_DatabrokerServicer_to_server, SERVICE_NAME)])
    service.startService()
    return service


def client(bridge: AsyncioThread, port: int, ca: trustme.CA, name: str
           ) -> RemoteRecordStore:
    return RemoteRecordStore(bridge, (f"https://127.0.0.1:{port}",), SECRET, 2.0,
                             ca=ca.cert_pem.bytes(), override_name=name)


def test_grpc_serves_autocert_certificates_and_follows_renewals(
        rig: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bridge, reactor = rig
    monkeypatch.setattr(autocert_tls, "RELOAD_SECONDS", 0.0)
    first, renewed = trustme.CA(), trustme.CA()
    for host in HOSTS:
        store(tmp_path, first, host)
    server = start(bridge, reactor, tmp_path)
    clients = [client(bridge, server.port, first, host) for host in HOSTS]
    try:
        for c in clients:  # each name gets its own certificate (SNI)
            assert reactor.wait(c.put(SESSION, "s1", b"{}")).id == "s1"
        # the proxies renew the certificate (here: from another CA, to tell them apart)
        store(tmp_path, renewed, HOSTS[1])
        after = client(bridge, server.port, renewed, HOSTS[1])
        clients.append(after)
        assert reactor.wait(after.get(SESSION, "s1")).id == "s1"
    finally:
        for c in clients:
            reactor.wait(c.close())
        reactor.wait(server.stopService())


def test_no_certificate_yet_stops_the_start_naming_autocert_dir(
        rig: Any, tmp_path: Path) -> None:
    bridge, reactor = rig
    seen: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(seen.append)
    try:
        with pytest.raises(SystemExit):
            start(bridge, reactor, tmp_path)
    finally:
        globalLogPublisher.removeObserver(seen.append)
    reactor.drain()
    lines = [str(e.get("error", "")) for e in seen if e.get("log_level") is not None]
    assert any(f"autocert_dir {tmp_path} holds no certificate yet for "
               f"{', '.join(HOSTS)}" in line for line in lines), lines


def test_expired_certificates_are_not_served(tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert(HOSTS[0], not_after=datetime.datetime.now(datetime.UTC)
                           - datetime.timedelta(days=1))
    CertificateFiles(str(tmp_path)).save(HOSTS[0], issued.cert_chain_pems[0].bytes(),
                                         issued.private_key_pem.bytes())
    assert AutocertCertificates(str(tmp_path), list(HOSTS)).read() == ()
