"""Forward authentication end to end: the shipped examples (conf/forward-auth) run as
shipped, with real nginx ``auth_request`` and real caddy ``forward_auth`` in front of an
echo app, the gateway deciding, node-oidc-provider signing people in.

What the tests change in the examples: ports, listen addresses (loopback only) and
certificate paths, nothing else (``render`` fails when a substituted string is gone).
In the gateway's example config they also point at the test provider, a test signing
key, and add one route the gateway carries itself (both shapes in one process).
traefik is not packaged here: its example is checked by replaying the requests its
forwardAuth middleware builds from a browser's request (traefik's ``writeHeader``).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import trustme
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.sessions.sealed import Sealer
from tests.conftest import _require_binary
from tests.support.browser import Browser, Reply
from tests.support.daemon import REPO_ROOT, Daemon, gateway_daemon
from tests.support.forward_proxies import CADDY_HINT, caddy_site, nginx_site, render
from tests.support.nginx import NGINX_HINT
from tests.support.peers import NODE_INSTALL_HINT, Upstream, echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "conf" / "forward-auth"
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"
APP, AUTH, FWD = "app.example.com", "auth.example.com", "fwd.example.com"
SHARED = os.urandom(32)


@dataclass
class Env:
    proxy: str
    port: int  # the proxy's https port (app and auth hosts)
    gw: Daemon
    up: Upstream
    ca: trustme.CA
    tls: ssl.SSLContext
    direct: str  # a route the gateway carries itself

    def app(self, path: str = "/") -> str:
        return f"https://{APP}:{self.port}{path}"

    def auth(self, path: str = "/") -> str:
        return f"https://{AUTH}:{self.port}{path}"

    def browser(self, **kwargs: Any) -> Browser:
        return Browser(tls=self.tls, **kwargs)

    def upstream_requests(self) -> int:
        log = self.up.process.log_text()
        return sum(log.count(f'"{method} ') for method in ("GET", "POST", "HEAD"))

    def sealed_sign_in_target(self, location: str) -> str:
        """The URL a sign-in redirect will come back to (unsealed with shared_secret)."""
        assert location.startswith(self.auth("/.gateway/sign_in?")), location
        sealed = parse_qs(urlsplit(location).query)["gateway_redirect"][0]
        payload = Sealer(SHARED).open("sign-in", sealed, time.time())
        assert payload is not None
        return str(payload["uri"])


def gateway_config(port: int, up: Upstream, op: Any, key: Path, gw_port: int,
                   cookie_domain: str | None) -> dict[str, Any]:
    text = render((EXAMPLES / "gateway.yaml").read_text(), [
        ("https://auth.example.com", f"https://{AUTH}:{port}"),
        ("https://app.example.com", f"https://{APP}:{port}"),
        ("https://idp.example.com", op.issuer),
        ("idp_client_id: gateway", f"idp_client_id: {op.client_id}"),
        ("/etc/gateway/signing-key.pem", str(key)),
        ("http://127.0.0.1:8080", up.url),
        ("127.0.0.1:8000", f"127.0.0.1:{gw_port}"),
    ])
    config: dict[str, Any] = yaml.safe_load(text)
    if cookie_domain:
        config["cookie_domain"] = cookie_domain
    config["policy"].append({"from": f"http://direct.example.com:{gw_port}", "to": up.url,
                             "allow_any_authenticated_user": True,
                             "pass_identity_headers": True})
    return config


def nginx_config(port: int, gw_port: int, up: Upstream, cert: Path, key: Path) -> str:
    return render((EXAMPLES / "nginx.conf").read_text(), [
        ("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;"),
        ("server 127.0.0.1:8000;", f"server 127.0.0.1:{gw_port};"),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{up.port};"),
        ("/etc/ssl/example.com/fullchain.pem", str(cert)),
        ("/etc/ssl/example.com/privkey.pem", str(key)),
    ])


def caddy_config(port: int, gw_port: int, up: Upstream, cert: Path, key: Path) -> str:
    return render((EXAMPLES / "Caddyfile").read_text(), [
        ("admin localhost:2019", f"admin 127.0.0.1:{free_port()}\n\tdefault_bind 127.0.0.1"),
        ("http_port 80", f"http_port {free_port()}"),
        ("https_port 443", f"https_port {port}"),
        ("127.0.0.1:8000", f"127.0.0.1:{gw_port}"),
        ("127.0.0.1:8080", f"127.0.0.1:{up.port}"),
        ("/etc/ssl/example.com/fullchain.pem", str(cert)),
        ("/etc/ssl/example.com/privkey.pem", str(key)),
    ])


@contextmanager
def running(tmp: Path, proxy: str, cookie_domain: str | None = None) -> Iterator[Env]:
    """The app behind ``proxy`` (nginx or caddy) with the gateway answering its
    questions, all from the shipped examples."""
    _require_binary("node", NODE_INSTALL_HINT)
    _require_binary(proxy, NGINX_HINT if proxy == "nginx" else CADDY_HINT)
    port, gw_port = free_port(), free_port()
    ca = trustme.CA()
    leaf = ca.issue_cert(APP, AUTH)
    cert, key = tmp / "fullchain.pem", tmp / "privkey.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    signing = tmp / "signing-key.pem"
    signing.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    tls = ssl.create_default_context()
    ca.configure_trust(tls)
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"https://{AUTH}:{port}/oauth2/callback"]))
        up = stack.enter_context(echo_upstream(tmp, name="app"))
        config = gateway_config(port, up, op, signing, gw_port, cookie_domain)
        gw = stack.enter_context(gateway_daemon(tmp, config, port=gw_port, env={
            "SHARED_SECRET": base64.b64encode(SHARED).decode(),
            "COOKIE_SECRET": base64.b64encode(os.urandom(32)).decode(),
            "IDP_CLIENT_SECRET": op.client_secret}))
        if proxy == "nginx":
            stack.enter_context(nginx_site(tmp, nginx_config(port, gw_port, up, cert, key),
                                           port))
        else:
            stack.enter_context(caddy_site(tmp, caddy_config(port, gw_port, up, cert, key),
                                           port))
        yield Env(proxy, port, gw, up, ca, tls, f"http://direct.example.com:{gw_port}")


@pytest.fixture(scope="module", params=["nginx", "caddy"])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Env]:
    with running(tmp_path_factory.mktemp(f"fa-{request.param}"), request.param) as e:
        yield e


def ours(env: Env, browser: Browser) -> list[tuple[str, str, str, int]]:
    """(method, host, path, status) of every request to the proxy's hosts."""
    out = []
    for method, url, status in browser.history:
        parts = urlsplit(url)
        if parts.port == env.port:
            out.append((method, parts.hostname or "", parts.path, status))
    return out


def echoed(reply: Reply) -> dict[str, str]:
    return {k.lower(): v for k, v in json.loads(reply.body)["headers"]}


SIGN_IN_HOPS = [
    ("GET", APP, "/docs/page", 302),               # the proxy asks; the gateway: sign in
    ("GET", AUTH, "/.gateway/sign_in", 302),       # to the provider
    ("GET", AUTH, "/oauth2/callback", 302),        # back from the provider: hand-off
    ("GET", APP, "/.gateway/callback", 302),       # the app's host gets its cookie
    ("GET", APP, "/docs/page", 200),               # the original URL, allowed
]


def test_sign_in_lands_on_the_original_url(env: Env) -> None:
    """Unauthenticated -> provider -> back on the original URL with path and query, in
    exactly five hops through the proxy (no loop); afterwards one request, 200."""
    browser = env.browser()
    before = env.upstream_requests()
    reply = browser.sign_in(env.app("/docs/page?x=1&y=two%20words"), "alice@example.com")
    assert reply.status == 200, reply.body[:300]
    assert json.loads(reply.body)["path"] == "/docs/page?x=1&y=two%20words"
    assert ours(env, browser) == SIGN_IN_HOPS
    assert len(browser.history) <= 12  # the provider's own pages included
    assert env.upstream_requests() == before + 1
    assert "_gateway" in browser.cookies[APP]  # host-only: cookie_domain is unset
    browser.history.clear()
    assert browser.request("GET", env.app("/again")).status == 200
    assert ours(env, browser) == [("GET", APP, "/again", 200)]


def test_identity_headers_verify_with_jwks(env: Env) -> None:
    """The app receives the assertion (valid under the JWKS, audience the app's host)
    and the claim headers; copies the client sends are replaced."""
    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    reply = browser.request("GET", env.app("/who"), headers={
        "X-Gateway-Claim-Email": "mallory@example.com", "X-Gateway-Jwt-Assertion": "forged"})
    assert reply.status == 200
    headers = echoed(reply)
    assert headers["x-gateway-claim-email"] == "alice@example.com"
    assert headers["x-gateway-claim-groups"] == "users"
    jwks = json.loads(browser.request("GET", env.auth("/.well-known/gateway/jwks.json")).body)
    (key,) = jwks["keys"]
    claims = jwt.decode(headers["x-gateway-jwt-assertion"], key=jwt.PyJWK(key),
                        algorithms=["ES256"], audience=APP, issuer=f"{AUTH}:{env.port}")
    assert claims["email"] == "alice@example.com"


def test_request_bodies_reach_the_app_only(env: Env) -> None:
    """A POST is asked about without its body (the question must not wait for one), and
    the body reaches the app once allowed; unauthenticated, it starts sign-in."""
    body = b"a=1&b=" + b"x" * 100_000
    before = env.upstream_requests()
    reply = env.browser().request("POST", env.app("/form"), body)
    assert reply.status == 302
    assert env.upstream_requests() == before
    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    reply = browser.request("POST", env.app("/form?x=1"), body)
    assert reply.status == 200
    seen = json.loads(reply.body)
    assert (seen["method"], seen["path"], seen["body_length"]) == ("POST", "/form?x=1",
                                                                  len(body))


def test_denied_user_gets_403_and_the_app_is_untouched(env: Env) -> None:
    """Signed in but not allowed: 403 from the proxy, no loop, nothing reaches the app."""
    browser = env.browser()
    before = env.upstream_requests()
    reply = browser.sign_in(env.app("/docs/page?x=1"), "eve@evil.test")
    assert reply.status == 403
    assert ours(env, browser)[-1] == ("GET", APP, "/docs/page", 403)
    assert len(ours(env, browser)) == len(SIGN_IN_HOPS)
    assert browser.request("GET", env.app("/other")).status == 403
    assert env.upstream_requests() == before


OVERRIDES = {"X-Original-URL": "/admin", "X-Rewrite-URL": "/admin",
             "X-Original-URI": "/admin", "X-HTTP-Method-Override": "DELETE",
             "X-HTTP-Method": "DELETE", "X-Method-Override": "DELETE",
             "X_Original_URL": "/admin", "X_HTTP_Method_Override": "DELETE"}


def test_override_headers_never_reach_the_app(env: Env) -> None:
    """Issue 28: behind the proxy it is the proxy that forwards; the shipped examples
    remove the path- and method-override headers (and their "_" twins) a client sends,
    so the app serves the path and method the gateway allowed."""
    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    reply = browser.request("GET", env.app("/docs"), headers=OVERRIDES)
    assert reply.status == 200
    seen = json.loads(reply.body)
    assert (seen["method"], seen["path"]) == ("GET", "/docs")
    names = {k.lower() for k, _ in seen["headers"]}
    assert not names & {k.lower() for k in OVERRIDES}, names


def test_unverified_email_is_refused(env: Env) -> None:
    """Issue 28: the forward-auth question is decided like any other, so an address the
    provider marks unverified does not pass ``allowed_domains``; the app sees nothing."""
    before = env.upstream_requests()
    reply = env.browser().sign_in(env.app("/docs"), "eve@example.com!unverified")
    assert reply.status == 403  # (nginx shows its own page for a 403 of auth_request)
    assert env.upstream_requests() == before
    assert any("email-unverified" in e.get("reasons", "") for e in env.gw.log_events()
               if e.get("user_id") == "eve@example.com!unverified")


def test_only_signed_in_requests_reach_the_app(env: Env) -> None:
    """Without a session, browsers and API clients alike get the sign-in redirect (the
    proxies turn the gateway's answer into one) and the app sees nothing."""
    before = env.upstream_requests()
    for accept in ("text/html", "application/json"):
        reply = env.browser(accept=accept).request("GET", env.app("/api?q=1"))
        assert reply.status == 302, reply.body[:200]
        target = env.sealed_sign_in_target(reply.header("location") or "")
        assert target == env.app("/api?q=1")
    assert env.upstream_requests() == before


def test_sign_out_ends_access_through_the_proxy(env: Env) -> None:
    """/.gateway/signout/ on the app's host (passed to the gateway by the proxy) ends the
    session: the old cookie no longer gets anyone through."""
    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    stale = {host: dict(jar) for host, jar in browser.cookies.items()}
    confirm = browser.request("GET", env.app("/.gateway/signout/"))
    assert confirm.status == 200
    token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
    done = browser.request("POST", env.app("/.gateway/signout/"), f"csrf={token}".encode())
    assert done.status == 302
    before = env.upstream_requests()
    again = env.browser(cookies=stale).request("GET", env.app("/"))
    assert again.status == 302
    assert (again.header("location") or "").startswith(env.auth("/.gateway/sign_in?"))
    assert env.upstream_requests() == before


def test_open_redirects_refused(env: Env) -> None:
    """No URL source makes anyone redirect off the routes' hosts: forged headers sent
    through the proxy, every source sent straight to the forward-auth host, a replayed
    hand-off."""
    evil = "evil.example"
    forged = {"X-Original-URL": f"https://{evil}/", "X-Forwarded-Host": evil,
              "X-Forwarded-Uri": f"//{evil}/", "X-Forwarded-Proto": "https"}
    reply = env.browser().request("GET", env.app("/x?y=1"), headers=forged)
    assert reply.status == 302
    assert env.sealed_sign_in_target(reply.header("location") or "") == env.app("/x?y=1")

    app = f"{APP}:{env.port}"
    attempts: list[tuple[str, dict[str, str]]] = [
        (f"/?uri=//{evil}/", {}), (f"/?uri=/\\{evil}/", {}),
        (f"/?uri=https://{app}.{evil}/", {}), (f"/?uri=https://{app}@{evil}/", {}),
        (f"/verify?uri=https://{evil}/", {}), ("/?uri=javascript:alert(1)", {}),
        ("/", {"X-Original-URL": f"https://{evil}/"}),
        ("/", {"X-Original-URL": f"https://{app}@{evil}/"}),
        ("/", {"X-Forwarded-Proto": "https", "X-Forwarded-Host": evil, "X-Forwarded-Uri": "/"}),
        ("/", {"X-Forwarded-Proto": "https", "X-Forwarded-Host": f"{app}@{evil}",
               "X-Forwarded-Uri": "/"}),
        ("/", {"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": app,
               "X-Forwarded-Uri": "/"}),
    ]
    for path, headers in attempts:
        status, answer, _ = env.gw.get(path, host=FWD, headers={"Accept": "text/html",
                                                               **headers})
        assert status in (400, 404), (path, headers, status)
        assert "location" not in {k.lower() for k in answer}, (path, headers)

    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    handoff = next(url for _, url, _ in browser.history if "/.gateway/callback?" in url)
    assert env.browser().request("GET", handoff).status == 400  # single use


def test_conflicting_urls_cannot_pick_the_route(env: Env) -> None:
    """The gateway's backstop when a proxy lets a client's header through: a question
    whose sources name different URLs (the proxy's uri, a forged X-Original-URL) is
    refused, so nobody gets /admin checked as /public."""
    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    status, _, body = env.gw.get(
        "/verify?uri=" + env.app("/admin"), host=FWD,
        headers={"Cookie": "; ".join(f"{k}={v}" for k, v in browser.cookies[APP].items()),
                 "X-Original-URL": env.app("/public")})
    assert status == 400
    assert b"different URLs" in body


def test_gateway_routes_work_side_by_side(env: Env) -> None:
    """The same process also carries a route itself, signing in through the same
    authenticate host."""
    browser = env.browser()
    reply = browser.sign_in(f"{env.direct}/hello?z=1", "alice@example.com")
    assert reply.status == 200
    assert json.loads(reply.body)["path"] == "/hello?z=1"
    assert echoed(reply)["x-gateway-claim-email"] == "alice@example.com"


def test_cookie_domain_set(tmp_path: Path) -> None:
    """With cookie_domain, one cookie covers the app's host too; the flow still ends on
    the original URL without a loop, and sign-out clears it."""
    with running(tmp_path, "nginx", cookie_domain="example.com") as env:
        browser = env.browser()
        reply = browser.sign_in(env.app("/docs/page?x=1"), "alice@example.com")
        assert reply.status == 200
        assert ours(env, browser) == SIGN_IN_HOPS
        assert "_gateway" in browser.domain_cookies["example.com"]
        assert "_gateway" not in browser.cookies.get(APP, {})
        confirm = browser.request("GET", env.app("/.gateway/signout/"))
        token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
        browser.request("POST", env.app("/.gateway/signout/"), f"csrf={token}".encode())
        assert "_gateway" not in browser.domain_cookies["example.com"]
        assert browser.request("GET", env.app("/")).status == 302


@pytest.mark.parametrize("env", ["nginx"], indirect=True)
def test_chromium_through_nginx(env: Env) -> None:
    """Headless Chromium, as a person: the app's URL, the provider's pages, back on the
    app's URL with its query, the app showing who signed in."""
    chromium = _require_binary("chromium", "apt-get install -y chromium")
    node = _require_binary("node", "apt-get install -y nodejs npm")
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/peers/browser` first")
    url = env.app("/chromium/page?x=1")
    result = subprocess.run(
        [node, "signin.js", url, "alice@example.com"], cwd=BROWSER_DIR, capture_output=True,
        text=True, timeout=120, env={**os.environ, "CHROMIUM": chromium,
                                     "IGNORE_HTTPS_ERRORS": "1",
                                     "HOST_RESOLVER_RULES": "MAP *.example.com 127.0.0.1"})
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["url"] == url
    page = json.loads(seen["text"])
    assert page["path"] == "/chromium/page?x=1"
    headers = {k.lower(): v for k, v in page["headers"]}
    assert headers["x-gateway-claim-email"] == "alice@example.com"
    cookie = next(c for c in seen["cookies"] if c["name"] == "_gateway" and c["domain"] == APP)
    assert cookie["httpOnly"] is True and cookie["secure"] is True


def traefik_request(middleware: dict[str, Any], method: str, host: str, uri: str,
                    headers: dict[str, str], client_ip: str = "192.0.2.10"
                    ) -> tuple[str, dict[str, str]]:
    """(address, headers) of the request traefik's forwardAuth sends for a browser's
    ``method host uri`` with ``headers`` (v2/v3 ``writeHeader``, TLS entry point):
    the client's headers filtered by authRequestHeaders, then X-Forwarded-* set."""
    allowed = {h.lower() for h in middleware.get("authRequestHeaders", [])}
    out = {k: v for k, v in headers.items() if not allowed or k.lower() in allowed}
    trust = bool(middleware.get("trustForwardHeader", False))

    def pick(name: str, own: str) -> str:
        sent = next((v for k, v in headers.items() if k.lower() == name.lower()), "")
        return sent if trust and sent else own

    out["X-Forwarded-For"] = client_ip
    out["X-Forwarded-Method"] = pick("X-Forwarded-Method", method)
    out["X-Forwarded-Proto"] = pick("X-Forwarded-Proto", "https")
    out["X-Forwarded-Host"] = pick("X-Forwarded-Host", host)
    out["X-Forwarded-Uri"] = pick("X-Forwarded-Uri", uri)
    return str(middleware["address"]), out


@pytest.mark.parametrize("env", ["nginx"], indirect=True)
def test_traefik_example_replayed(env: Env) -> None:
    """traefik.yml: its forwardAuth middleware's requests, replayed to the gateway
    configured by gateway.yaml, get the sign-in redirect, then 200 with every
    authResponseHeaders header; forged X-Forwarded-* are overwritten; the app host's
    /.gateway/ paths and the authenticate host go to the gateway with their Host."""
    config = yaml.safe_load((EXAMPLES / "traefik.yml").read_text())
    middleware = config["http"]["middlewares"]["gateway-auth"]["forwardAuth"]
    routers = config["http"]["routers"]
    assert routers["app"]["middlewares"] == ["gateway-auth"]
    assert "PathPrefix(`/.gateway/`)" in routers["app-gateway-paths"]["rule"]
    assert "middlewares" not in routers["app-gateway-paths"]
    assert routers["gateway-sign-in"]["service"] == "gateway"
    gateway = config["http"]["services"]["gateway"]["loadBalancer"]
    assert gateway.get("passHostHeader", True) is True
    assert gateway["servers"] == [{"url": "http://127.0.0.1:8000"}]

    address = urlsplit(middleware["address"].replace(":8000", f":{env.gw.port}"))
    assert address.hostname == FWD
    middleware = {**middleware, "address": address.geturl()}
    app = f"{APP}:{env.port}"
    forged = {"Accept": "text/html", "X-Forwarded-Host": "evil.example",
              "X-Forwarded-Uri": "//evil.example/", "X-Original-URL": "https://evil.example/"}

    def ask(headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        where, sent = traefik_request(middleware, "GET", app, "/page?x=1", headers)
        parts = urlsplit(where)
        status, answer, body = env.gw.get(parts.path or "/", host=parts.netloc, headers=sent)
        return status, {k.lower(): v for k, v in answer.items()}, body

    status, answer, _ = ask(forged)
    assert status == 302
    assert env.sealed_sign_in_target(answer["location"]) == env.app("/page?x=1")

    browser = env.browser()
    assert browser.sign_in(env.app("/"), "alice@example.com").status == 200
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies[APP].items())
    status, answer, body = ask({**forged, "Cookie": cookie})
    assert status == 200, body
    for name in middleware["authResponseHeaders"]:
        assert answer.get(name.lower()), name

