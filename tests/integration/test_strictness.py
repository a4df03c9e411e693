"""Raw-socket attacks and malformed requests: the right 4xx, the connection closed,
nothing forwarded where it should not be, and the gateway still serving afterwards."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.processes import wait_until
from tests.support.rawhttp import RawClient, one_shot, status_of

pytestmark = pytest.mark.integration


class Env:
    gw: Daemon
    public: Upstream
    admin: Upstream


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("strict")
    with ExitStack() as stack:
        public = stack.enter_context(echo_upstream(tmp, name="public"))
        admin = stack.enter_context(echo_upstream(tmp, name="admin"))
        policy = [
            {"from": "https://app.test", "to": admin.url, "prefix": "/admin",
             "allowed_domains": ["example.com"]},
            {"from": "https://app.test", "to": public.url, "prefix": "/public",
             "allow_public_unauthenticated_access": True},
            {"from": "https://app.test", "to": public.url, "prefix": "/",
             "allow_public_unauthenticated_access": True},
        ]
        config = {
            "policy": policy, "timeout_read": "2s",
            "authenticate_service_url": "https://authenticate.example.com",
            "idp_provider": "oidc", "idp_provider_url": "https://idp.example.com",
            "idp_client_id": "gateway", "idp_client_secret": "secret",
        }
        e = Env()
        e.gw = stack.enter_context(gateway_daemon(tmp, config))
        e.public, e.admin = public, admin
        yield e


def requests_seen(upstream: Upstream) -> list[str]:
    """Request lines in the upstream's access log."""
    return re.findall(r'"([A-Z]+ \S+ HTTP/[0-9.]+)"', upstream.process.log_text())


def still_serving(env: Env) -> None:
    with RawClient(env.gw.port) as client:
        assert client.request("GET", "/public/ok", "app.test").status == 200


def refused(env: Env, raw: bytes, status: int) -> bytes:
    before_public, before_admin = len(requests_seen(env.public)), len(requests_seen(env.admin))
    reply = one_shot(env.gw.port, raw)
    assert status_of(reply) == status, reply[:200]
    assert requests_seen(env.admin)[before_admin:] == []
    assert len(requests_seen(env.public)) == before_public
    still_serving(env)
    return reply


@pytest.mark.parametrize("path", [
    "/public/../admin", "/public/%2e%2e/admin", "/public/%2E%2E/admin/x", "//admin",
    "/public/./../admin", "/public/..%2fadmin",
])
def test_path_tricks_never_reach_admin(env: Env, path: str) -> None:
    """Dot segments and doubled slashes are resolved before routing, so tricks land on
    the protected route (401) or are refused; the admin upstream never sees them."""
    before = len(requests_seen(env.admin))
    reply = one_shot(env.gw.port, f"GET {path} HTTP/1.1\r\nHost: app.test\r\n"
                                  "Connection: close\r\n\r\n".encode())
    assert status_of(reply) in (400, 401)
    assert len(requests_seen(env.admin)) == before
    still_serving(env)


def test_encoded_slash_refused(env: Env) -> None:
    """%2f in a path cannot be normalised safely: 400, connection closed."""
    reply = refused(env, b"GET /public%2f..%2fadmin HTTP/1.1\r\nHost: app.test\r\n\r\n", 400)
    assert b"encoded slash" in reply


def test_normalised_path_is_what_upstream_gets(env: Env) -> None:
    """The public upstream receives exactly the normalised path the router saw."""
    with RawClient(env.gw.port) as client:
        reply = client.request("GET", "/public/a/./b/../c?x=1", "app.test")
    assert json.loads(reply.body)["path"] == "/public/a/c?x=1"


def test_http10_refused(env: Env) -> None:
    """HTTP/1.0 gets 426 with a body saying why."""
    reply = refused(env, b"GET /public/x HTTP/1.0\r\nHost: app.test\r\n\r\n", 426)
    assert b"HTTP/1.0 is not supported" in reply


@pytest.mark.parametrize("raw", [
    b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: app.test\r\n\r\n",
    b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n"
    b"\r\nhello!",
    b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: identity\r\n\r\n",
    b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding:\x0bchunked\r\n\r\n",
    b"GET /public/x HTTP/1.1\r\nHost: app.test\r\nHost: other.test\r\n\r\n",
    b"GET /public/x HTTP/1.1\r\n\r\n",
    b"GET /public/x HTTP/1.1\r\nHost: app.test\r\nBad Header: x\r\n\r\n",
    b"GET /public/x HTTP/1.1\r\nHost: app.test\r\n X-Folded: continuation\r\n\r\n",
])
def test_ambiguous_framing_refused(env: Env, raw: bytes) -> None:
    """Smuggling shapes get 400, the connection closes, and nothing is forwarded."""
    refused(env, raw, 400)


def test_invalid_chunking_aborts(env: Env) -> None:
    """Bad chunk sizes get 400 and the connection is closed."""
    reply = one_shot(env.gw.port, b"POST /public/x HTTP/1.1\r\nHost: app.test\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
    assert status_of(reply) == 400
    still_serving(env)


def test_size_limits(env: Env) -> None:
    """An 8 KiB+ target gives 414; 64 KiB of headers or 100+ fields give 431."""
    refused(env, b"GET /public/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: app.test\r\n\r\n", 414)
    refused(env, b"GET /public/x HTTP/1.1\r\nHost: app.test\r\nX-Big: " + b"b" * 70000
            + b"\r\n\r\n", 431)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(120))
    refused(env, b"GET /public/x HTTP/1.1\r\nHost: app.test\r\n" + many + b"\r\n", 431)


def test_slow_headers_timeout(env: Env) -> None:
    """A client that never finishes its headers is cut off after timeout_read (2 s)."""
    with RawClient(env.gw.port, timeout=10) as client:
        client.send(b"GET /public/x HTTP/1.1\r\nHost: app.test\r\nX-Slow: ")
        assert client.closed_by_peer(timeout=6)
    still_serving(env)


def test_pipelined_requests_answer_in_order(env: Env) -> None:
    """Pipelined requests are answered in order on the same connection."""
    with RawClient(env.gw.port) as client:
        client.send(b"GET /public/1 HTTP/1.1\r\nHost: app.test\r\n\r\n"
                    b"GET /public/2 HTTP/1.1\r\nHost: app.test\r\n\r\n"
                    b"GET /ping HTTP/1.1\r\nHost: app.test\r\n\r\n")
        first, second, third = client.response(), client.response(), client.response()
    assert json.loads(first.body)["path"] == "/public/1"
    assert json.loads(second.body)["path"] == "/public/2"
    assert third.body == b"OK\n"


def test_connection_close_honoured(env: Env) -> None:
    """Connection: close ends the connection after the response."""
    with RawClient(env.gw.port) as client:
        reply = client.request("GET", "/public/x", "app.test", {"Connection": "close"})
        assert reply.headers.get("connection") == "close"
        assert client.closed_by_peer()


def test_expect_continue(env: Env) -> None:
    """Expect: 100-continue gets a 100 from the gateway, then the body is forwarded."""
    with RawClient(env.gw.port) as client:
        client.send(b"POST /public/x HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n"
                    b"Expect: 100-continue\r\n\r\n")
        interim = client.sock.recv(64)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        client.send(b"hello")
        reply = client.response("POST")
    assert json.loads(reply.body)["body_length"] == 5


def test_keeps_serving_after_garbage(env: Env) -> None:
    """Binary garbage gets 400 and the gateway serves the next client."""
    assert status_of(one_shot(env.gw.port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
                                           b"\r\n\r\n")) == 400
    wait_until(lambda: still_serving(env) is None, 5)

