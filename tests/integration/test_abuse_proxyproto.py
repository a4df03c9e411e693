"""PROXY protocol headers only from ``use_proxy_protocol`` peers, and every edge of them:
split headers, v2 LOCAL, forged or oversized or half-sent headers. With the setting off a
PROXY line is just a bad request and never moves the client address.

timeout_read is 2 s, so the setup deadline (the PROXY header, min(timeout_read, 10 s))
is 2 s too."""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.abuse import raw_socket, until_closed
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.rawhttp import one_shot, status_of

pytestmark = pytest.mark.integration

READ = 2.0
SLACK = 1.5
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
REQUEST = b"GET /who HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"


class Env:
    on: Daemon
    off: Daemon
    up: Upstream


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("abuse-proxy")
    with ExitStack() as stack:
        e = Env()
        e.up = stack.enter_context(echo_upstream(tmp, name="behind"))
        config = {"timeout_read": f"{READ:g}s", "policy": [
            {"from": "https://app.test", "to": e.up.url,
             "allow_public_unauthenticated_access": True}]}
        (tmp / "on").mkdir()
        (tmp / "off").mkdir()
        e.on = stack.enter_context(gateway_daemon(tmp / "on", {**config,
                                                               "use_proxy_protocol": True}))
        e.off = stack.enter_context(gateway_daemon(tmp / "off", config))
        yield e


def requests_seen(env: Env) -> int:
    return len(re.findall(r'"[A-Z]+ \S+ HTTP/[0-9.]+"', env.up.process.log_text()))


def forwarded_for(reply: bytes) -> str:
    assert status_of(reply) == 200, reply[:300]
    body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    return str({k.lower(): v for k, v in body["headers"]}["x-forwarded-for"])


def v2(command: int = 1, block: bytes | None = None, family: int = 0x11) -> bytes:
    if block is None:
        block = bytes([198, 51, 100, 7, 127, 0, 0, 1]) + struct.pack("!HH", 4242, 443)
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(block)) + block


def served_behind_proxy(env: Env) -> bool:
    reply = one_shot(env.on.port, b"PROXY TCP4 192.0.2.44 127.0.0.1 1 2\r\n" + REQUEST)
    return forwarded_for(reply) == "192.0.2.44"


def test_header_split_across_reads(env: Env) -> None:
    """A header arriving in pieces (as TCP may deliver it) is read whole."""
    with raw_socket(env.on.port) as sock:
        for piece in (b"PRO", b"XY TCP4 203.0", b".113.9 127.0.0.1 5555 ", b"443\r"):
            sock.sendall(piece)
            time.sleep(0.05)
        sock.sendall(b"\n" + REQUEST)
        _, reply = until_closed(sock, 10)
    assert forwarded_for(reply) == "203.0.113.9"


def test_address_used_for_access_log(env: Env) -> None:
    """The access log names the header's client, not the loopback peer."""
    reply = one_shot(env.on.port, v2() + REQUEST)
    assert forwarded_for(reply) == "198.51.100.7"
    env.on.wait_for_event(lambda e: e.get("client") == "198.51.100.7", what="access log")


def test_v2_local_uses_real_peer(env: Env) -> None:
    """LOCAL (a balancer's own health check): the connection is accepted and the real
    peer is the client."""
    assert forwarded_for(one_shot(env.on.port, v2(command=0) + REQUEST)) == "127.0.0.1"


@pytest.mark.parametrize("header", [
    b"GET /who HTTP/1.1\r\n",  # no header at all
    b"PROXY TCP4 forged.example 127.0.0.1 5555 443\r\n",  # not an IP literal
    b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 443 extra\r\n",
    b"PROXY TCP4 " + b"9" * 200 + b"\r\n",  # no CRLF within 107 bytes
    V2_SIGNATURE + b"\x21\x11\xff\xff" + b"\x00" * 5000,  # a 64 KiB block announced
    V2_SIGNATURE + b"\x25\x11\x00\x0c" + b"\x00" * 12,  # unknown command
])
def test_bad_header_closed_at_once(env: Env, header: bytes) -> None:
    before = requests_seen(env)
    with raw_socket(env.on.port) as sock:
        sock.sendall(header + REQUEST)
        seconds, reply = until_closed(sock, READ + SLACK)
    assert seconds < 1.0 and reply == b"", (seconds, reply)
    assert requests_seen(env) == before
    assert served_behind_proxy(env)


@pytest.mark.parametrize("partial", [b"", b"PROXY TCP4 203.0.113.9 ", V2_SIGNATURE[:7],
                                     v2()[:20]])
def test_half_header_closed_at_setup_deadline(env: Env, partial: bytes) -> None:
    with raw_socket(env.on.port) as sock:
        started = time.monotonic()
        sock.sendall(partial)
        assert served_behind_proxy(env)
        seconds, _ = until_closed(sock, READ + 3 * SLACK, started)
    assert READ - 0.3 < seconds < READ + SLACK, seconds


@pytest.mark.parametrize("header", [b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 443\r\n", v2()])
def test_header_refused_when_off(env: Env, header: bytes) -> None:
    """Without use_proxy_protocol a PROXY header is not HTTP: 400 and closed, nothing
    forwarded, and the client address never changes."""
    before = requests_seen(env)
    reply = one_shot(env.off.port, header + REQUEST)
    assert status_of(reply) == 400, reply[:200]
    assert requests_seen(env) == before
    assert forwarded_for(one_shot(env.off.port, REQUEST)) == "127.0.0.1"
