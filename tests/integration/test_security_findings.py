"""Issue 12's findings, end to end through the daemon: path parameters that hide a dot
segment, and underscore twins of the headers the gateway sets.

Each case shows the answer the client gets, that the upstream never saw what it must not
(its access log), and that the gateway keeps serving."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.peers import Upstream, echo_upstream
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration
IDENTITY = {
    "authenticate_service_url": "https://authenticate.example.com",
    "idp_provider": "oidc", "idp_provider_url": "https://idp.example.com",
    "idp_client_id": "gateway", "idp_client_secret": "secret",
}
ACTIONS = ("allow", "drop", "reject")


class Env:
    gw: dict[str, Daemon]
    public: Upstream
    admin: Upstream


def policy(public: Upstream, admin: Upstream) -> list[dict[str, Any]]:
    return [
        {"from": "https://app.test", "to": admin.url, "prefix": "/admin",
         "allowed_domains": ["example.com"]},
        {"from": "https://app.test", "to": public.url, "prefix": "/public/",
         "allow_public_unauthenticated_access": True,
         "set_request_headers": {"X-Route": "public"},
         "remove_request_headers": ["X-Secret"]},
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("findings")
    with ExitStack() as stack:
        e = Env()
        e.public = stack.enter_context(echo_upstream(tmp, name="public"))
        e.admin = stack.enter_context(echo_upstream(tmp, name="admin"))
        e.gw = {}
        for action in ACTIONS:
            home = Path(tmp / action)
            home.mkdir()
            e.gw[action] = stack.enter_context(gateway_daemon(home, {
                "policy": policy(e.public, e.admin), "codec_type": "auto",
                "jwt_claims_headers": {"X-Email": "email"},
                "headers_with_underscores_action": action,
                **IDENTITY,
            }))
        yield e


def seen(upstream: Upstream) -> list[str]:
    """Request targets in the upstream's access log."""
    return re.findall(r'"[A-Z]+ (\S+) HTTP/[0-9.]+"', upstream.process.log_text())


def echoed(body: bytes) -> list[tuple[str, str]]:
    return [(k, v) for k, v in json.loads(body)["headers"]]


# -- path parameters ---------------------------------------------------------------

DOT_PARAMETERS = ["/public/..;/admin", "/public/..%3b/admin", "/public/..;jsessionid=1/admin",
                  "/public/%2e%2e;x/admin", "/public/.%2E%3Bx/admin"]


@pytest.mark.parametrize("path", DOT_PARAMETERS)
def test_dot_segment_with_parameters_refused_http1(env: Env, path: str) -> None:
    """400 naming the reason; neither upstream sees the request; the connection's next
    request is still served."""
    gw = env.gw["allow"]
    before_public, before_admin = len(seen(env.public)), len(seen(env.admin))
    with RawClient(gw.port) as client:
        reply = client.request("GET", path, "app.test")
        assert reply.status == 400, reply
        assert b"';' parameters" in reply.body
    assert len(seen(env.public)) == before_public
    assert len(seen(env.admin)) == before_admin
    with RawClient(gw.port) as client:
        assert client.request("GET", "/public/ok", "app.test").status == 200


@pytest.mark.parametrize("path", DOT_PARAMETERS)
def test_dot_segment_with_parameters_refused_http2(env: Env, path: str) -> None:
    """The same normaliser serves HTTP/2: the stream gets 400, the connection goes on."""
    gw = env.gw["allow"]
    before = len(seen(env.public)) + len(seen(env.admin))
    with H2Client(gw.port) as client:
        assert client.request("GET", path, "app.test").status == 400
        assert client.request("GET", "/public/ok", "app.test").status == 200
    assert len(seen(env.public)) + len(seen(env.admin)) == before + 1


def test_last_segment_parameters_forwarded(env: Env) -> None:
    """The last segment's parameters (session ids) still reach the upstream; since issue
    39 those of inner segments are removed, as Tomcat, Jetty and Spring remove them, so
    every upstream reads the path the policy matched."""
    with RawClient(env.gw["allow"].port) as client:
        reply = client.request("GET", "/public/app;jsessionid=AB12/page;v=2", "app.test")
    assert reply.status == 200
    assert json.loads(reply.body)["path"] == "/public/app/page;v=2"


# -- underscore twins ----------------------------------------------------------------

TWINS = {
    "X_Gateway_Jwt_Assertion": "forged",
    "X-Gateway_Claim-Email": "admin@example.com",
    "x_gateway_claim_email": "admin@example.com",
    "X_Forwarded_For": "10.6.6.6",
    "X_Forwarded_Host": "admin.test",
    "X_Route": "client",
    "X_Secret": "client",
    "X_Email": "admin@example.com",  # a jwt_claims_headers name
}


def test_underscore_twins_dropped_and_logged(env: Env) -> None:
    """With the default (allow), underscore headers reach the upstream unless they read as
    one the gateway sets; those are dropped and each drop is logged."""
    gw = env.gw["allow"]
    with RawClient(gw.port) as client:
        reply = client.request("GET", "/public/twins", "app.test",
                               headers={**TWINS, "X_Custom_Thing": "kept"})
    assert reply.status == 200
    names = [name for name, _ in echoed(reply.body)]
    assert "X_Custom_Thing" in names
    for twin in TWINS:
        assert twin not in names, twin
    assert dict(echoed(reply.body))["X-Route"] == "public"
    logged = {e.get("header") for e in gw.log_events()
              if "dropped the client header" in e.get("message", "")}
    assert set(TWINS) <= logged


def test_underscore_twins_dropped_over_http2(env: Env) -> None:
    """HTTP/2 requests go through the same header rules."""
    with H2Client(env.gw["allow"].port) as client:
        reply = client.request("GET", "/public/twins", "app.test",
                               headers=[(k.lower(), v) for k, v in TWINS.items()])
    assert reply.status == 200
    names = {name.lower() for name, _ in echoed(reply.body)}
    assert not names & {k.lower() for k in TWINS}


def test_drop_action_removes_every_underscore_header(env: Env) -> None:
    with RawClient(env.gw["drop"].port) as client:
        reply = client.request("GET", "/public/drop", "app.test",
                               headers={"X_Custom_Thing": "gone", "X-Custom-Other": "kept"})
    assert reply.status == 200
    names = [name for name, _ in echoed(reply.body)]
    assert "X_Custom_Thing" not in names
    assert "X-Custom-Other" in names


def test_reject_action_answers_400_before_any_upstream(env: Env) -> None:
    gw = env.gw["reject"]
    before = len(seen(env.public))
    with RawClient(gw.port) as client:
        reply = client.request("GET", "/public/reject", "app.test",
                               headers={"X_Custom_Thing": "x"})
        assert reply.status == 400
        assert b"X_Custom_Thing" in reply.body
        assert client.request("GET", "/public/ok", "app.test").status == 200
    assert len(seen(env.public)) == before + 1


# -- the gateway's own credentials on public routes ----------------------------------


def test_public_route_never_forwards_the_gateway_credentials(env: Env) -> None:
    """A public route has no authorization decision, yet its upstream must not receive
    the session cookie or a gateway bearer token (it could replay them to the gateway);
    other cookies and other Authorization schemes pass."""
    with RawClient(env.gw["allow"].port) as client:
        reply = client.request("GET", "/public/creds", "app.test", headers={
            "Cookie": "_gateway=sealed-session; theme=dark; _gateway_0=chunk"})
        sent = dict(echoed(reply.body))
        assert sent["Cookie"] == "theme=dark"
        for token in ("Gateway abc.def", "Bearer Gateway-abc.def"):
            reply = client.request("GET", "/public/creds", "app.test",
                                   headers={"Authorization": token})
            assert "Authorization" not in dict(echoed(reply.body)), token
        reply = client.request("GET", "/public/creds", "app.test",
                               headers={"Authorization": "Bearer app-token"})
        assert dict(echoed(reply.body))["Authorization"] == "Bearer app-token"


# -- an upstream that switches protocols unasked --------------------------------------


SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


class RawUpstream:
    """Answers every request with ``response`` and records what it gets."""

    def __init__(self, response: bytes = SWITCH) -> None:
        self.response = response
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in self.received:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        self.received += chunk
                    conn.sendall(self.response)
                    while chunk := conn.recv(65536):
                        self.received += chunk

    def close(self) -> None:
        self.server.close()


def test_unrequested_switch_is_a_502_and_no_pipe(tmp_path: Path) -> None:
    """An upstream answering 101 to a request without Upgrade gets the client a 502; the
    client's next request on its connection is routed and authorized as usual, and never
    reaches that upstream as raw bytes."""
    upstream = RawUpstream()
    try:
        with gateway_daemon(tmp_path, {"policy": [
            {"from": "https://app.test", "prefix": "/admin", "to": "http://127.0.0.1:9",
             "allowed_domains": ["example.com"]},
            {"from": "https://app.test", "prefix": "/", "to": f"http://127.0.0.1:{upstream.port}",
             "allow_public_unauthenticated_access": True, "allow_websockets": True},
        ], **IDENTITY}) as gw, RawClient(gw.port) as client:
            assert client.request("GET", "/public/x", "app.test").status == 502
            assert client.request("GET", "/admin/secret", "app.test").status == 401
    finally:
        upstream.close()
    assert b"/admin/secret" not in upstream.received


@pytest.mark.parametrize("head", [
    b"X-Big: " + b"a" * (70 * 1024) + b"\r\n",
    b"".join(b"X-Many-%d: 1\r\n" % i for i in range(300)),
])
def test_oversized_upstream_head_is_a_502(tmp_path: Path, head: bytes) -> None:
    """An upstream response head past 64 KiB or 200 fields is not buffered without end:
    502, and the gateway keeps serving."""
    upstream = RawUpstream(b"HTTP/1.1 200 OK\r\n" + head + b"Content-Length: 2\r\n\r\nok")
    try:
        with gateway_daemon(tmp_path, {"policy": [
            {"from": "https://app.test", "to": f"http://127.0.0.1:{upstream.port}",
             "allow_public_unauthenticated_access": True},
        ], **IDENTITY}) as gw, RawClient(gw.port) as client:
            assert client.request("GET", "/big-head", "app.test").status == 502
            assert client.request("GET", "/ping", "app.test").status == 200
            assert any("response headers over 64 KiB or 200 fields" in e.get("message", "")
                       + str(e.get("detail", "")) for e in gw.log_events())
    finally:
        upstream.close()
