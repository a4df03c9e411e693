"""gRPC over TLS between the services: the databroker's certificate is trusted through
certificate_authority and matched against override_certificate_name when the URL's
host is not in it; an untrusted certificate is refused (StorageUnavailable, a 503)."""

from __future__ import annotations

from typing import Any

import trustme
from twisted.python.failure import Failure

from gateway.databroker.records import SESSION, StorageUnavailable
from gateway.rpc.databroker_client import RemoteRecordStore

from .loopback import SECRET, start_server


def _pair(ca: trustme.CA, *names: str) -> tuple[bytes, bytes]:
    cert = ca.issue_cert(*names)
    return cert.cert_chain_pems[0].bytes(), cert.private_key_pem.bytes()


def test_tls_with_certificate_authority_and_override_name(rig: Any) -> None:
    bridge, reactor = rig
    ca = trustme.CA()
    server, _ = start_server(bridge, reactor,
                             certificates=(_pair(ca, "databroker.internal"),))
    url = f"https://127.0.0.1:{server.port}"
    trusted = RemoteRecordStore(bridge, (url,), SECRET, 5.0, ca=ca.cert_pem.bytes(),
                                override_name="databroker.internal")
    wrong_name = RemoteRecordStore(bridge, (url,), SECRET, 5.0, ca=ca.cert_pem.bytes())
    stranger = RemoteRecordStore(bridge, (url,), SECRET, 5.0,
                                 ca=trustme.CA().cert_pem.bytes(),
                                 override_name="databroker.internal")
    try:
        assert reactor.wait(trusted.put(SESSION, "s1", b"{}")).id == "s1"
        for client in (wrong_name, stranger):
            outcome = reactor.wait(client.get(SESSION, "s1"))
            assert isinstance(outcome, Failure) and outcome.check(StorageUnavailable)
    finally:
        for client in (trusted, wrong_name, stranger):
            reactor.wait(client.close())
        reactor.wait(server.stopService())
