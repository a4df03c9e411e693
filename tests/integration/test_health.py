"""Active health checks against real peers on loopback.

``ProbeTests`` run the probes directly on the real reactor (trial ``TestCase`` methods
return Deferreds; trial spins the reactor under pytest too) against the echo upstream,
the gRPC health peer and small socket servers. The ``test_daemon_*`` tests run the
whole gateway: a host that fails its checks gets no requests, and gets them again once
it passes.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from gateway.config.upstreams import HealthCheck, Upstream
from gateway.dataplane.health.manager import probe_grpc, probe_http, probe_tcp
from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.tls.client import TLSClientConfig
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import ManagedProcess, free_port
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration
PEERS = Path(__file__).resolve().parents[1] / "peers"
REPO_ROOT = Path(__file__).resolve().parents[2]
IDENTITY = {
    "authenticate_service_url": "https://authenticate.example.com",
    "idp_provider": "oidc", "idp_provider_url": "https://idp.example.com",
    "idp_client_id": "gateway", "idp_client_secret": "secret",
}
WIRED = "HealthManager" in (REPO_ROOT / "gateway" / "services" / "proxy.py").read_text()


@contextmanager
def grpc_peer(tmp: Path, serving: str = "", tls_cert: Path | None = None
              ) -> Iterator[tuple[int, ManagedProcess]]:
    argv = [sys.executable, "-u", str(PEERS / "grpc_health.py"), "--serving", serving]
    if tls_cert is not None:
        argv += ["--tls-cert", str(tls_cert)]
    with ManagedProcess(argv, log_dir=tmp, name="grpc-health") as proc:
        yield int(proc.wait_for_log_line("READY ", 15).split()[1]), proc


def host_at(port: int, scheme: str = "http", name: str = "127.0.0.1") -> UpstreamHost:
    return UpstreamHost(Upstream(f"{scheme}://{name}:{port}", scheme, name, port, "", None))


class OneShotServer:
    """Accepts one connection, records the request head, answers ``reply`` (or nothing:
    ``reply=None`` keeps the connection open and silent until ``close``)."""

    def __init__(self, reply: bytes | None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.reply = reply
        self.received = b""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(10)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn, contextlib.suppress(OSError):  # the probe may abort: a reset
            conn.settimeout(10)
            while b"\r\n\r\n" not in self.received:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                self.received += chunk
            if self.reply is not None:
                conn.sendall(self.reply)
            else:
                self._done.wait(10)

    def close(self) -> None:
        self._done.set()
        self.sock.close()
        self._thread.join(10)


class ProbeTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        from twisted.internet import reactor  # the real one, installed only when used

        self.reactor: Any = reactor
        self.tmp = Path(tempfile.mkdtemp(prefix="gw-health-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        stack = ExitStack()
        self.addCleanup(stack.close)
        self.stack = stack

    def run_async(self, coro: Coroutine[Any, Any, None]) -> Deferred[None]:
        return Deferred.fromCoroutine(coro)

    def echo(self, name: str = "echo", **kwargs: Any) -> Any:
        return self.stack.enter_context(echo_upstream(self.tmp, name=name, quiet=True,
                                                      **kwargs))

    def server(self, reply: bytes | None) -> OneShotServer:
        server = OneShotServer(reply)
        self.addCleanup(server.close)
        return server

    # -- http

    def test_http_status_decides(self) -> Deferred[None]:
        host = host_at(self.echo().port)

        async def go() -> None:
            ok = HealthCheck("http", timeout=5, path="/healthz-probe")
            self.assertIs(await probe_http(self.reactor, host, ok, None), True)
            sick = HealthCheck("http", timeout=5, path="/status/503")
            self.assertIs(await probe_http(self.reactor, host, sick, None), False)
            tolerant = HealthCheck("http", timeout=5, path="/status/503",
                                   expected_statuses=((200, 300), (500, 504)))
            self.assertIs(await probe_http(self.reactor, host, tolerant, None), True)

        return self.run_async(go())

    def test_http_request_bytes(self) -> Deferred[None]:
        server = self.server(b"HTTP/1.1 204 No Content\r\n\r\n")
        check = HealthCheck("http", timeout=5, path="/hc?full=1", host="svc.internal",
                            expected_statuses=((204, 205),))

        async def go() -> None:
            self.assertIs(await probe_http(self.reactor, host_at(server.port), check, None), True)
            self.assertEqual(
                server.received,
                b"GET /hc?full=1 HTTP/1.1\r\nHost: svc.internal\r\nUser-Agent: "
                b"gateway-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            )

        return self.run_async(go())

    def test_refused_connection_fails_fast(self) -> Deferred[None]:
        host = host_at(free_port())

        async def go() -> None:
            started = time.monotonic()
            for probe in (probe_http, probe_tcp, probe_grpc):
                check = HealthCheck(probe.__name__.removeprefix("probe_"), timeout=5)
                self.assertIs(await probe(self.reactor, host, check, None), False)
            self.assertLess(time.monotonic() - started, 3)

        return self.run_async(go())

    def test_silent_peer_is_aborted_at_the_timeout(self) -> Deferred[None]:
        async def go() -> None:
            for probe, check in ((probe_http, HealthCheck("http", timeout=0.5)),
                                 (probe_tcp, HealthCheck("tcp", timeout=0.5,
                                                         receive=(b"+PONG",))),
                                 (probe_grpc, HealthCheck("grpc", timeout=0.5))):
                server = self.server(None)
                started = time.monotonic()
                self.assertIs(await probe(self.reactor, host_at(server.port), check, None), False)
                elapsed = time.monotonic() - started
                self.assertTrue(0.45 <= elapsed < 2.0, f"{check.kind}: {elapsed:.2f}s")

        return self.run_async(go())

    def test_https_upstream(self) -> Deferred[None]:
        ca = trustme.CA()
        cert = ca.issue_cert("upstream.internal", "127.0.0.1")
        cert.private_key_and_cert_chain_pem.write_to_path(str(self.tmp / "up.pem"))
        up = self.echo("tls", tls_cert=self.tmp / "up.pem")
        host = host_at(up.port, "https")
        check = HealthCheck("http", timeout=5, path="/healthz-probe")
        trusted = TLSClientConfig("", False, ca.cert_pem.bytes(), None, None)
        wrong_name = TLSClientConfig("other.internal", False, ca.cert_pem.bytes(), None, None)
        skip = TLSClientConfig("", True, None, None, None)

        async def go() -> None:
            self.assertIs(await probe_http(self.reactor, host, check, trusted), True)
            self.assertIs(await probe_http(self.reactor, host, check, skip), True)
            self.assertIs(await probe_http(self.reactor, host, check, wrong_name), False)
            self.assertIs(await probe_http(self.reactor, host, check, None), False)  # system roots

        return self.run_async(go())

    # -- tcp

    def test_tcp_payloads(self) -> Deferred[None]:
        host = host_at(self.echo().port)
        send = b"GET /status/200 HTTP/1.0\r\n\r\n"

        async def go() -> None:
            connect_only = HealthCheck("tcp", timeout=5)
            self.assertIs(await probe_tcp(self.reactor, host, connect_only, None), True)
            blocks = HealthCheck("tcp", timeout=5, send=send, receive=(b"HTTP/1.", b" 200 "))
            self.assertIs(await probe_tcp(self.reactor, host, blocks, None), True)
            wrong = HealthCheck("tcp", timeout=5, send=send, receive=(b"HTTP/1.1 404",))
            started = time.monotonic()
            self.assertIs(await probe_tcp(self.reactor, host, wrong, None), False)
            self.assertLess(time.monotonic() - started, 3)  # decided when the peer closed

        return self.run_async(go())

    # -- grpc

    def test_grpc_serving_and_not_serving(self) -> Deferred[None]:
        port, proc = self.stack.enter_context(grpc_peer(self.tmp, serving="good"))
        host = host_at(port)

        async def go() -> None:
            for service, expected in (("", True), ("good", True), ("bad", False)):
                check = HealthCheck("grpc", timeout=5, service_name=service)
                self.assertIs(await probe_grpc(self.reactor, host, check, None), expected, service)
            self.assertIn("check service='bad' status=2", proc.log_text())

        return self.run_async(go())

    def test_grpc_over_tls_with_alpn_h2(self) -> Deferred[None]:
        ca = trustme.CA()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(self.tmp / "grpc.pem"))
        port, _ = self.stack.enter_context(
            grpc_peer(self.tmp, serving="good", tls_cert=self.tmp / "grpc.pem"))
        host = host_at(port, "https")
        tls = TLSClientConfig("", False, ca.cert_pem.bytes(), None, None)

        async def go() -> None:
            good = HealthCheck("grpc", timeout=5, service_name="good")
            self.assertIs(await probe_grpc(self.reactor, host, good, tls), True)
            bad = HealthCheck("grpc", timeout=5, service_name="bad")
            self.assertIs(await probe_grpc(self.reactor, host, bad, tls), False)

        return self.run_async(go())


# -- the whole gateway -------------------------------------------------------------

needs_wiring = pytest.mark.skipif(not WIRED, reason="HealthManager not wired yet")


def public(host: str, to: Any, **extra: Any) -> dict[str, Any]:
    return {"from": f"https://{host}", "to": to, "allow_public_unauthenticated_access": True,
            **extra}


def upstream_names(gw: Daemon, host: str, count: int) -> list[str]:
    names = []
    with RawClient(gw.port) as client:
        for _ in range(count):
            reply = client.request("GET", "/", host)
            assert reply.status == 200, (reply.status, reply.body)
            names.append(reply.headers["x-upstream-name"])
    return names


def wait_state(gw: Daemon, address: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
    return gw.wait_for_event(
        lambda e: e.get("kind") is not None and e.get("state") == state
        and e.get("host") == address,
        timeout, what=f"{address} {state}",
    )


@needs_wiring
def test_daemon_http_check_takes_a_dead_host_out_and_back(tmp_path: Path) -> None:
    dead_port = free_port()
    check = {"interval": "200ms", "timeout": "1s", "unhealthy_threshold": 1,
             "healthy_threshold": 2, "http_health_check": {"path": "/healthz-probe"}}
    with ExitStack() as stack:
        a = stack.enter_context(echo_upstream(tmp_path, name="a"))
        policy = [public("lb.test", [a.url, f"http://127.0.0.1:{dead_port}"],
                         health_checks=[check])]
        gw = stack.enter_context(gateway_daemon(tmp_path, {"policy": policy, **IDENTITY}))
        event = wait_state(gw, f"127.0.0.1:{dead_port}", "unhealthy")
        assert (event["route"], event["kind"], event["level"]) == ("0", "http", "warn")
        assert set(upstream_names(gw, "lb.test", 20)) == {"a"}
        assert "/healthz-probe" in a.process.log_text()

        stack.enter_context(echo_upstream(tmp_path, name="b", port=dead_port))
        wait_state(gw, f"127.0.0.1:{dead_port}", "healthy")
        assert set(upstream_names(gw, "lb.test", 20)) == {"a", "b"}


@needs_wiring
def test_daemon_tcp_check(tmp_path: Path) -> None:
    dead_port = free_port()
    send = b"GET /status/200 HTTP/1.0\r\n\r\n".hex()
    check = {"interval": "200ms", "timeout": "1s", "unhealthy_threshold": 1,
             "tcp_health_check": {"send": {"text": send},
                                  "receive": [{"text": b"HTTP/1.".hex()},
                                              {"text": b" 200 ".hex()}]}}
    with ExitStack() as stack:
        a = stack.enter_context(echo_upstream(tmp_path, name="a"))
        policy = [public("lb.test", [f"http://127.0.0.1:{dead_port}", a.url],
                         health_checks=[check])]
        gw = stack.enter_context(gateway_daemon(tmp_path, {"policy": policy, **IDENTITY}))
        event = wait_state(gw, f"127.0.0.1:{dead_port}", "unhealthy")
        assert event["kind"] == "tcp"
        assert set(upstream_names(gw, "lb.test", 20)) == {"a"}
        assert not [e for e in gw.log_events()
                    if e.get("state") == "unhealthy" and e.get("host") == f"127.0.0.1:{a.port}"]


@needs_wiring
def test_daemon_grpc_check_serving_vs_not_serving(tmp_path: Path) -> None:
    with ExitStack() as stack:
        port, _ = stack.enter_context(grpc_peer(tmp_path, serving="good"))
        base = f"http://127.0.0.1:{port}"

        def check(service: str) -> dict[str, Any]:
            return {"interval": "200ms", "timeout": "1s", "unhealthy_threshold": 1,
                    "grpc_health_check": {"service_name": service}}

        # different upstream URLs, so the two routes do not share host state
        policy = [public("good.test", base + "/good", health_checks=[check("good")]),
                  public("bad.test", base + "/bad", health_checks=[check("bad")])]
        gw = stack.enter_context(gateway_daemon(tmp_path, {"policy": policy, **IDENTITY}))
        event = wait_state(gw, f"127.0.0.1:{port}", "unhealthy")
        assert (event["kind"], event["route"]) == ("grpc", "1")
        with RawClient(gw.port) as client:
            good = client.request("GET", "/", "good.test")
        with RawClient(gw.port) as client:
            bad = client.request("GET", "/", "bad.test")
        assert (good.status, good.body) == (200, b"grpc-health peer")
        assert bad.status == 503
