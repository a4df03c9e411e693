"""Token refresh and programmatic login against node-oidc-provider."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.peers import echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


def config(op: Any, port: int, upstream: str) -> dict[str, Any]:
    return {
        "authenticate_service_url": f"http://auth.test:{port}",
        "idp_provider": "oidc", "idp_provider_url": op.issuer,
        "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
        "idp_scopes": ["openid", "email", "groups", "offline_access"],
        "cookie_secure": False,
        "policy": [{"from": f"http://app.test:{port}", "to": upstream,
                    "allow_any_authenticated_user": True, "pass_identity_headers": True}],
    }


def test_tokens_refreshed_before_expiry(tmp_path: Path, require_binary: Any) -> None:
    """With a 70 s access token (refresh starts 60 s before expiry) the next request
    refreshes through the provider and the session goes on."""
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"],
                       access_token_ttl=70) as op, echo_upstream(tmp_path) as up, \
            gateway_daemon(tmp_path, config(op, port, up.url), port=port) as gw:
        browser = Browser()
        assert browser.sign_in(f"http://app.test:{port}/", "alice@example.test").status == 200
        time.sleep(11)
        assert browser.request("GET", f"http://app.test:{port}/again").status == 200
        messages = [e["message"] for e in gw.log_events()]
        assert "refreshed the tokens of alice@example.test" in messages
        assert browser.request("GET", f"http://app.test:{port}/third").status == 200


def test_failed_refresh_ends_session(tmp_path: Path, require_binary: Any) -> None:
    """When the provider is gone at refresh time the session ends (sign-in again)."""
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with echo_upstream(tmp_path) as up:
        with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"],
                           access_token_ttl=70) as op:
            cfg = config(op, port, up.url)
            gw_cm = gateway_daemon(tmp_path, cfg, port=port)
            gw = gw_cm.__enter__()
            browser = Browser()
            assert browser.sign_in(f"http://app.test:{port}/", "alice@example.test").status \
                == 200
        time.sleep(11)
        try:
            reply = browser.request("GET", f"http://app.test:{port}/x")
            assert reply.status == 302
            messages = [e["message"] for e in gw.log_events()]
            assert any("refresh for alice@example.test failed" in m for m in messages)
        finally:
            gw_cm.__exit__(None, None, None)


def test_programmatic_login(tmp_path: Path, require_binary: Any) -> None:
    """A CLI asks for a sign-in URL with its loopback redirect, the user signs in, the
    CLI receives gateway_jwt and uses it as Authorization: Gateway."""
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up, \
            gateway_daemon(tmp_path, config(op, port, up.url), port=port):
        cli = Browser(accept="*/*")
        login = f"http://app.test:{port}/.gateway/api/v1/login"
        assert cli.request("GET", login).status == 404
        assert cli.request("GET", login + "?gateway_redirect_uri=https://example.com/x"
                           ).status == 400
        assert cli.request("POST", login + "?gateway_redirect_uri=http://localhost:9/").status \
            == 405
        reply = cli.request("GET", login + "?gateway_redirect_uri=http://127.0.0.1:9/cb?a=1")
        assert reply.status == 200
        sign_in_url = reply.body.decode()
        assert sign_in_url.startswith(f"http://auth.test:{port}/.gateway/sign_in?")
        final = Browser().sign_in(sign_in_url, "alice@example.test", stop="http://127.0.0.1:9/")
        assert final.url.startswith("http://127.0.0.1:9/cb?")
        params = parse_qs(urlsplit(final.url).query)
        assert params["a"] == ["1"]
        token = params["gateway_jwt"][0]
        api = Browser(accept="application/json")
        assert api.request("GET", f"http://app.test:{port}/api").status == 401
        ok = api.request("GET", f"http://app.test:{port}/api",
                         headers={"Authorization": f"Gateway {token}"})
        assert ok.status == 200
        sent = {k.lower(): v for k, v in json.loads(ok.body)["headers"]}
        assert "authorization" not in sent
        assert "x-gateway-jwt-assertion" in sent
        bearer = api.request("GET", f"http://app.test:{port}/api",
                             headers={"Authorization": f"Bearer Gateway-{token}"})
        assert bearer.status == 200


def test_client_secret_post_provider(tmp_path: Path, require_binary: Any) -> None:
    """A client registered for client_secret_post still signs in (basic is refused by
    the provider, the gateway falls back to post)."""
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"],
                       token_auth_method="client_secret_post") as op, \
            echo_upstream(tmp_path) as up, \
            gateway_daemon(tmp_path, config(op, port, up.url), port=port):
        reply = Browser().sign_in(f"http://app.test:{port}/", "alice@example.test")
        assert reply.status == 200


def test_client_claim_headers_never_forwarded(tmp_path: Path, require_binary: Any) -> None:
    """A client's own copy of a configured claim header (custom name included) is
    dropped on public routes too."""
    port = free_port()
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "jwt_claims_headers": {"X-Email": "email"},
            "policy": [{"from": f"http://pub.test:{port}", "to": up.url,
                        "allow_public_unauthenticated_access": True}]}, port=port):
        reply = Browser().request("GET", f"http://pub.test:{port}/",
                                  headers={"X-Email": "admin@example.test"})
        sent = {k.lower() for k, _ in json.loads(reply.body)["headers"]}
        assert "x-email" not in sent
