"""OpenID Connect Back-Channel Logout 1.0 from the real node-oidc-provider (issue 42):
a person signs in, opens a native SSH connection (real OpenSSH to a real sshd), a
CONNECT tunnel and a websocket through the gateway, and has a browser session; then
ends their session at the provider, which posts a logout token to the gateway's
``backchannel_logout_uri``. Every one of them ends within one second, and a
programmatic token (``gateway tcp``'s) from the same sign-in stops working. The token the
provider posted, sent again, is refused.

The provider's post goes through a small recording relay in the test (so the test holds
the token to replay); the relay passes the provider's headers on as they came (Node's
fetch sends ``Sec-Fetch-Mode: cors``, which once made the gateway take the provider for
a browser) and adds nothing of its own.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest

from tests.support.browser import Browser, _Forms
from tests.support.daemon import gateway_daemon
from tests.support.peers import oidc_provider, tcp_service
from tests.support.processes import ManagedProcess, free_port, wait_until
from tests.support.rawhttp import read_until, status_of
from tests.support.ssh_native import cert_sshd, gateway_keys, sign_in_ssh, ssh_argv
from tests.support.ssh_native import read_until as read_pipe

pytestmark = pytest.mark.integration
PEERS = Path(__file__).resolve().parents[1] / "peers"
HEAD_END = b"\r\n\r\n"
WITHIN = 1.0  # seconds: the promise, from the provider's post


class Relay:
    """The provider's ``backchannel_logout_uri``: forwards each post to the gateway
    unchanged and keeps the bodies and the gateway's answers."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.posts: list[tuple[bytes, int, float]] = []  # body, gateway status, when
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                posted = time.monotonic()
                status = forward(relay.target, body, {
                    k: v for k, v in self.headers.items() if k.lower() not in HOP})
                relay.posts.append((body, status, posted))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# what the relay does not pass on: its own connection's (urllib makes its own)
HOP = {"host", "content-length", "connection", "accept-encoding"}


def forward(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def post_logout(url: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@contextlib.contextmanager
def relay_to(target: str) -> Iterator[Relay]:
    relay = Relay(target)
    try:
        yield relay
    finally:
        relay.close()


def end_at_provider(browser: Browser, issuer: str) -> float:
    """The person signs out at the provider (its end-session page, then its confirm
    form with ``logout``); when the confirmation was sent."""
    page = browser.request("GET", f"{issuer}/session/end")
    assert page.status == 200, page
    forms = _Forms()
    forms.feed(page.body.decode("utf-8", "replace"))
    form = next(f for f in forms.forms if f["method"] == "post")
    fields = dict(form["fields"])  # type: ignore[call-overload]
    fields["logout"] = "yes"
    sent = time.monotonic()
    browser.request("POST", urljoin(page.url, str(form["action"])),
                    "&".join(f"{k}={v}" for k, v in fields.items()).encode())
    return sent


def closed_at(sock: socket.socket, deadline: float) -> float | None:
    """When the gateway closed ``sock`` (None: still open at ``deadline``)."""
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return None
        except OSError:
            return time.monotonic()
        if not data:
            return time.monotonic()
    return None


def test_logout_at_the_provider_ends_everything_within_a_second(tmp_path: Path) -> None:
    keys = gateway_keys(tmp_path)
    port, ssh_port, ws_port = free_port(), free_port(), free_port()
    auth = f"http://127.0.0.1:{port}"  # the provider's server posts here: a name it resolves
    with relay_to(f"{auth}/.gateway/backchannel-logout") as relay, \
            cert_sshd(tmp_path, keys.ca_public) as sshd, tcp_service(tmp_path) as svc, \
            ManagedProcess(["python3", str(PEERS / "ws_echo.py"), "--port", str(ws_port)],
                           log_dir=tmp_path, name="ws") as ws, \
            oidc_provider(tmp_path, [f"{auth}/oauth2/callback"],
                          backchannel_logout_uri=f"http://127.0.0.1:{relay.port}/"
                          ) as op:
        ws.wait_for_log_line("READY", 10)
        signed_in = {"allowed_users": ["alice@example.test"]}
        config = {
            "authenticate_service_url": auth, "idp_provider": "oidc",
            "idp_provider_url": op.issuer, "idp_client_id": op.client_id,
            "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups"], "cookie_secure": False,
            "policy": [
                {"from": f"http://app.localhost:{port}", "to": f"http://127.0.0.1:{ws_port}",
                 "allow_websockets": True, **signed_in},
                {"from": "tcp+https://db.localhost:7000", "to": f"tcp://127.0.0.1:{svc.port}",
                 **signed_in},
                sshd.route(**signed_in),
            ],
            **keys.settings(ssh_port),
        }
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            # 1. signed in: an SSH connection, then the browser on the route
            ssh, _, browser = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                   f"{sshd.user}@db",
                                                   "echo started; sleep 60"),
                                          "alice@example.test")
            with contextlib.ExitStack() as stack:
                stack.callback(lambda: ssh.poll() is None and ssh.kill())
                read_pipe(ssh.stdout, b"started", 30)
                page = browser.sign_in(f"http://app.localhost:{port}/", "alice@example.test")
                assert page.status == 200 and b"not a websocket" in page.body, page
                cookie = "; ".join(f"{k}={v}" for k, v in
                                   browser.cookies["app.localhost"].items())
                # 2. a websocket and a tunnel on that browser session
                wsock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
                wsock.sendall((f"GET /chat HTTP/1.1\r\nHost: app.localhost:{port}\r\n"
                               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                               f"Sec-WebSocket-Version: 13\r\nCookie: {cookie}\r\n\r\n"
                               ).encode())
                assert status_of(read_until(wsock, HEAD_END)) == 101
                tunnel = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
                tunnel.sendall(("CONNECT db.localhost:7000 HTTP/1.1\r\n"
                                f"Host: db.localhost:7000\r\nCookie: {cookie}\r\n\r\n"
                                ).encode())
                head = read_until(tunnel, HEAD_END)
                assert status_of(head) == 200, head
                tunnel.sendall(b"ping\n")
                wait_until(lambda: svc.accepts() >= 1, 5, what="the tunnel's connection")
                # and a programmatic token (`gateway tcp`'s), from the same sign-in
                login = Browser(accept="*/*").request(
                    "GET", f"http://app.localhost:{port}/.gateway/api/v1/login?"
                           "gateway_redirect_uri=http://127.0.0.1:9/")
                handed = browser.sign_in(login.body.decode(), "alice@example.test",
                                         stop="http://127.0.0.1:9/")
                token = parse_qs(urlsplit(handed.url).query)["gateway_jwt"][0]
                by_token = Browser(accept="*/*")
                with_token = {"Authorization": f"Gateway {token}"}
                assert by_token.request("GET", f"http://app.localhost:{port}/",
                                        headers=with_token).status == 200
                # 3. the person signs out at the provider
                sent = end_at_provider(browser, op.issuer)
                wait_until(lambda: bool(relay.posts), 5, what="the provider's logout post")
                token_body, status, posted = relay.posts[0]
                assert status == 200, (status, gateway.process.log_text()[-3000:])
                deadline = sent + 5
                ended = {"websocket": closed_at(wsock, deadline),
                         "tunnel": closed_at(tunnel, deadline)}
                ssh.wait(max(deadline - time.monotonic(), 0.1))
                ended["ssh"] = time.monotonic()  # (at most: it was waited for last)
                late = {k: None if v is None else round(v - posted, 3)
                        for k, v in ended.items()}
                print("ended after the post (s):", late)
                assert all(v is not None and v <= WITHIN for v in late.values()), late
                err = ssh.stderr.read() if ssh.stderr else b""
                assert b"your session has ended" in err, err
                # the key the person signed in with is not signed in any more
                again_ssh = subprocess.run(
                    ssh_argv(keys.client_key, ssh_port, f"{sshd.user}@db", "true",
                             options=("BatchMode=yes",)),
                    capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
                assert again_ssh.returncode == 255
                assert b"This key is not signed in yet" in again_ssh.stderr, again_ssh.stderr
                # the browser session too, on the route and the authenticate host
                again = browser.request("GET", f"http://app.localhost:{port}/")
                assert again.status == 302 and "/.gateway/sign_in" in \
                    (again.header("location") or ""), again
                assert by_token.request("GET", f"http://app.localhost:{port}/",
                                        headers=with_token).status == 401
            # 4. the same logout token again: refused, 400 with a JSON error
            status, headers, body = post_logout(f"{auth}/.gateway/backchannel-logout",
                                                token_body)
            assert status == 400, (status, body)
            assert json.loads(body)["error"] == "invalid_request"
            assert {k.lower(): v for k, v in headers.items()}["cache-control"] == "no-store"
            log = gateway.process.log_text()
            assert "back-channel logout from " + op.issuer in log, log[-3000:]
            assert "already used" in log


def test_logout_posted_to_one_process_ends_a_tunnel_held_by_another(
        tmp_path: Path, require_binary: object) -> None:
    """Two gateway processes on one Redis: the provider posts to A, the person's tunnel
    and browser session are on B. B learns of the ended session from the change stream
    (polled every 0.5 s) and closes the tunnel at once, within one second."""
    from tests.support.kvstore import COOKIE, SECRET
    from tests.support.peers import redis_server

    pa, pb = free_port(), free_port()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    auth_a, auth_b = f"http://127.0.0.1:{pa}", f"http://127.0.0.1:{pb}"
    with redis_server(tmp_path) as redis, tcp_service(tmp_path) as svc, \
            relay_to(f"{auth_a}/.gateway/backchannel-logout") as relay, \
            oidc_provider(tmp_path, [f"{auth_a}/oauth2/callback"],
                          backchannel_logout_uri=f"http://127.0.0.1:{relay.port}/") as op:

        def config(auth: str, port: int) -> dict[str, object]:
            return {
                "authenticate_service_url": auth, "idp_provider": "oidc",
                "idp_provider_url": op.issuer, "idp_client_id": op.client_id,
                "idp_client_secret": op.client_secret, "idp_scopes": ["openid", "email"],
                "cookie_secure": False, "shared_secret": SECRET, "cookie_secret": COOKIE,
                "databroker_storage_type": "kvstore",
                "databroker_storage_connection_string": f"kvstore://127.0.0.1:{redis.port}/0",
                "policy": [
                    {"from": f"http://app.localhost:{port}", "to": f"http://127.0.0.1:{svc.port}",
                     "allowed_users": ["alice@example.test"]},
                    {"from": "tcp+https://db.localhost:7000",
                     "to": f"tcp://127.0.0.1:{svc.port}",
                     "allowed_users": ["alice@example.test"]}]}

        with gateway_daemon(a_dir, config(auth_a, pa), port=pa), \
                gateway_daemon(b_dir, config(auth_b, pb), port=pb) as b:
            browser = Browser()
            # (the route's upstream is the TCP service: the browser stops at its URL)
            reply = browser.sign_in(f"http://app.localhost:{pa}/x", "alice@example.test",
                                    stop=f"http://app.localhost:{pa}/x")
            assert reply.url == f"http://app.localhost:{pa}/x", reply
            value = browser.cookies["app.localhost"]["_gateway"]
            tunnel = socket.create_connection(("127.0.0.1", pb))
            with tunnel:
                tunnel.sendall(("CONNECT db.localhost:7000 HTTP/1.1\r\n"
                                "Host: db.localhost:7000\r\n"
                                f"Cookie: _gateway={value}\r\n\r\n").encode())
                head = read_until(tunnel, HEAD_END)
                assert status_of(head) == 200, (head, b.process.log_text()[-2000:])
                end_at_provider(browser, op.issuer)
                wait_until(lambda: bool(relay.posts), 5, what="the provider's logout post")
                _, status, posted = relay.posts[0]
                assert status == 200
                ended = closed_at(tunnel, posted + 5)
                assert ended is not None and ended - posted <= WITHIN, \
                    (ended and ended - posted, b.process.log_text()[-2000:])
                print("B's tunnel ended after the post to A (s):", round(ended - posted, 3))
            again = Browser()
            again.cookies["app.localhost"] = {"_gateway": value}
            assert again.request("GET", f"http://app.localhost:{pb}/").status == 302
