"""Connection abuse on the TLS listener: handshakes that never finish, silent connections,
request heads and bodies trickled over TLS (HTTP/1.1 and HTTP/2). Each is cut within its
deadline, the upstream never sees a request, and a normal client is served meanwhile.

Deadlines here: timeout_read 2 s (so the handshake deadline, min(timeout_read, 10 s), is
2 s too), timeout_idle 4 s; the watchdog adds up to 0.25 s."""

from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import ExitStack

import h2.config
import h2.connection
import h2.events
import pytest
import trustme

from tests.support.abuse import client_hello, drip, insecure_context, raw_socket, until_closed
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.rawhttp import RawClient, status_of

pytestmark = pytest.mark.integration

READ = 2.0
IDLE = 4.0
SLACK = 1.5  # watchdog period, scheduling on a loaded 2-core machine


class Env:
    gw: Daemon
    up: Upstream
    ca: trustme.CA


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("abuse-tls")
    ca = trustme.CA()
    ca.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(str(tmp / "app.pem"))
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp, name="abused"))
        config = {
            "insecure_server": False, "codec_type": "auto",
            "certificate_file": str(tmp / "app.pem"), "certificate_key_file": str(tmp / "app.pem"),
            "timeout_read": f"{READ:g}s", "timeout_idle": f"{IDLE:g}s",
            "policy": [{"from": "https://app.test", "to": up.url,
                        "allow_public_unauthenticated_access": True}],
        }
        e = Env()
        e.gw = stack.enter_context(gateway_daemon(tmp, config))
        e.up, e.ca = up, ca
        yield e


def requests_seen(env: Env) -> int:
    return len(re.findall(r'"[A-Z]+ \S+ HTTP/[0-9.]+"', env.up.process.log_text()))


def served(env: Env) -> bool:
    """A well-behaved client gets its answer (checked while an abuser is connected)."""
    context = ssl.create_default_context()
    env.ca.configure_trust(context)
    with RawClient(env.gw.port, tls=context, server_name="app.test") as client:
        return client.request("GET", "/ok", "app.test").status == 200


@pytest.mark.parametrize("opening", ["nothing", "half a ClientHello", "a whole ClientHello"])
def test_unfinished_handshake_is_cut(env: Env, opening: str) -> None:
    """Silent, a partial ClientHello, or a full one and then nothing more (the server's
    flight is never answered): closed at the handshake deadline."""
    hello = client_hello()
    sent = {"nothing": b"", "half a ClientHello": hello[: len(hello) // 2],
            "a whole ClientHello": hello}[opening]
    before = requests_seen(env)
    with raw_socket(env.gw.port) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        assert served(env)
        seconds, _ = until_closed(sock, READ + 3 * SLACK, started)
    assert READ - 0.3 < seconds < READ + SLACK, seconds
    assert requests_seen(env) == before + 1  # only the well-behaved client's request


def test_silent_after_handshake_is_idle(env: Env) -> None:
    """A connection that finished its handshake and says nothing is an idle connection:
    closed at timeout_idle (not at the handshake deadline)."""
    with raw_socket(env.gw.port) as raw:
        started = time.monotonic()
        tls = insecure_context().wrap_socket(raw, server_hostname="app.test")
        seconds, received = until_closed(tls, IDLE + 3 * SLACK, started)
    assert IDLE - 0.3 < seconds < IDLE + SLACK, seconds
    assert received == b""


def test_trickled_head_over_tls_gets_408(env: Env) -> None:
    """Headers one byte every 0.2 s: 408 at timeout_read from the first byte."""
    before = requests_seen(env)
    head = b"GET /slow HTTP/1.1\r\nHost: app.test\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n\r\n"
    with raw_socket(env.gw.port) as raw:
        tls = insecure_context().wrap_socket(raw, server_hostname="app.test")
        started = time.monotonic()
        tls.sendall(head[:1])
        assert served(env)
        seconds, received = until_closed(tls, READ + 3 * SLACK, started, drip(head[1:]))
    assert seconds < READ + SLACK, seconds
    assert status_of(received) == 408
    assert requests_seen(env) == before + 1


def test_stalled_body_over_tls_gets_408(env: Env) -> None:
    """A body that stops arriving: 408 after timeout_read without a byte (the rule for
    bodies is an idle deadline between reads)."""
    with raw_socket(env.gw.port) as raw:
        tls = insecure_context().wrap_socket(raw, server_hostname="app.test")
        tls.sendall(b"POST /upload HTTP/1.1\r\nHost: app.test\r\nContent-Length: 1000\r\n\r\n"
                    + b"x" * 10)
        started = time.monotonic()
        assert served(env)
        seconds, received = until_closed(tls, READ + 3 * SLACK, started)
    assert READ - 0.3 < seconds < READ + SLACK, seconds
    assert status_of(received) == 408


def _h2_preface_and_partial_headers() -> tuple[bytes, bytes]:
    """An HTTP/2 client's preface and SETTINGS, then one request's HEADERS frame without
    END_HEADERS followed by a CONTINUATION frame (both as bytes)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    preface = conn.data_to_send()
    block = conn.encoder.encode([(":method", "GET"), (":scheme", "https"),
                                 (":authority", "app.test"), (":path", "/h2-slow"),
                                 ("x-pad", "a" * 100)])
    first, rest = block[:10], block[10:]
    headers = len(first).to_bytes(3, "big") + b"\x01\x01" + (1).to_bytes(4, "big") + first
    continuation = len(rest).to_bytes(3, "big") + b"\x09\x04" + (1).to_bytes(4, "big") + rest
    return preface, headers + continuation


def test_trickled_h2_headers_are_cut(env: Env) -> None:
    """HEADERS then CONTINUATION one byte every 0.2 s: cut at timeout_read."""
    before = requests_seen(env)
    preface, frames = _h2_preface_and_partial_headers()
    with raw_socket(env.gw.port) as raw:
        tls = insecure_context(["h2"]).wrap_socket(raw, server_hostname="app.test")
        assert tls.selected_alpn_protocol() == "h2"
        tls.sendall(preface + frames[:1])
        started = time.monotonic()
        seconds, _ = until_closed(tls, READ + 3 * SLACK, started, drip(frames[1:]))
    assert seconds < READ + SLACK, seconds
    assert requests_seen(env) == before


def test_stalled_h2_body_is_cut(env: Env) -> None:
    """An HTTP/2 upload that stops: the stream (or the connection) ends after
    timeout_read without DATA, as for HTTP/1.1."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":authority", "app.test"),
                          (":path", "/h2-upload"), ("content-length", "1000")])
    conn.send_data(1, b"x" * 10)
    with raw_socket(env.gw.port) as raw:
        tls = insecure_context(["h2"]).wrap_socket(raw, server_hostname="app.test")
        tls.sendall(conn.data_to_send())
        started = time.monotonic()
        seconds, received = until_closed(tls, READ + SLACK + 0.5, started)
    ended = seconds < READ + SLACK or any(
        isinstance(e, (h2.events.StreamReset, h2.events.StreamEnded))
        for e in conn.receive_data(received))
    assert ended


def test_proxy_header_on_tls_listener_without_the_setting(env: Env) -> None:
    """use_proxy_protocol off: a PROXY line is no ClientHello; the handshake fails at
    once and nothing reaches the upstream."""
    before = requests_seen(env)
    with raw_socket(env.gw.port) as sock:
        sock.sendall(b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 443\r\n" + client_hello())
        seconds, _ = until_closed(sock, READ + SLACK)
    assert seconds < 1.0, seconds
    assert requests_seen(env) == before


def test_served_after_abuse(env: Env) -> None:
    assert served(env)
    with socket.create_connection(("127.0.0.1", env.gw.port), timeout=5):
        pass
