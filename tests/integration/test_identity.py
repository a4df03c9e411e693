"""Sign-in end to end against node-oidc-provider on loopback: the redirect chain across
two hosts, the upstream seeing only signed-in users who are allowed, the assertion
verified with the gateway's JWKS, claim headers, cookies, sign-out."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import _require_binary
from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import NODE_INSTALL_HINT, Upstream, echo_upstream, oidc_provider
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration


class Env:
    gw: Daemon
    up: Upstream
    port: int
    secrets: tuple[str, ...]  # configured secrets no log line may show

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require_binary("node", NODE_INSTALL_HINT)
    tmp = tmp_path_factory.mktemp("identity")
    port = free_port()
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://auth.test:{port}/oauth2/callback"]))
        up = stack.enter_context(echo_upstream(tmp, name="app"))

        def route(host: str, **rules: Any) -> dict[str, Any]:
            return {"from": f"http://{host}:{port}", "to": up.url,
                    "pass_identity_headers": True, **rules}

        config = {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups", "offline_access"],
            "idp_service_account": "groups-from-claims",
            "cookie_secure": False,
            "signing_key": base64.b64encode(key).decode(),
            "jwt_claims_headers": {"X-Email": "email", "X-Groups": "groups"},
            "signout_redirect_url": f"http://public.test:{port}/bye",
            "policy": [
                route("users.test", allowed_users=["alice@example.test"]),
                route("domain.test", allowed_domains=["example.test"]),
                route("groups.test", allowed_groups=["admins"]),
                route("claims.test", allowed_idp_claims={"email_verified": True}),
                route("anyone.test", allow_any_authenticated_user=True),
                route("nobody.test", allowed_users=["nobody@example.test"]),
                {"from": f"http://public.test:{port}", "to": up.url,
                 "allow_public_unauthenticated_access": True},
            ],
        }
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        e = Env()
        e.gw, e.up, e.port = gw, up, port
        e.secrets = (op.client_secret, config["signing_key"])
        yield e


def upstream_requests(env: Env) -> int:
    return env.up.process.log_text().count('"GET ')


def echoed(reply: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in json.loads(reply.body)["headers"]}


def test_browser_sign_in_chain(env: Env) -> None:
    """A browser is sent through the provider and back, lands on the original URL with
    its query, and the upstream gets a verifiable assertion and the claim headers."""
    browser = Browser()
    reply = browser.sign_in(env.url("users.test", "/private/page?x=1"), "alice@example.test")
    assert reply.status == 200, reply.body[:300]
    assert json.loads(reply.body)["path"] == "/private/page?x=1"
    headers = echoed(reply)
    assert headers["x-email"] == "alice@example.test"
    assert headers["x-groups"] == "admins,engineering"
    assert "_gateway" not in headers.get("cookie", "")
    jwks = json.loads(browser.request("GET", env.url("auth.test",
                                                     "/.well-known/gateway/jwks.json")).body)
    (key,) = jwks["keys"]
    assert {"use", "kty", "kid", "crv", "alg", "x", "y"} <= set(key)
    claims = jwt.decode(headers["x-gateway-jwt-assertion"], key=jwt.PyJWK(key),
                        algorithms=["ES256"], audience="users.test",
                        issuer=f"auth.test:{env.port}")
    assert claims["email"] == "alice@example.test"
    assert claims["exp"] - claims["iat"] <= 300
    # cookie attributes on the route host
    session_cookie = browser.cookies["users.test"]["_gateway"]
    assert session_cookie


@pytest.mark.parametrize(("host", "login", "allowed"), [
    ("users.test", "bob@example.test", False),
    ("domain.test", "bob@example.test", True),
    ("domain.test", "eve@evil.test", False),
    ("groups.test", "carol@example.test#admins", True),
    ("groups.test", "dave@example.test#staff", False),
    ("claims.test", "bob@example.test", True),
    ("anyone.test", "eve@evil.test", True),
    ("nobody.test", "alice@example.test", False),
])
def test_allow_rules(env: Env, host: str, login: str, allowed: bool) -> None:
    """Each allow rule admits whom it names; everyone else gets 403 and the upstream is
    never contacted for them."""
    before = upstream_requests(env)
    reply = Browser().sign_in(env.url(host, "/x"), login)
    if allowed:
        assert reply.status == 200
        assert upstream_requests(env) == before + 1
    else:
        assert reply.status == 403
        assert b"does not allow you" in reply.body
        assert upstream_requests(env) == before


def test_non_browser_gets_401(env: Env) -> None:
    """Without a session, JSON and XHR clients get 401, browsers a redirect."""
    browser = Browser(accept="application/json")
    reply = browser.request("GET", env.url("users.test", "/api"))
    assert reply.status == 401
    assert json.loads(reply.body)["status"] == 401
    xhr = Browser().request("GET", env.url("users.test", "/api"),
                            headers={"X-Requested-With": "XMLHttpRequest"})
    assert xhr.status == 401
    page = Browser().request("GET", env.url("users.test", "/api"))
    assert page.status == 302
    assert (page.header("location") or "").startswith(f"http://auth.test:{env.port}/.gateway/sign_in?")


def test_tampered_or_foreign_cookie_is_not_a_session(env: Env) -> None:
    """A modified cookie, or a cookie from another gateway, means not signed in."""
    browser = Browser()
    browser.sign_in(env.url("users.test", "/"), "alice@example.test")
    value = browser.cookies["users.test"]["_gateway"]
    browser.cookies["users.test"]["_gateway"] = value[:-2] + ("A" if value[-2] != "A" else "B") \
        + value[-1]
    assert browser.request("GET", env.url("users.test", "/")).status == 302


def test_open_redirects_refused(env: Env) -> None:
    """Sign-in links are sealed: a hand-made target is refused."""
    for target in ("//evil.example/", "https://users.test.evil/", "javascript:alert(1)"):
        reply = Browser().request("GET", env.url("auth.test", "/.gateway/sign_in?")
                                  + urlencode({"gateway_redirect": target}))
        assert reply.status == 400


def test_sign_out_needs_csrf_and_ends_session_everywhere(env: Env) -> None:
    """Sign-out without the CSRF token is refused (400) or asks to confirm; with it the
    session ends on every host and the user goes to the provider's logout."""
    browser = Browser()
    assert browser.sign_in(env.url("users.test", "/"), "alice@example.test").status == 200
    assert browser.request("POST", env.url("users.test", "/.gateway/signout/"),
                           b"csrf=wrong").status == 400
    confirm = browser.request("GET", env.url("users.test", "/.gateway/signout/"))
    assert confirm.status == 200
    token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
    # the valid token posted by a page of another origin: refused, the session kept
    # (issue 39), whether the browser says so with Fetch Metadata or with Origin alone
    start = len(env.gw.log_events())
    for foreign in ({"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"},
                    {"Sec-Fetch-Site": "same-site", "Origin": env.url("public.test", "")},
                    {"Origin": "null"}):
        refused = browser.request("POST", env.url("users.test", "/.gateway/signout/"),
                                  f"csrf={token}".encode(), headers=foreign)
        assert refused.status == 403, foreign
        assert b"from another site" in refused.body
    assert browser.request("GET", env.url("users.test", "/")).status == 200  # still in
    wait_until(lambda: len([e for e in env.gw.log_events()[start:]
                            if "from another origin refused" in e.get("message", "")]) == 3,
               5, what="the refusals' log lines")
    done = browser.request("POST", env.url("users.test", "/.gateway/signout/"),
                           f"csrf={token}".encode(),
                           headers={"Sec-Fetch-Site": "same-origin",
                                    "Origin": env.url("users.test", "")})
    assert done.status == 302
    assert "/session/end" in (done.header("location") or "")
    again = Browser(cookies=browser.cookies)
    assert again.request("GET", env.url("users.test", "/")).status == 302


def test_jwks_and_public_route(env: Env) -> None:
    """Public routes need no sign-in; the JWKS endpoint lives on the authenticate host."""
    assert Browser().request("GET", env.url("public.test", "/bye")).status == 200
    reply = Browser().request("GET", env.url("auth.test", "/.well-known/gateway/jwks.json"))
    assert reply.status == 200
    assert reply.header("content-type") == "application/json"


def test_sign_in_logs_hold_no_secret(env: Env) -> None:
    """Sign-in, a request, a denial and sign-out are logged at info with the user and
    the route or host; no line holds a cookie, token, code, CSRF token or secret."""
    start = len(env.gw.log_events())
    browser = Browser()
    reply = browser.sign_in(env.url("users.test", "/private?x=1"), "alice@example.test")
    assert reply.status == 200
    assertion = echoed(reply)["x-gateway-jwt-assertion"]
    denied = Browser().sign_in(env.url("nobody.test", "/"), "alice@example.test")
    assert denied.status == 403
    confirm = browser.request("GET", env.url("users.test", "/.gateway/signout/"))
    csrf = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
    assert browser.request("POST", env.url("users.test", "/.gateway/signout/"),
                           f"csrf={csrf}".encode()).status == 302
    events = env.gw.log_events()[start:]
    text = "\n".join(json.dumps(e) for e in events)
    secrets = {*env.secrets, assertion, csrf}
    for cookies in browser.cookies.values():
        secrets.update(v for v in cookies.values() if len(v) >= 8)
    for _, url, _ in browser.history:
        for name, values in parse_qs(urlsplit(url).query).items():
            if name in ("code", "gateway_session", "gateway_jwt"):
                secrets.update(values)
    assert len(secrets) > 5
    leaked = [s[:12] + "..." for s in secrets if s and s in text]
    assert leaked == []
    assert not re.search(r"eyJ[\w-]{8,}\.[\w-]{8,}", text)  # nothing JWT-shaped at all

    def logged(message: str) -> dict[str, Any]:
        found = [e for e in events if e["message"].startswith(message)]
        assert found, message
        assert found[0]["level"] == "info"
        return found[0]
    signed_in = logged("signed in alice@example.test")
    assert signed_in["host"] == f"users.test:{env.port}" and signed_in["user"]
    refused = logged("access denied to nobody.test")
    assert refused["route"] == f"http://nobody.test:{env.port}"
    assert refused["user"] == "alice@example.test" and refused["user_id"]
    assert logged("signed out alice@example.test")["host"] == f"users.test:{env.port}"
    access = [e for e in events if e.get("namespace") == "gateway.access"
              and e.get("host") == f"users.test:{env.port}" and e.get("path") == "/private"]
    assert access and access[-1]["email"] == "alice@example.test"
    assert access[-1]["user_id"] and access[-1]["reason"]
    denial = [e for e in events if e.get("namespace") == "gateway.access"
              and e.get("host") == f"nobody.test:{env.port}" and e["status"] == 403]
    assert denial and denial[0]["email"] == "alice@example.test"
    assert denial[0]["reason"].startswith("denied")
