"""Split mode: a databroker process on Redis serving gRPC, and proxy processes (which
also sign people in and decide, in process) keeping their sessions in it through
``databroker_service_url``. A sign-in through one proxy works on the other, a sign-out
through one ends it on the other within a second; a proxy with another shared_secret is
refused (a clear log line on both sides, 503s, never "allowed") while the others go on;
the databroker's restart keeps the sessions (Redis) and the proxies recover unaided."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvstore import SECRET, kv_gateway_config
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration

OTHER_SECRET = "b3RoZXJvdGhlcm90aGVyb3RoZXJvdGhlcm90aGVyb3Q="


def databroker_config(redis_url: str, grpc_port: int) -> dict[str, Any]:
    return {"services": "databroker", "shared_secret": SECRET, "grpc_insecure": True,
            "grpc_address": f"127.0.0.1:{grpc_port}",
            "databroker_storage_type": "kvstore",
            "databroker_storage_connection_string": redis_url}


def proxy_config(op: Any, port: int, upstream: str, grpc_port: int,
                 secret: str = SECRET) -> dict[str, Any]:
    config = kv_gateway_config(op, "", port, upstream)
    for key in ("databroker_storage_type", "databroker_storage_connection_string"):
        del config[key]
    config.update(services="proxy", shared_secret=secret, grpc_client_timeout="3s",
                  databroker_service_url=f"http://127.0.0.1:{grpc_port}")
    return config


def test_two_proxies_share_sessions_through_a_databroker_process(
        tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    pa, pb, pc, grpc_port = free_port(), free_port(), free_port(), free_port()
    dirs = {n: tmp_path / n for n in ("broker", "broker2", "a", "b", "c")}
    for d in dirs.values():
        d.mkdir()
    callbacks = [f"http://auth.test:{p}/oauth2/callback" for p in (pa, pb, pc)]
    with redis_server(tmp_path) as redis, oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://127.0.0.1:{redis.port}/0"
        broker_cm = gateway_daemon(dirs["broker"], databroker_config(url, grpc_port),
                                   ready_port=grpc_port)
        broker = broker_cm.__enter__()
        try:
            with gateway_daemon(dirs["a"], proxy_config(op, pa, up.url, grpc_port),
                                port=pa) as a, \
                    gateway_daemon(dirs["b"], proxy_config(op, pb, up.url, grpc_port),
                                   port=pb):
                browser = Browser()
                assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test"
                                       ).status == 200
                assert browser.request("GET", f"http://app.test:{pb}/").status == 200
                with redis.client() as raw:
                    assert raw.command("HLEN", "{gateway}:records:session") == 1

                # sign-out through A ends the session on B within a second (asked with a copy
                # of the cookie: the browser's own is cleared for every port of app.test)
                keeper = Browser()
                keeper.cookies["app.test"] = dict(browser.cookies["app.test"])
                assert keeper.request("GET", f"http://app.test:{pb}/z").status == 200
                browser.sign_out(f"http://app.test:{pa}")
                ended = time.monotonic()
                while keeper.request("GET", f"http://app.test:{pb}/z").status == 200:
                    assert time.monotonic() - ended < 1.0, "sign-out not seen on B in 1 s"
                    time.sleep(0.05)
                assert keeper.request("GET", f"http://app.test:{pb}/z").status == 302

                # a proxy with another shared_secret: refused, said on both sides, 503s
                assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test"
                                       ).status == 200
                cookie = browser.cookies["app.test"]["_gateway"]
                with gateway_daemon(dirs["c"], proxy_config(op, pc, up.url, grpc_port,
                                                            secret=OTHER_SECRET),
                                    port=pc) as c:
                    stranger = Browser()
                    stranger.cookies["app.test"] = {"_gateway": cookie}
                    reply = stranger.request("GET", f"http://app.test:{pc}/")
                    assert reply.status == 503, (reply.status, reply.body[:300])
                    wait_until(lambda: c.logged("shared_secret differs"), 5,
                               what="the refused proxy's log line")
                    wait_until(lambda: broker.logged("shared_secret differs"), 5,
                               what="the databroker's log line")
                    # the others are unaffected
                    assert browser.request("GET", f"http://app.test:{pb}/").status == 200
                    assert browser.request("GET", f"http://app.test:{pa}/").status == 200
                assert "Bearer" not in broker.process.log_text()

                # the databroker goes away: 503 with a clear body, never "allowed"
                broker_cm.__exit__(None, None, None)
                deadline = time.monotonic() + 8
                while True:
                    reply = browser.request("GET", f"http://app.test:{pa}/down")
                    assert reply.status in (200, 503), reply.status
                    if reply.status == 503:
                        break
                    assert time.monotonic() < deadline, "no 503 with the databroker down"
                    time.sleep(0.1)
                assert b"unavailable" in reply.body.lower(), reply.body[:300]
                # back on the same address: the session survived (Redis), no restart here
                broker_cm = gateway_daemon(dirs["broker2"], databroker_config(url, grpc_port),
                                           ready_port=grpc_port)
                broker = broker_cm.__enter__()
                back = time.monotonic()
                for port, name in ((pa, "A"), (pb, "B")):  # each on its own backoff (<= 2 s)
                    while browser.request("GET", f"http://app.test:{port}/up").status != 200:
                        assert time.monotonic() - back < 10, f"proxy {name} did not recover"
                        time.sleep(0.1)
                assert a.process.running
        finally:
            broker_cm.__exit__(None, None, None)


def test_split_over_tls_with_certificate_authority(tmp_path: Path,
                                                    require_binary: Any) -> None:
    """The databroker serves gRPC with its certificate; the proxies trust it through
    certificate_authority_file and override_certificate_name (the certificate names the
    service, the URL an address)."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    ca = trustme.CA()
    issued = ca.issue_cert("databroker.internal")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (tmp_path / "db.pem").write_bytes(issued.cert_chain_pems[0].bytes())
    (tmp_path / "db.key").write_bytes(issued.private_key_pem.bytes())
    pa, pb, grpc_port = free_port(), free_port(), free_port()
    for name in ("broker", "a", "b"):
        (tmp_path / name).mkdir()
    callbacks = [f"http://auth.test:{p}/oauth2/callback" for p in (pa, pb)]
    with redis_server(tmp_path) as redis, oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://127.0.0.1:{redis.port}/0"
        broker = {**databroker_config(url, grpc_port), "grpc_insecure": False,
                  "certificate_file": str(tmp_path / "db.pem"),
                  "certificate_key_file": str(tmp_path / "db.key")}
        tls = {"databroker_service_url": f"https://127.0.0.1:{grpc_port}",
               "certificate_authority_file": str(tmp_path / "ca.pem"),
               "override_certificate_name": "databroker.internal"}
        with gateway_daemon(tmp_path / "broker", broker, ready_port=grpc_port) as db, \
                gateway_daemon(tmp_path / "a", {**proxy_config(op, pa, up.url, grpc_port),
                                                **tls}, port=pa), \
                gateway_daemon(tmp_path / "b", {**proxy_config(op, pb, up.url, grpc_port),
                                                **tls}, port=pb):
            assert "(TLS)" in db.process.log_text()
            browser = Browser()
            assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test"
                                   ).status == 200
            assert browser.request("GET", f"http://app.test:{pb}/").status == 200
            with redis.client() as raw:
                assert raw.command("HLEN", "{gateway}:records:session") == 1


def test_failover_between_two_databrokers(tmp_path: Path, require_binary: Any) -> None:
    """Two databrokers on one Redis, a proxy given both URLs: when the one it uses stops,
    its next calls go to the other within the same request (no 503), and it says so."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    pa, g1, g2 = free_port(), free_port(), free_port()
    for name in ("d1", "d2", "a"):
        (tmp_path / name).mkdir()
    with redis_server(tmp_path) as redis, \
            oidc_provider(tmp_path, [f"http://auth.test:{pa}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://127.0.0.1:{redis.port}/0"
        proxy = proxy_config(op, pa, up.url, g1)
        del proxy["databroker_service_url"]
        proxy["databroker_service_urls"] = [f"http://127.0.0.1:{g1}", f"http://127.0.0.1:{g2}"]
        first = gateway_daemon(tmp_path / "d1", databroker_config(url, g1), ready_port=g1)
        first.__enter__()
        first_running = True
        try:
            with gateway_daemon(tmp_path / "d2", databroker_config(url, g2), ready_port=g2), \
                    gateway_daemon(tmp_path / "a", proxy, port=pa) as a:
                browser = Browser()
                assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test"
                                       ).status == 200
                first.__exit__(None, None, None)
                first_running = False
                for i in range(30):  # over 3 s: past the follower's 2 s of trust
                    reply = browser.request("GET", f"http://app.test:{pa}/after/{i}")
                    assert reply.status == 200, (i, reply.status, reply.body[:200])
                    time.sleep(0.1)
                assert a.logged(f"databroker: now using http://127.0.0.1:{g2}")
        finally:
            if first_running:
                first.__exit__(None, None, None)
