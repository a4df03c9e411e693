"""Keep-alive reuse after large responses (issue 19): the sequence that stalled.

A client repeats ``GET /big``, ``GET /``, ``HEAD /big``, ``GET /empty`` (204),
``GET /big``, ``GET /big`` on one connection. A large response fills the client's send
buffer, the gateway pauses the upstream read, and the read that completes the response
can be that same one: the upstream connection then went back to the pool still paused,
and the next request on it waited for a response nobody read. Before the fix this
stalled within about 44 rounds on a plain listener and in the first round over TLS
with a slow reader; every case here runs long enough to have hit it.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.nginx import NGINX_HINT, Nginx, nginx_binary, nginx_upstream
from tests.support.peers import echo_upstream
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration

BIG = bytes(range(256)) * (4 << 12)  # what nginx serves at /big (4 MiB)
ECHO_BIG = 4 << 20
SEQUENCE = (("GET", "/big", 200, len(BIG)), ("GET", "/", 200, 2048), ("HEAD", "/big", 200, 0),
            ("GET", "/empty", 204, 0), ("GET", "/big", 200, len(BIG)),
            ("GET", "/big", 200, len(BIG)))


@dataclass
class Env:
    nginx: Nginx
    plain: Daemon
    tls: Daemon
    client_tls: ssl.SSLContext
    ca_file: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    if nginx_binary() is None:
        pytest.fail(f"nginx is not installed ({NGINX_HINT})")
    tmp = tmp_path_factory.mktemp("reuse")
    ca = trustme.CA()
    ca.issue_cert("app.test", "echo.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    (tmp / "plain").mkdir()
    (tmp / "tls").mkdir()
    with nginx_upstream(tmp) as nginx, echo_upstream(tmp, name="echo", quiet=True) as echo:
        policy = [{"from": "https://app.test", "to": nginx.url,
                   "allow_public_unauthenticated_access": True},
                  {"from": "https://echo.test", "to": echo.url,
                   "allow_public_unauthenticated_access": True}]
        tls_config: dict[str, Any] = {
            "insecure_server": False, "policy": policy, "codec_type": "auto",
            "certificates": [{"cert": str(tmp / "cert.pem"), "key": str(tmp / "cert.pem")}]}
        with gateway_daemon(tmp / "plain", {"policy": policy, "codec_type": "auto"}) as plain, \
                gateway_daemon(tmp / "tls", tls_config) as tls:
            yield Env(nginx, plain, tls, client_tls, tmp / "ca.pem")


def client(env: Env, listener: str, slow: bool) -> RawClient:
    # A short timeout: a stall fails the test in seconds, not at the route timeout.
    if listener == "tls":
        return RawClient(env.tls.port, timeout=5.0, tls=env.client_tls, server_name="app.test",
                         receive_buffer=16384 if slow else 0)
    return RawClient(env.plain.port, timeout=5.0, receive_buffer=16384 if slow else 0)


@pytest.mark.parametrize(("listener", "slow", "rounds"), [
    ("plain", False, 120), ("tls", False, 60), ("plain", True, 5), ("tls", True, 5)])
def test_large_responses_then_reuse(env: Env, listener: str, slow: bool, rounds: int) -> None:
    """The issue's sequence on one keep-alive connection through an nginx upstream:
    every response complete and byte-exact, every round, fast and slow readers."""
    pause = 0.002 if slow else 0.0
    with client(env, listener, slow) as conn:
        for round_no in range(rounds):
            for method, path, status, length in SEQUENCE:
                try:
                    reply = conn.request(method, path, "app.test", slow=pause)
                except TimeoutError:
                    pytest.fail(f"round {round_no}: no answer to {method} {path} within 5 s "
                                "on a reused keep-alive connection")
                assert (reply.status, len(reply.body)) == (status, length), \
                    (round_no, method, path)
                if path == "/big" and method == "GET":
                    assert reply.body == BIG, (round_no, "body corrupted")


@pytest.mark.parametrize("listener", ["plain", "tls"])
def test_echo_upstream_large_then_small(env: Env, listener: str) -> None:
    """The echo upstream streams in 64 KiB writes (nginx uses sendfile): large then
    small responses alternate on one connection, read slowly."""
    with client(env, listener, slow=True) as conn:
        for round_no in range(4):
            big = conn.request("GET", f"/bytes/{ECHO_BIG}", "echo.test", slow=0.002)
            assert (big.status, len(big.body)) == (200, ECHO_BIG), round_no
            small = conn.request("GET", "/status/204", "echo.test")
            assert small.status == 204, round_no
            head = conn.request("HEAD", f"/bytes/{ECHO_BIG}", "echo.test")
            assert (head.status, head.body) == (200, b""), round_no


@pytest.mark.parametrize(("listener", "slow"), [("plain", False), ("tls", False),
                                                ("plain", True), ("tls", True)])
def test_http2_large_responses_then_reuse(env: Env, listener: str, slow: bool) -> None:
    """HTTP/2 (h2c prior knowledge, or ALPN over TLS): the sequence's requests as
    streams of one connection, fast, or reading slowly (window updates delayed)."""
    if listener == "tls":
        conn = H2Client(env.tls.port, timeout=5.0, tls=env.client_tls, server_name="app.test")
    else:
        conn = H2Client(env.plain.port, timeout=5.0)
    with conn:
        for round_no in range(6 if slow else 20):
            for method, path, status, length in SEQUENCE:
                try:
                    reply = conn.request(method, path, "app.test", slow=0.0003 if slow else 0)
                except TimeoutError:
                    pytest.fail(f"round {round_no}: no answer to {method} {path} within 5 s "
                                "on a reused HTTP/2 connection")
                assert (reply.status, len(reply.body), reply.reset) == (status, length, None), \
                    (round_no, method, path)


@pytest.mark.parametrize("listener", ["plain", "tls"])
def test_pipelined_batch_larger_than_one_read(env: Env, listener: str) -> None:
    """1500 pipelined requests in one write (67,500 bytes, more than one 64 KiB read),
    then a GET and a POST whose body crosses the read boundary: everything answered.
    Reading used to stay paused for the request still arriving, and stalled."""
    count = 1500
    request = b"GET /status/204 HTTP/1.1\r\nHost: echo.test\r\n\r\n"
    with client(env, listener, slow=False) as conn:
        conn.send(request * count)
        for n in range(count):
            try:
                assert conn.response().status == 204, n
            except TimeoutError:
                pytest.fail(f"pipelined response {n} of {count} never came")
        body = b"x" * (65536 - len(request) - 80)
        post = (b"POST /upload HTTP/1.1\r\nHost: echo.test\r\nContent-Length: %d\r\n\r\n"
                % len(body)) + body
        conn.send(request + post)
        assert conn.response().status == 204
        reply = conn.response("POST")
        assert reply.status == 200
        assert b'"body_length": %d' % len(body) in reply.body
