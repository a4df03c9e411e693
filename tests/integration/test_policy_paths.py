"""The policy language where a decision comes from other than a browser's cookie on a
plain listener: ``source_ip`` behind a PROXY protocol balancer (v1 and v2; a balancer's
own ``UNKNOWN``/``LOCAL`` header leaves the balancer as the client, as docs/how-to/tls.md says),
and a programmatic token (``Authorization: Gateway``) on a route whose policy reads the
person and the request."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream, oidc_provider
from tests.support.processes import free_port
from tests.support.rawhttp import one_shot, status_of

pytestmark = pytest.mark.integration

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
# no route here needs anyone signed in; policy routes still need the settings
SIGN_IN = {"authenticate_service_url": "https://auth.test", "idp_provider": "oidc",
           "idp_provider_url": "http://127.0.0.1:9", "idp_client_id": "gateway",
           "idp_client_secret": "secret"}


def v1(source: str) -> bytes:
    return f"PROXY TCP4 {source} 127.0.0.1 4242 443\r\n".encode()


def v2(source: bytes | None) -> bytes:
    """A v2 PROXY header for IPv4 ``source`` (four bytes), or LOCAL for ``None``."""
    if source is None:
        return V2_SIGNATURE + bytes([0x20, 0x00]) + struct.pack("!H", 0)
    block = source + bytes([127, 0, 0, 1]) + struct.pack("!HH", 4242, 443)
    return V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack("!H", len(block)) + block


@pytest.fixture(scope="module")
def behind_balancer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("policy-proxyproto")
    with echo_upstream(tmp, name="balanced") as up:
        config = {**SIGN_IN, "use_proxy_protocol": True, "policy": [
            {"from": "https://office.test", "to": up.url,
             "policy": [{"allow": {"or": [{"source_ip": "203.0.113.0/24"}]}}]},
            {"from": "https://blocked.test", "to": up.url, "policy": [
                {"allow": {"or": [{"accept": True}]}},
                {"deny": {"or": [{"source_ip": ["198.51.100.0/24", "127.0.0.0/8"]}]}}]},
        ]}
        with gateway_daemon(tmp, config) as gw:
            yield gw


def ask(gw: Daemon, header: bytes, host: str) -> int:
    request = f"GET /x HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n" \
              "Connection: close\r\n\r\n"
    reply = one_shot(gw.port, header + request.encode())
    status = status_of(reply)
    if status == 200:
        assert b'"path"' in reply, reply[:300]  # the echo upstream answered
    return status


@pytest.mark.parametrize(("header", "host", "status"), [
    (v1("203.0.113.7"), "office.test", 200),
    (v1("192.0.2.7"), "office.test", 401),  # not signed in, and not let in: sign in
    (v2(bytes([203, 0, 113, 9])), "office.test", 200),
    (v2(bytes([198, 51, 100, 9])), "office.test", 401),
    (v1("192.0.2.7"), "blocked.test", 200),
    (v1("198.51.100.20"), "blocked.test", 401),
    (v2(bytes([198, 51, 100, 9])), "blocked.test", 401),
    # a balancer's own health check: the balancer (127.0.0.1 here) is the client
    (b"PROXY UNKNOWN\r\n", "office.test", 401),
    (b"PROXY UNKNOWN\r\n", "blocked.test", 401),
    (v2(None), "blocked.test", 401),
], ids=["v1-in", "v1-out", "v2-in", "v2-out", "deny-v1-other", "deny-v1-listed",
        "deny-v2-listed", "unknown-office", "unknown-blocked", "local-blocked"])
def test_source_ip_behind_proxy_protocol(behind_balancer: Daemon, header: bytes, host: str,
                                         status: int) -> None:
    assert ask(behind_balancer, header, host) == status


def test_programmatic_token_on_a_policy_route(tmp_path: Path, require_binary: Any) -> None:
    """A CLI's token is decided by the route's policy like a browser's cookie: who
    (e-mail), the method and the path, request by request."""
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        config = {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups", "offline_access"],
            "cookie_secure": False,
            "policy": [{"from": f"http://api.test:{port}", "to": up.url, "policy": [
                {"allow": {"and": [{"email": {"ends_with": "@example.test"}},
                                   {"http_method": {"in": ["GET", "HEAD"]}}]}},
                {"deny": {"or": [{"http_path": {"starts_with": "/admin"}}]}}]}],
        }
        with gateway_daemon(tmp_path, config, port=port):
            tokens = {who: token_for(port, who)
                      for who in ("alice@example.test", "carol@other.test")}
            api = Browser(accept="application/json")

            def status(method: str, path: str, who: str) -> int:
                return api.request(method, f"http://api.test:{port}{path}", headers={
                    "Authorization": f"Gateway {tokens[who]}"}).status

            assert status("GET", "/v1/items", "alice@example.test") == 200
            assert status("POST", "/v1/items", "alice@example.test") == 403
            assert status("GET", "/admin/users", "alice@example.test") == 403
            assert status("GET", "/v1/items", "carol@other.test") == 403
            assert api.request("GET", f"http://api.test:{port}/v1/items").status == 401


def token_for(port: int, who: str) -> str:
    """Programmatic login: the sign-in URL for a loopback redirect, signed in as
    ``who``, the token from the redirect."""
    cli = Browser(accept="*/*")
    reply = cli.request("GET", f"http://api.test:{port}/.gateway/api/v1/login"
                               "?gateway_redirect_uri=http://127.0.0.1:9/cb")
    assert reply.status == 200, (reply.status, reply.body[:300])
    final = Browser().sign_in(reply.body.decode(), who, stop="http://127.0.0.1:9/")
    return parse_qs(urlsplit(final.url).query)["gateway_jwt"][0]
