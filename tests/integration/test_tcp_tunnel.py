"""CONNECT tunnels to tcp+https routes, on the wire (issue 10, server side).

A real TCP service (tests/peers/tcp_echo.py, which logs every accept), a real identity
provider for the signed-in route, raw sockets and an h2 client. Every refusal is also
checked against the service's accept count: a refused tunnel never reaches it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import trustme

from tests.conftest import _require_binary
from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.peers import TcpService, oidc_provider, tcp_service
from tests.support.processes import free_port, wait_until
from tests.support.rawhttp import read_until, status_of

pytestmark = pytest.mark.integration

HEAD_END = b"\r\n\r\n"


@dataclass
class Env:
    gw: Daemon
    svc: TcpService
    port: int
    alice: str
    bob: str
    alice_browser: Browser
    tmp: Path


@contextlib.contextmanager
def full_backlog() -> Iterator[int]:
    """A loopback port whose accept queue is full: connections to it time out."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for sock in (*fillers, server):
            sock.close()


def programmatic_token(port: int, user: str) -> tuple[str, Browser]:
    """Sign ``user`` in the way `gateway tcp` does; the token and the signed-in browser."""
    cli = Browser(accept="*/*")
    reply = cli.request("GET", f"http://svc.test:{port}/.gateway/api/v1/login?"
                               "gateway_redirect_uri=http://127.0.0.1:9/")
    assert reply.status == 200, reply.body
    browser = Browser()
    final = browser.sign_in(reply.body.decode(), user, stop="http://127.0.0.1:9/")
    return parse_qs(urlsplit(final.url).query)["gateway_jwt"][0], browser


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require_binary("node", "apt-get install -y nodejs npm")
    tmp = tmp_path_factory.mktemp("tunnel")
    port = free_port()
    closed = free_port()  # nothing listens here
    with oidc_provider(tmp, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            tcp_service(tmp) as svc, full_backlog() as stuck:
        public = {"allow_public_unauthenticated_access": True}
        config = {
            "codec_type": "auto",
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups", "offline_access"],
            "cookie_secure": False,
            "policy": [
                {"from": "tcp+https://svc.test:7000", "to": f"tcp://127.0.0.1:{svc.port}",
                 "allowed_users": ["alice@example.test"]},
                {"from": "tcp+https://open.test:7001", "to": f"tcp://127.0.0.1:{svc.port}",
                 **public},
                {"from": "tcp+https://idle.test:7001", "to": f"tcp://127.0.0.1:{svc.port}",
                 "timeout": "1s", **public},
                {"from": "tcp+https://down.test:7002", "to": f"tcp://127.0.0.1:{closed}",
                 **public},
                {"from": "tcp+https://stuck.test:7003", "to": f"tcp://127.0.0.1:{stuck}",
                 "timeout": "1s", **public},
                {"from": "https://web.test", "to": "http://127.0.0.1:9", **public},
            ],
        }
        with gateway_daemon(tmp, config, port=port) as gw:
            alice, alice_browser = programmatic_token(port, "alice@example.test")
            bob, _ = programmatic_token(port, "bob@example.test")
            yield Env(gw, svc, port, alice, bob, alice_browser, tmp)


def connect(env: Env, authority: str, *, token: str = "", extra: bytes = b"",
            head: bytes | None = None) -> tuple[socket.socket, int, bytes]:
    """Send a CONNECT (and ``extra`` bytes in the same write); the socket, the status
    and whatever arrived after the response head."""
    sock = socket.create_connection(("127.0.0.1", env.port), timeout=10)
    if head is None:
        head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode()
        if token:
            head += f"Authorization: Gateway {token}\r\n".encode()
        head += b"\r\n"
    sock.sendall(head + extra)
    data = read_until(sock, HEAD_END)
    response, _, rest = data.partition(HEAD_END)
    return sock, status_of(response), rest


def receive_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_public_tunnel_with_early_bytes(env: Env) -> None:
    """200, then a byte pipe; bytes sent together with the CONNECT head arrive first."""
    sock, status, rest = connect(env, "open.test:7001", extra=b"hello\n")
    with sock:
        assert status == 200
        assert read_until(sock, b"hello\n", rest) == b"hello\n"
        sock.sendall(b"more bytes\n")
        assert read_until(sock, b"more bytes\n") == b"more bytes\n"


def test_half_close_from_the_client(env: Env) -> None:
    """The client's EOF reaches the service, which still answers before closing."""
    sock, status, rest = connect(env, "open.test:7001")
    with sock:
        assert status == 200
        sock.sendall(b"0123456789\n")
        sock.shutdown(socket.SHUT_WR)
        assert rest + receive_all(sock) == b"0123456789\nEOF after 11 bytes\n"


def test_half_close_from_the_service(env: Env) -> None:
    """The service closes its sending side: the client sees EOF and can still send;
    the service receives every byte sent after its half-close."""
    before = env.svc.process.log_text().count("RECEIVED_AFTER_SHUT 5000")
    sock, status, rest = connect(env, "open.test:7001", extra=b"SHUT\n")
    with sock:
        assert status == 200
        assert rest + receive_all(sock) == b"server done\n"
        sock.sendall(b"x" * 5000)
        sock.shutdown(socket.SHUT_WR)
        wait_until(lambda: env.svc.process.log_text().count("RECEIVED_AFTER_SHUT 5000")
                   > before, 10, what="the bytes sent after the service's half-close")


@pytest.mark.parametrize(("head", "status"), [
    (b"CONNECT nowhere.test:7000 HTTP/1.1\r\nHost: nowhere.test:7000\r\n\r\n", 404),
    (b"CONNECT svc.test:7999 HTTP/1.1\r\nHost: svc.test:7999\r\n\r\n", 404),
    (b"CONNECT web.test:443 HTTP/1.1\r\nHost: web.test:443\r\n\r\n", 405),
    (b"CONNECT open.test HTTP/1.1\r\nHost: open.test\r\n\r\n", 400),
    (b"CONNECT /open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\n\r\n", 400),
    (b"CONNECT http://open.test:7001/ HTTP/1.1\r\nHost: open.test:7001\r\n\r\n", 400),
    (b"CONNECT open.test:7001 HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT open.test:7001 HTTP/1.1\r\nHost: svc.test:7000\r\n\r\n", 400),
    (b"CONNECT open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\nHost: open.test:7001\r\n\r\n",
     400),
    (b"CONNECT open.test:99999 HTTP/1.1\r\nHost: open.test:99999\r\n\r\n", 400),
    (b"CONNECT open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\nContent-Length: 4\r\n\r\n",
     400),
    (b"CONNECT open.test:7001 HTTP/1.0\r\nHost: open.test:7001\r\n\r\n", 426),
])
def test_refused_connects_never_reach_the_service(env: Env, head: bytes, status: int) -> None:
    """Malformed or misrouted CONNECTs get their status and the connection closes; the
    TCP service accepts nothing."""
    accepts = env.svc.accepts()
    sock, got, _ = connect(env, "", head=head + b"junk after the head")
    with sock:
        assert got == status
        assert receive_all(sock) is not None  # then the gateway closes
    assert env.svc.accepts() == accepts


def test_get_on_a_tcp_route_is_405(env: Env) -> None:
    """An ordinary request to a TCP route's authority is told to use CONNECT."""
    accepts = env.svc.accepts()
    sock, status, rest = connect(env, "", head=b"GET / HTTP/1.1\r\nHost: open.test:7001\r\n"
                                             b"Connection: close\r\n\r\n")
    with sock:
        assert status == 405
        assert b"CONNECT" in rest + receive_all(sock)
    assert env.svc.accepts() == accepts


def test_upstream_down_and_stuck(env: Env) -> None:
    """Nothing listening: 503. A service that never accepts: 504 after the route
    timeout (1 s)."""
    sock, status, _ = connect(env, "down.test:7002")
    sock.close()
    assert status == 503
    started = time.monotonic()
    sock, status, _ = connect(env, "stuck.test:7003")
    sock.close()
    assert status == 504
    assert 0.9 < time.monotonic() - started < 5


def test_sign_in_and_policy(env: Env) -> None:
    """No token: 401 saying how to sign in; a user the route does not allow: 403;
    neither reaches the service. Alice's token: 200 and a working pipe."""
    accepts = env.svc.accepts()
    sock, status, rest = connect(env, "svc.test:7000")
    with sock:
        assert status == 401
        assert b"gateway tcp" in rest + receive_all(sock)
    sock, status, _ = connect(env, "svc.test:7000", token="not-a-token")
    sock.close()
    assert status == 401
    sock, status, _ = connect(env, "svc.test:7000", token=env.bob)
    sock.close()
    assert status == 403
    assert env.svc.accepts() == accepts
    sock, status, rest = connect(env, "svc.test:7000", token=env.alice, extra=b"ping\n")
    with sock:
        assert status == 200
        assert read_until(sock, b"ping\n", rest) == b"ping\n"
    assert env.svc.accepts() == accepts + 1


def test_idle_timeout(env: Env) -> None:
    """The route timeout is the pipe's idle timeout: traffic keeps it open, silence
    ends it."""
    sock, status, _ = connect(env, "idle.test:7001")
    with sock:
        assert status == 200
        for _ in range(3):  # 1.5 s of traffic, each gap under the 1 s timeout
            time.sleep(0.5)
            sock.sendall(b"tick\n")
            assert read_until(sock, b"tick\n") == b"tick\n"
        started = time.monotonic()
        assert receive_all(sock) == b""
        assert time.monotonic() - started < 5
    wait_until(lambda: any(e.get("detail") == "idle timeout" and e.get("host") ==
                           "idle.test:7001" for e in env.gw.log_events()), 5,
               what="the tunnel's access-log line")


def test_http2_connect(env: Env) -> None:
    """RFC 9113 8.5 over h2c: two tunnels as streams of one connection, END_STREAM as
    the half-close both ways; a CONNECT with :path is malformed and refused."""
    client = H2Client(env.port)
    with client:
        conn = client.conn
        for sid in (1, 3):
            conn.send_headers(sid, [(":method", "CONNECT"), (":authority", "open.test:7001")])
            conn.send_data(sid, f"stream {sid}\n".encode())
        conn.end_stream(3)
        client.sock.sendall(conn.data_to_send())
        got: dict[int, bytes] = {1: b"", 3: b""}
        status: dict[int, str] = {}
        ended: set[int] = set()
        ids: list[str] = []
        import h2.events

        deadline = time.monotonic() + 10
        while not (3 in ended and b"stream 1\n" in got[1]) and time.monotonic() < deadline:
            for event in conn.receive_data(client.sock.recv(65536)):
                if isinstance(event, h2.events.ResponseReceived):
                    status[event.stream_id] = str(dict(event.headers)[":status"])
                    ids.append(dict(event.headers).get("x-request-id", ""))
                elif isinstance(event, h2.events.DataReceived):
                    got[event.stream_id] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
            client.sock.sendall(conn.data_to_send())
        assert status == {1: "200", 3: "200"}
        assert len(ids) == 2 and all(len(i) == 32 for i in ids), ids  # each its request id
        assert got[3] == b"stream 3\nEOF after 9 bytes\n"
        assert got[1] == b"stream 1\n"
        assert 1 not in ended
    accepts = env.svc.accepts()
    with H2Client(env.port, validate=False) as client:
        try:
            bad = client.request("CONNECT", "/x", "open.test:7001")
            assert (bad.status, bad.reset) in ((400, None), (0, 1)), bad
        except ConnectionError as exc:  # h2 treats it as a connection error: GOAWAY
            assert "PROTOCOL_ERROR" in str(exc)
    assert env.svc.accepts() == accepts


def test_signing_out_ends_open_tunnels(env: Env) -> None:
    """Alice signs out in her browser: her open tunnel is closed within seconds, and
    her token is refused afterwards."""
    token, browser = programmatic_token(env.port, "alice@example.test")
    sock, status, _ = connect(env, "svc.test:7000", token=token)
    with sock:
        assert status == 200
        sock.sendall(b"still here\n")
        assert read_until(sock, b"still here\n") == b"still here\n"
        auth = f"http://auth.test:{env.port}/.gateway/signout/"
        confirm = browser.request("GET", auth)
        csrf = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
        assert browser.request("POST", auth, f"csrf={csrf}".encode()).status == 302
        started = time.monotonic()
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError):
            assert receive_all(sock) == b""
        assert time.monotonic() - started < 5
    sock, status, _ = connect(env, "svc.test:7000", token=token)
    sock.close()
    assert status == 401


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_one_gib_each_way_in_bounded_memory(env: Env) -> None:
    """1 GiB down (with a reader that stops for a second) and 1 GiB up through one
    tunnel each: byte-exact, and the gateway's memory does not grow with the data."""
    import hashlib

    pid = env.gw.process.pid
    assert pid is not None
    base = _rss_kib(pid)
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _rss_kib(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    size = 1 << 30
    try:
        sock, status, rest = connect(env, "open.test:7001", extra=f"SOURCE {size}\n".encode())
        with sock:
            assert status == 200
            received = len(rest)
            expected = hashlib.sha256(rest)
            paused = False
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
                expected.update(chunk)
                if not paused and received > size // 2:
                    paused = True
                    time.sleep(1.0)  # the gateway must stop reading the service meanwhile
        pattern = bytes(range(256)) * 4096
        check = hashlib.sha256()
        for _ in range(size // len(pattern)):
            check.update(pattern)
        assert (received, expected.hexdigest()) == (size, check.hexdigest())
        sock, status, _ = connect(env, "open.test:7001", extra=b"SINK\n")
        with sock:
            assert status == 200
            block = bytes(range(256)) * 4096
            for _ in range(size // len(block)):
                sock.sendall(block)
            sock.shutdown(socket.SHUT_WR)
            answer = read_until(sock, b"\n")
        assert answer == f"SINK {size} {check.hexdigest()}\n".encode()
    finally:
        done.set()
        sampler.join()
    assert peak[0] - base < 64 * 1024, f"RSS grew from {base} KiB to {peak[0]} KiB"


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, trustme.CA,
                                                                            TcpService]]:
    tmp = tmp_path_factory.mktemp("tunnel-tls")
    ca = trustme.CA()
    ca.issue_cert("open.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "cert.pem"))
    with tcp_service(tmp) as svc:
        config = {"insecure_server": False, "codec_type": "auto",
                  "certificates": [{"cert": str(tmp / "cert.pem"), "key": str(tmp / "cert.pem")}],
                  "policy": [{"from": "tcp+https://open.test:7001",
                              "to": f"tcp://127.0.0.1:{svc.port}",
                              "allow_public_unauthenticated_access": True},
                             {"from": "tcp+https://db.internal:5432",
                              "to": f"tcp://127.0.0.1:{svc.port}",
                              "allow_public_unauthenticated_access": True}]}
        with gateway_daemon(tmp, config) as gw:
            yield gw, ca, svc


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A fresh client context per connection (the h2 client sets ALPN on its own)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_tls_listener_http1_and_http2(tls_gateway: tuple[Daemon, trustme.CA, TcpService]
                                      ) -> None:
    """Over TLS: HTTP/1.1 CONNECT, and HTTP/2 CONNECT via ALPN."""
    gw, ca, _ = tls_gateway
    raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    with trusting(ca).wrap_socket(raw, server_hostname="open.test") as sock:
        sock.sendall(b"CONNECT open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\n\r\nover tls\n")
        data = read_until(sock, b"over tls\n")
        assert data.startswith(b"HTTP/1.1 200 ")
        assert data.endswith(b"\r\n\r\nover tls\n")
    with H2Client(gw.port, tls=trusting(ca), server_name="open.test") as client:
        conn = client.conn
        conn.send_headers(1, [(":method", "CONNECT"), (":authority", "open.test:7001")])
        conn.send_data(1, b"h2 over tls\n", end_stream=True)
        client.sock.sendall(conn.data_to_send())
        import h2.events

        body = b""
        ended = False
        deadline = time.monotonic() + 10
        while not ended and time.monotonic() < deadline:
            for event in conn.receive_data(client.sock.recv(65536)):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                ended = ended or isinstance(event, h2.events.StreamEnded)
            client.sock.sendall(conn.data_to_send())
        assert body == b"h2 over tls\nEOF after 12 bytes\n"


def test_tls_tunnel_through_the_gateways_own_name(
        tls_gateway: tuple[Daemon, trustme.CA, TcpService]) -> None:
    """A TCP route whose name no certificate covers is reached through the gateway's
    name (SNI open.test): the CONNECT authority is a target, not this connection's
    origin, so there is no 421."""
    gw, ca, _ = tls_gateway
    raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    with trusting(ca).wrap_socket(raw, server_hostname="open.test") as sock:
        sock.sendall(b"CONNECT db.internal:5432 HTTP/1.1\r\nHost: db.internal:5432\r\n\r\n"
                     b"internal\n")
        data = read_until(sock, b"internal\n")
        assert data.startswith(b"HTTP/1.1 200 ")


def _tunnel_status(port: int, authority: str, context: ssl.SSLContext | None = None) -> int:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = context.wrap_socket(raw, server_hostname="open.test") if context else raw
    with sock:
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        return status_of(read_until(sock, HEAD_END))


def test_balancing_health_checks_and_outlier_detection(tmp_path: Path) -> None:
    """Two upstreams, one down. With a TCP health check the dead one is taken out and
    every tunnel opens; with outlier detection it is ejected after its first failure."""
    dead, other_dead = free_port(), free_port()
    with tcp_service(tmp_path) as svc:
        up = [f"tcp://127.0.0.1:{svc.port}", f"tcp://127.0.0.1:{dead}"]
        # a route's hosts share state with routes of the same upstream list: another one
        ejectable = [f"tcp://127.0.0.1:{svc.port}", f"tcp://127.0.0.1:{other_dead}"]
        public = {"allow_public_unauthenticated_access": True, "lb_policy": "ROUND_ROBIN"}
        config = {"policy": [
            {"from": "tcp+https://checked.test:1", "to": up, **public, "health_checks": [
                {"interval": "200ms", "timeout": "1s", "unhealthy_threshold": 1,
                 "tcp_health_check": {}}]},
            {"from": "tcp+https://ejected.test:1", "to": ejectable, **public,
             "outlier_detection": {"consecutive_5xx": 1, "base_ejection_time": "30s",
                                   "max_ejection_percent": 50}},
        ]}
        with gateway_daemon(tmp_path, config) as gw:
            gw.wait_for_event(lambda e: e.get("state") == "unhealthy"
                              and e.get("host") == f"127.0.0.1:{dead}", 10,
                              what="the dead upstream marked unhealthy")
            assert [_tunnel_status(gw.port, "checked.test:1") for _ in range(6)] == [200] * 6
            first = [_tunnel_status(gw.port, "ejected.test:1") for _ in range(2)]
            assert sorted(first) == [200, 503]  # round robin meets the dead one once
            assert [_tunnel_status(gw.port, "ejected.test:1") for _ in range(6)] == [200] * 6


def test_client_certificate_required_by_the_route(tmp_path: Path) -> None:
    """tls_downstream_client_ca on a TCP route: no certificate, 495 and nothing reaches
    the service; a certificate from that CA, 200."""
    ca, client_ca = trustme.CA(), trustme.CA()
    ca.issue_cert("open.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "cert.pem"))
    client_ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    with tcp_service(tmp_path) as svc:
        config = {"insecure_server": False,
                  "certificates": [{"cert": str(tmp_path / "cert.pem"),
                                    "key": str(tmp_path / "cert.pem")}],
                  "policy": [{"from": "tcp+https://open.test:7001",
                              "to": f"tcp://127.0.0.1:{svc.port}",
                              "allow_public_unauthenticated_access": True,
                              "tls_downstream_client_ca_file": str(tmp_path / "client-ca.pem")}]}
        with gateway_daemon(tmp_path, config) as gw:
            assert _tunnel_status(gw.port, "open.test:7001", trusting(ca)) == 495
            assert svc.accepts() == 0
            with_cert = trusting(ca)
            client_ca.issue_cert("alice.example").configure_cert(with_cert)
            assert _tunnel_status(gw.port, "open.test:7001", with_cert) == 200
            wait_until(lambda: svc.accepts() == 1, 5, what="the one accepted tunnel")
            assert svc.accepts() == 1


def test_tls_tunnel_ends_with_close_notify(
        tls_gateway: tuple[Daemon, trustme.CA, TcpService]) -> None:
    """The service half-closes behind a TLS listener: TLS cannot carry a half-close, so
    the tunnel ends, with a TLS close_notify (a strict client sees a clean EOF, not a
    truncated stream)."""
    gw, ca, _ = tls_gateway
    raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    with trusting(ca).wrap_socket(raw, server_hostname="open.test",
                                  suppress_ragged_eofs=False) as sock:
        sock.sendall(b"CONNECT open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\n\r\nSHUT\n")
        data = read_until(sock, b"server done\n")
        assert data.endswith(b"\r\n\r\nserver done\n")
        assert sock.recv(65536) == b""  # ssl.SSLEOFError here if the TLS stream was cut


def _reset_seen(sock: socket.socket) -> bool:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return data == b"bye\n"
    return False


def test_reset_from_the_service_reaches_the_client(env: Env) -> None:
    """The service resets its connection: the client's connection is reset too, not
    closed as if the stream were complete (plain listener: the kernel relay)."""
    sock, status, rest = connect(env, "open.test:7001", extra=b"RESET\n")
    with sock:
        assert status == 200
        assert rest == b"" or rest == b"bye\n"
        if rest:
            with pytest.raises(ConnectionResetError):
                while sock.recv(65536):
                    pass
        else:
            assert _reset_seen(sock)


def test_reset_through_tls(tls_gateway: tuple[Daemon, trustme.CA, TcpService]) -> None:
    """The same over TLS (the copying pipe): the TLS connection is aborted, not closed
    with a close_notify that would claim a complete stream."""
    gw, ca, _ = tls_gateway
    raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    with trusting(ca).wrap_socket(raw, server_hostname="open.test",
                                  suppress_ragged_eofs=False) as sock:
        sock.sendall(b"CONNECT open.test:7001 HTTP/1.1\r\nHost: open.test:7001\r\n\r\nRESET\n")
        data = read_until(sock, b"bye\n")
        assert data.endswith(b"\r\n\r\nbye\n")
        with pytest.raises((ConnectionResetError, ssl.SSLEOFError)):
            while sock.recv(65536):
                pass
