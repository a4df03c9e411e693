"""The peer fixtures start real processes that really work, and really stop."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import secrets
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

from tests.support import peers
from tests.support.processes import (
    ManagedProcess,
    ProcessError,
    free_port,
    http_ok,
    loopback_opener,
    pid_alive,
    wait_for_port,
)

pytestmark = pytest.mark.integration

PeerFactory = Callable[..., Any]


def _get_json(url: str) -> Any:
    with loopback_opener().open(url, timeout=10) as resp:
        return json.load(resp)


# --------------------------------------------------------------------------- echo


def test_echo_upstream_reflects_headers_and_body(echo_upstream: peers.Upstream) -> None:
    body = secrets.token_bytes(70_000)
    conn = http.client.HTTPConnection("127.0.0.1", echo_upstream.port, timeout=10)
    try:
        conn.putrequest("POST", "/some/path?q=1&q=2", skip_accept_encoding=True)
        conn.putheader("X-Test", "one")
        conn.putheader("X-Test", "two")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("X-Upstream-Name") == "upstream"
        info = json.loads(resp.read())

        # same keep-alive connection, chunked request body
        conn.request("PUT", "/chunked", body=iter([b"abc", b"", b"defgh"]),
                     headers={"Transfer-Encoding": "chunked"}, encode_chunked=True)
        resp2 = conn.getresponse()
        chunked = json.loads(resp2.read())
    finally:
        conn.close()

    assert info["name"] == "upstream"
    assert info["method"] == "POST"
    assert info["path"] == "/some/path?q=1&q=2"
    assert [v for k, v in info["headers"] if k == "X-Test"] == ["one", "two"]
    assert info["body_length"] == len(body)
    assert info["body_sha256"] == hashlib.sha256(body).hexdigest()

    assert chunked["method"] == "PUT"
    assert chunked["body_length"] == 8
    assert chunked["body_sha256"] == hashlib.sha256(b"abcdefgh").hexdigest()


def test_echo_upstream_special_paths(echo_upstream: peers.Upstream) -> None:
    opener = loopback_opener()
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(echo_upstream.url_for("/status/418"), timeout=10)
    assert err.value.code == 418
    assert json.loads(err.value.read())["path"] == "/status/418"

    with opener.open(echo_upstream.url_for("/bytes/300000"), timeout=10) as resp:
        data = resp.read()
    assert len(data) == 300_000
    assert data[:512] == bytes(range(256)) * 2

    with opener.open(echo_upstream.url_for("/delay/0.2"), timeout=10) as resp:
        assert json.load(resp)["path"] == "/delay/0.2"


def test_echo_upstream_raw_request_target(echo_upstream: peers.Upstream) -> None:
    with socket.create_connection(("127.0.0.1", echo_upstream.port), timeout=10) as sock:
        sock.sendall(b"GET //double/../x%2F?a=%20 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        raw = b""
        for _ in range(1000):
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(payload)["path"] == "//double/../x%2F?a=%20"


# -------------------------------------------------------------------------- redis


def test_redis_ping_set_get_raw_socket(redis_server: peers.Redis) -> None:
    with socket.create_connection((redis_server.host, redis_server.port), timeout=5) as sock:
        stream = sock.makefile("rb")
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert stream.readline() == b"+PONG\r\n"
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n")
        assert stream.readline() == b"+OK\r\n"
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n")
        assert stream.readline() == b"$5\r\n"
        assert stream.readline() == b"value\r\n"
        stream.close()
    with redis_server.client() as client:
        assert client.command("GET", "key") == b"value"
        assert client.command("GET", "missing") is None
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"


def test_redis_with_password_requires_auth(peer_factory: PeerFactory) -> None:
    redis: peers.Redis = peer_factory(peers.redis_server, password="s3cr:et")
    assert redis.url == f"redis://:s3cr%3Aet@127.0.0.1:{redis.port}/0"
    with peers.RespClient(redis.host, redis.port) as anonymous:
        with pytest.raises(peers.RedisReplyError, match="NOAUTH"):
            anonymous.command("PING")
        with pytest.raises(peers.RedisReplyError):
            anonymous.command("AUTH", "wrong")
        assert anonymous.command("AUTH", "s3cr:et") == "OK"
        assert anonymous.command("PING") == "PONG"
    with redis.client() as client:
        assert client.command("SET", "k", "v") == "OK"
        assert client.command("GET", "k") == b"v"


# ------------------------------------------------------------------ oidc-provider


def test_oidc_discovery(oidc_provider: peers.OIDCProvider) -> None:
    doc = oidc_provider.discovery()
    issuer = f"http://127.0.0.1:{oidc_provider.port}"
    assert oidc_provider.issuer == issuer
    assert doc["issuer"] == issuer
    assert doc["authorization_endpoint"] == issuer + "/auth"
    assert doc["token_endpoint"] == issuer + "/token"
    assert doc["userinfo_endpoint"] == issuer + "/me"
    assert doc["jwks_uri"] == issuer + "/jwks"
    assert doc["end_session_endpoint"] == issuer + "/session/end"
    assert {"openid", "email", "groups", "offline_access"} <= set(doc["scopes_supported"])
    assert "refresh_token" in doc["grant_types_supported"]
    assert {"client_secret_basic", "client_secret_post"} <= set(
        doc["token_endpoint_auth_methods_supported"]
    )


@dataclass
class _Form:
    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)


class _FormParser(HTMLParser):
    """Collects <form action method> and the name/value of its <input>s."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self._current = _Form(a.get("action") or "", (a.get("method") or "get").lower())
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and a.get("name"):
            self._current.fields[a["name"] or ""] = a.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    """Hand 3xx responses back to the caller instead of following them."""

    def http_error_302(self, req: Any, fp: Any, code: Any, msg: Any, headers: Any) -> Any:
        return fp

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


@dataclass
class _Browser:
    """A cookie-keeping user agent that follows redirects by hand, up to a stop prefix."""

    stop_at: str
    jar: CookieJar = field(default_factory=CookieJar)

    def __post_init__(self) -> None:
        # never follows redirects by itself (so it never leaves loopback on its own)
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPCookieProcessor(self.jar),
            _KeepRedirects(),
        )

    def open(self, url: str, data: dict[str, str] | None = None) -> tuple[str, str]:
        """GET/POST ``url``, follow redirects (at most 10) until a page or a URL starting
        with ``stop_at``. Returns ("page", html-and-url) or ("redirect", location)."""
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        for _ in range(10):
            with self._opener.open(url, data=body, timeout=10) as resp:
                status = resp.status
                location = resp.headers.get("Location")
                text = resp.read().decode()
            if status in (301, 302, 303, 307, 308):
                assert location, f"{status} without Location from {url}"
                location = urllib.parse.urljoin(url, location)
                if location.startswith(self.stop_at):
                    return "redirect", location
                url, body = location, None
                continue
            assert status == 200, f"{status} from {url}: {text[:500]}"
            self.last_url = url
            return "page", text
        raise AssertionError("too many redirects")

    def submit_pages(self, kind: str, result: str, login: str) -> str:
        """Fill in the dev-interaction login/consent forms until the client redirect."""
        for _ in range(5):
            if kind == "redirect":
                return result
            parser = _FormParser()
            parser.feed(result)
            assert parser.forms, f"no form on page: {result[:2000]}"
            form = parser.forms[0]
            data = dict(form.fields)
            if data.get("prompt") == "login":
                data.update(login=login, password="anything")
            else:
                assert data.get("prompt") == "consent", f"unexpected form {form}"
            assert form.method == "post"
            kind, result = self.open(urllib.parse.urljoin(self.last_url, form.action), data)
        raise AssertionError("too many interaction steps")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _token_request(
    op: peers.OIDCProvider, token_endpoint: str, params: dict[str, str]
) -> dict[str, Any]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if op.token_auth_method == "client_secret_post":
        params = {**params, "client_id": op.client_id, "client_secret": op.client_secret}
    else:
        creds = (
            urllib.parse.quote(op.client_id, safe="")
            + ":"
            + urllib.parse.quote(op.client_secret, safe="")
        )
        headers["Authorization"] = "Basic " + base64.b64encode(creds.encode()).decode()
    req = urllib.request.Request(
        token_endpoint, data=urllib.parse.urlencode(params).encode(), headers=headers
    )
    try:
        with loopback_opener().open(req, timeout=10) as resp:
            result: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"token endpoint: {exc.code} {exc.read()!r}") from exc
    return result


def _verified_claims(op: peers.OIDCProvider, doc: dict[str, Any], id_token: str) -> Any:
    jwt = pytest.importorskip("jwt")
    header = json.loads(base64.urlsafe_b64decode(id_token.split(".")[0] + "=="))
    jwks = _get_json(doc["jwks_uri"])
    (jwk,) = [k for k in jwks["keys"] if k.get("kid") == header.get("kid")]
    return jwt.decode(
        id_token,
        key=jwt.PyJWK(jwk),
        algorithms=[header["alg"]],
        audience=op.client_id,
        issuer=op.issuer,
    )


def _code_flow(op: peers.OIDCProvider, login: str) -> tuple[_Browser, dict[str, Any], str]:
    """Authorization-code flow with PKCE via the dev interactions; returns the browser,
    the token response and the callback URL."""
    doc = op.discovery()
    redirect_uri = op.redirect_uris[0]
    state, nonce, verifier = (secrets.token_urlsafe(16), secrets.token_urlsafe(16),
                              secrets.token_urlsafe(48))
    query = urllib.parse.urlencode({
        "client_id": op.client_id,
        "response_type": "code",
        "redirect_uri": redirect_uri,
        "scope": "openid email groups offline_access",
        "prompt": "consent",  # offline_access (refresh token) needs prompt=consent
        "state": state,
        "nonce": nonce,
        "code_challenge": _b64url(hashlib.sha256(verifier.encode()).digest()),
        "code_challenge_method": "S256",
    })
    browser = _Browser(stop_at=redirect_uri)
    kind, result = browser.open(doc["authorization_endpoint"] + "?" + query)
    callback = browser.submit_pages(kind, result, login)

    params = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)
    assert params["state"] == [state]
    assert params["iss"] == [op.issuer]
    tokens = _token_request(op, doc["token_endpoint"], {
        "grant_type": "authorization_code",
        "code": params["code"][0],
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    })
    claims = _verified_claims(op, doc, tokens["id_token"])
    assert claims["nonce"] == nonce
    return browser, tokens, callback


def test_oidc_authorization_code_flow(oidc_provider: peers.OIDCProvider) -> None:
    login = "carol@example.test#dev,ops"
    _, tokens, callback = _code_flow(oidc_provider, login)
    assert callback.startswith("http://127.0.0.1/oauth2/callback?")
    assert {"access_token", "id_token", "refresh_token", "token_type"} <= set(tokens)
    doc = oidc_provider.discovery()
    claims = _verified_claims(oidc_provider, doc, tokens["id_token"])
    assert claims["sub"] == login
    assert claims["email"] == "carol@example.test"
    assert claims["groups"] == ["dev", "ops"]
    assert claims["aud"] == "gateway"

    req = urllib.request.Request(
        doc["userinfo_endpoint"], headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    with loopback_opener().open(req, timeout=10) as resp:
        assert json.load(resp)["sub"] == login

    refreshed = _token_request(oidc_provider, doc["token_endpoint"], {
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
    })
    assert _verified_claims(oidc_provider, doc, refreshed["id_token"])["sub"] == login


def test_oidc_client_secret_post_and_logout(peer_factory: PeerFactory) -> None:
    redirect = "http://127.0.0.1:8080/oauth2/callback"
    op: peers.OIDCProvider = peer_factory(
        peers.oidc_provider,
        redirect_uris=[redirect, "http://localhost:8080/oauth2/callback"],
        client_id="other-client",
        client_secret="other secret",
        token_auth_method="client_secret_post",
    )
    browser, tokens, callback = _code_flow(op, "dave")
    assert callback.startswith(redirect + "?")
    doc = op.discovery()
    assert _verified_claims(op, doc, tokens["id_token"])["sub"] == "dave"

    # RP-initiated logout: confirm page (xsrf form), then redirect to the client.
    post_logout = "http://127.0.0.1:8080/"
    query = urllib.parse.urlencode({
        "id_token_hint": tokens["id_token"],
        "post_logout_redirect_uri": post_logout,
        "state": "bye",
    })
    browser.stop_at = post_logout
    kind, page = browser.open(doc["end_session_endpoint"] + "?" + query)
    assert kind == "page"
    parser = _FormParser()
    parser.feed(page)
    (form,) = parser.forms
    assert "xsrf" in form.fields
    kind, location = browser.open(
        urllib.parse.urljoin(browser.last_url, form.action), {**form.fields, "logout": "yes"}
    )
    assert kind == "redirect"
    assert location == post_logout + "?state=bye"

    # The session is gone: a new authorization request asks for the login again.
    query = urllib.parse.urlencode({
        "client_id": op.client_id, "response_type": "code", "redirect_uri": redirect,
        "scope": "openid", "code_challenge": _b64url(hashlib.sha256(b"v" * 43).digest()),
        "code_challenge_method": "S256",
    })
    browser.stop_at = redirect
    kind, page = browser.open(doc["authorization_endpoint"] + "?" + query)
    assert kind == "page"
    parser = _FormParser()
    parser.feed(page)
    assert parser.forms[0].fields.get("prompt") == "login"


def test_oidc_provider_without_node_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, require_binary: Callable[[str, str], str]
) -> None:
    require_binary("node", peers.NODE_INSTALL_HINT)
    monkeypatch.setattr(peers, "OIDC_DIR", tmp_path / "empty")
    with (
        pytest.raises(peers.PeerSetupError, match=r"npm ci --prefix tests/peers/oidc"),
        peers.oidc_provider(tmp_path),
    ):
        pass


# ---------------------------------------------------------------- stop / errors


@pytest.mark.parametrize("kind", ["echo", "redis", "oidc"])
def test_stop_ends_peer_process(
    kind: str, tmp_path: Path, require_binary: Callable[[str, str], str]
) -> None:
    manager: contextlib.AbstractContextManager[Any]
    if kind == "echo":
        manager = peers.echo_upstream(tmp_path, name="stopme")
    elif kind == "redis":
        require_binary("redis-server", peers.REDIS_INSTALL_HINT)
        manager = peers.redis_server(tmp_path, password="pw")
    else:
        require_binary("node", peers.NODE_INSTALL_HINT)
        manager = peers.oidc_provider(tmp_path)
    with manager as peer:
        proc: ManagedProcess = peer.process
        pid = proc.pid
        assert pid is not None
        assert pid_alive(pid)
        assert proc.running
    assert not proc.running
    assert not pid_alive(pid), f"{proc.name} pid {pid} still alive after stop()"
    # SIGTERM handled gracefully: exit status 0, not killed by a signal
    assert proc.returncode == 0, proc.describe()
    assert proc.stop() == 0  # idempotent


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('READY', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess([sys.executable, "-c", code], log_dir=tmp_path, name="stubborn")
    with proc:
        proc.wait_for_log_line("READY", timeout=10)
        pid = proc.pid
        assert pid is not None
        assert proc.stop(timeout=0.5) == -9
    assert not pid_alive(pid)


def test_wait_ready_reports_death_with_log_tail(tmp_path: Path) -> None:
    code = "import sys\nprint('something went wrong here', flush=True)\nsys.exit(3)\n"
    proc = ManagedProcess([sys.executable, "-c", code], log_dir=tmp_path, name="dies")
    with proc, pytest.raises(ProcessError, match="died before it was ready") as err:
        proc.wait_ready(lambda: False, timeout=10)
    assert "something went wrong here" in str(err.value)
    assert "exited with 3" in str(err.value)


def test_wait_ready_times_out_with_log_tail(tmp_path: Path) -> None:
    code = "import time\nprint('still booting', flush=True)\ntime.sleep(60)\n"
    with ManagedProcess([sys.executable, "-c", code], log_dir=tmp_path, name="slow") as proc:
        with pytest.raises(ProcessError, match="not ready after") as err:
            proc.wait_ready(lambda: proc.find_log_line("NEVER") is not None, timeout=1.0)
        assert "still booting" in str(err.value)
    assert not proc.running


def test_wait_for_port_times_out_and_refuses_remote_hosts(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(TimeoutError):
        wait_for_port("127.0.0.1", port, timeout=0.3)
    assert http_ok(f"http://127.0.0.1:{port}/") is False
    with pytest.raises(ValueError, match="non-loopback"):
        wait_for_port("192.0.2.1", 80, timeout=0.1)
    with pytest.raises(ValueError, match="non-loopback"):
        http_ok("http://example.invalid/")


def test_loopback_opener_does_not_follow_redirects_off_loopback() -> None:
    from tests.support.processes import _LoopbackRedirectHandler

    handler = _LoopbackRedirectHandler()
    req = urllib.request.Request("http://127.0.0.1:1/")
    headers = http.client.HTTPMessage()
    assert handler.redirect_request(req, None, 302, "Found", headers, "http://192.0.2.1/") is None
    followed = handler.redirect_request(req, None, 302, "Found", headers, "http://[::1]:2/x")
    assert followed is not None
    assert followed.full_url == "http://[::1]:2/x"


def test_port_taken_between_probe_and_bind_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, require_binary: Callable[[str, str], str]
) -> None:
    require_binary("redis-server", peers.REDIS_INSTALL_HINT)
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real_free_port = peers.free_port

        def first_taken(host: str) -> int:
            return next(ports, None) or real_free_port(host)

        monkeypatch.setattr(peers, "free_port", first_taken)
        with peers.redis_server(tmp_path) as redis:
            assert redis.port != taken
            with redis.client() as client:
                assert client.command("PING") == "PONG"
    first_log = tmp_path / f"redis-{taken}.log"
    assert "Address already in use" in first_log.read_text()


def test_peer_stopped_when_body_raises(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="test body failed"):  # noqa: SIM117
        with peers.echo_upstream(tmp_path, name="boom") as upstream:
            assert upstream.process.pid is not None
            pids.append(upstream.process.pid)
            raise RuntimeError("test body failed")
    assert pids
    assert not pid_alive(pids[0])
