"""The data plane against real upstreams on loopback: routing, rewrites, headers,
redirects, load balancing, upstream TLS, timeouts and upgrades."""

from __future__ import annotations

import base64
import collections
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import ManagedProcess, free_port
from tests.support.rawhttp import RawClient, read_until

pytestmark = pytest.mark.integration
PEERS = Path(__file__).resolve().parents[1] / "peers"
IDENTITY = {
    "authenticate_service_url": "https://authenticate.example.com",
    "idp_provider": "oidc", "idp_provider_url": "https://idp.example.com",
    "idp_client_id": "gateway", "idp_client_secret": "secret",
}


class Env:
    gw: Daemon
    a: Any
    b: Any
    tls: Any
    mtls: Any
    ca: trustme.CA
    client_cert: Any


def public(host: str, to: Any, **extra: Any) -> dict[str, Any]:
    return {"from": f"https://{host}", "to": to, "allow_public_unauthenticated_access": True,
            **extra}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("dataplane")
    ca = trustme.CA()
    server = ca.issue_cert("upstream.internal", "127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(tmp / "upstream.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    client = ca.issue_cert("gateway-client")
    client.cert_chain_pems[0].write_to_path(str(tmp / "client.crt"))
    client.private_key_pem.write_to_path(str(tmp / "client.key"))
    ws_port = free_port()
    with ExitStack() as stack:
        a = stack.enter_context(echo_upstream(tmp, name="a"))
        b = stack.enter_context(echo_upstream(tmp, name="b"))
        tls = stack.enter_context(echo_upstream(tmp, name="tls", tls_cert=tmp / "upstream.pem"))
        mtls = stack.enter_context(echo_upstream(tmp, name="mtls", tls_cert=tmp / "upstream.pem",
                                                 client_ca=tmp / "ca.pem"))
        ws = stack.enter_context(ManagedProcess([sys.executable, str(PEERS / "ws_echo.py"),
                                                 "--port", str(ws_port)], log_dir=tmp,
                                                name="ws"))
        ws.wait_for_log_line("READY", 10)
        dead = f"http://127.0.0.1:{free_port()}"
        ca_b64 = base64.b64encode(ca.cert_pem.bytes()).decode()
        policy = [
            public("public.test", a.url, set_request_headers={"X-Route": "public"},
                   remove_request_headers=["X-Remove-Me"],
                   set_response_headers={"X-Frame-Options": "DENY", "X-Extra": "yes"},
                   rewrite_response_headers=[{"header": "X-Echo-Name", "prefix": "a",
                                              "value": "rewritten-a"}]),
            public("paths.test", a.url, path="/exact"),
            public("paths.test", a.url, prefix="/pre", prefix_rewrite="/rewritten"),
            public("paths.test", a.url, regex="/re/[0-9]+"),
            public("slash.test", a.url + "/base"),
            public("slash2.test", a.url + "/base/"),
            public("regexrw.test", a.url, regex_rewrite_pattern="^/service/([^/]+)(/.*)$",
                   regex_rewrite_substitution="\\2/instance/\\1"),
            public("hostrw.test", a.url, host_rewrite="internal.example"),
            public("hosthdr.test", a.url, host_rewrite_header="X-Target-Host"),
            public("hostpath.test", a.url, host_path_regex_rewrite_pattern="^/([^/]+)/.*$",
                   host_path_regex_rewrite_substitution="\\1"),
            public("preserve.test", a.url, preserve_host_header=True),
            {"from": "https://private.test", "to": a.url, "allowed_domains": ["example.com"]},
            {"from": "https://redirect.test", "redirect": {"https_redirect": True,
                                                            "strip_query": True}},
            {"from": "https://redirect2.test", "redirect": {
                "host_redirect": "other.test", "path_redirect": "/new", "response_code": 308}},
            public("lb.test", [a.url + ",3", b.url + ",1"]),
            public("dead.test", dead),
            public("slow.test", a.url, timeout="1s"),
            public("outlier.test", a.url, outlier_detection={
                "consecutive_5xx": 2, "base_ejection_time": "2s", "max_ejection_percent": 100}),
            public("tls.test", tls.url, tls_custom_ca=ca_b64),
            public("tlsname.test", tls.url, tls_custom_ca=ca_b64,
                   tls_server_name="upstream.internal"),
            public("tlsbadname.test", tls.url, tls_custom_ca=ca_b64,
                   tls_server_name="other.internal"),
            public("tlsuntrusted.test", tls.url),
            public("tlsskip.test", tls.url, tls_skip_verify=True),
            public("mtls.test", mtls.url, tls_custom_ca=ca_b64,
                   tls_client_cert_file=str(tmp / "client.crt"),
                   tls_client_key_file=str(tmp / "client.key")),
            public("mtlsmissing.test", mtls.url, tls_custom_ca=ca_b64),
            public("ws.test", f"http://127.0.0.1:{ws_port}", allow_websockets=True),
            public("nows.test", f"http://127.0.0.1:{ws_port}"),
            public("spdy.test", f"http://127.0.0.1:{ws_port}", allow_spdy=True),
            public("robots.test", a.url, path="/robots.txt"),
        ]
        gw = stack.enter_context(gateway_daemon(tmp, {"policy": policy, **IDENTITY}))
        e = Env()
        e.gw, e.a, e.b, e.tls, e.mtls, e.ca = gw, a, b, tls, mtls, ca
        yield e


def get(env: Env, host: str, path: str = "/", headers: dict[str, str] | None = None,
        method: str = "GET") -> Any:
    with RawClient(env.gw.port) as client:
        return client.request(method, path, host, headers)


def echoed_headers(response: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in response.json()["headers"]}


# -- routing ------------------------------------------------------------------


def test_internal_endpoints(env: Env) -> None:
    """/ping and /healthz answer on any host; robots.txt disallows unless public-served."""
    for path in ("/ping", "/healthz"):
        reply = get(env, "anything.test", path)
        assert (reply.status, reply.body) == (200, b"OK\n")
    assert get(env, "public.test", "/ping", method="HEAD").body == b""
    assert get(env, "public.test", "/ping", method="POST").status == 405
    robots = get(env, "paths.test", "/robots.txt")
    assert (robots.status, robots.body) == (200, b"User-agent: *\nDisallow: /")
    served = get(env, "robots.test", "/robots.txt")
    assert served.json()["name"] == "a"


def test_unknown_host_and_unmatched_path(env: Env) -> None:
    """Unknown hosts and known hosts without a matching route answer 404."""
    assert get(env, "unknown.test").status == 404
    assert b"unknown.test route unknown" in get(env, "unknown.test").body
    reply = get(env, "paths.test", "/nothing")
    assert reply.status == 404
    assert b"no route matches" in reply.body


def test_host_port_rules(env: Env) -> None:
    """Host with the default port or a trailing dot and any case matches the route."""
    for host in ("public.test", "PUBLIC.test", "public.test:443", "public.test."):
        assert get(env, host).status == 200, host
    assert get(env, "public.test:8443").status == 404


def test_path_prefix_regex_matching(env: Env) -> None:
    """`path` is exact, `prefix` a prefix (rewritten), `regex` a full RE2 match."""
    assert get(env, "paths.test", "/exact").json()["path"] == "/exact"
    assert get(env, "paths.test", "/exact/more").status == 404
    assert get(env, "paths.test", "/pre/x?y=1").json()["path"] == "/rewritten/x?y=1"
    assert get(env, "paths.test", "/re/123").json()["path"] == "/re/123"
    assert get(env, "paths.test", "/re/12a").status == 404


def test_non_public_route_waits_for_identity(env: Env) -> None:
    """A route that is not public is refused through the authorization hook."""
    reply = get(env, "private.test")
    assert reply.status == 401
    assert "GET / HTTP" not in env.a.process.log_text().split("private")[0][-1:]


# -- rewrites -------------------------------------------------------------------


def test_trailing_slash_rule(env: Env) -> None:
    """`to` with a path and no slash glues the request path on; with a slash it separates."""
    assert get(env, "slash.test", "/foo").json()["path"] == "/basefoo"
    assert get(env, "slash2.test", "/foo").json()["path"] == "/base/foo"
    assert get(env, "slash2.test", "/").json()["path"] == "/base/"


def test_regex_rewrite(env: Env) -> None:
    """regex_rewrite_pattern/substitution reshape the path."""
    assert get(env, "regexrw.test", "/service/abc/x").json()["path"] == "/x/instance/abc"


def test_host_header_rules(env: Env) -> None:
    """Default Host is the upstream's; the four rewrite options change it."""
    assert echoed_headers(get(env, "public.test"))["host"] == f"127.0.0.1:{env.a.port}"
    assert echoed_headers(get(env, "hostrw.test"))["host"] == "internal.example"
    assert echoed_headers(get(env, "hosthdr.test", headers={"X-Target-Host": "t.example"})
                          )["host"] == "t.example"
    assert echoed_headers(get(env, "hostpath.test", "/example.com/some/path"))["host"] == \
        "example.com"
    assert echoed_headers(get(env, "preserve.test"))["host"] == "preserve.test"


# -- headers ----------------------------------------------------------------------


def test_request_headers(env: Env) -> None:
    """set/remove_request_headers, X-Forwarded-*, hop-by-hop and X-Gateway-* stripping."""
    sent = echoed_headers(get(env, "public.test", headers={
        "X-Remove-Me": "1", "X-Route": "client", "Connection": "X-Hop",
        "X-Hop": "secret", "Keep-Alive": "timeout=5", "X-Gateway-Jwt-Assertion": "forged",
        "X-Gateway-Claim-Email": "admin@example.com", "X-Forwarded-For": "10.9.9.9",
        "X-Forwarded-Proto": "https", "X-Keep": "kept",
    }))
    assert sent["x-route"] == "public"
    assert sent["x-keep"] == "kept"
    for gone in ("x-remove-me", "x-hop", "keep-alive", "x-gateway-jwt-assertion",
                 "x-gateway-claim-email"):
        assert gone not in sent, gone
    assert sent["x-forwarded-for"] == "10.9.9.9, 127.0.0.1"
    assert sent["x-forwarded-proto"] == "http"
    assert sent["x-forwarded-host"] == "public.test"


def test_response_headers(env: Env) -> None:
    """Global security headers, route overrides per key, rewrite_response_headers."""
    reply = get(env, "public.test")
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["x-extra"] == "yes"
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["strict-transport-security"].startswith("max-age=31536000")
    other = get(env, "paths.test", "/exact")
    assert other.headers["x-frame-options"] == "SAMEORIGIN"
    assert "x-extra" not in other.headers


def test_redirect_routes(env: Env) -> None:
    """Redirect routes answer with their Location and code, never contacting upstreams."""
    reply = get(env, "redirect.test", "/a/b?q=1")
    assert reply.status == 301
    assert reply.headers["location"] == "https://redirect.test/a/b"
    reply = get(env, "redirect2.test", "/x?q=1")
    assert reply.status == 308
    assert reply.headers["location"] == "http://other.test/new?q=1"


# -- upstreams --------------------------------------------------------------------


def test_weighted_round_robin(env: Env) -> None:
    """Weights 3:1 share requests 3:1."""
    names = collections.Counter(get(env, "lb.test").json()["name"] for _ in range(40))
    assert names == {"a": 30, "b": 10}


def test_connections_are_pooled(env: Env) -> None:
    """Sequential requests reuse one upstream connection."""
    with RawClient(env.gw.port) as client:
        ports = {tuple(client.request("GET", "/", "public.test").json()["client"])
                 for _ in range(5)}
    assert len(ports) == 1


def test_dead_upstream_is_prompt(env: Env) -> None:
    """A closed port answers 503 at once."""
    started = time.monotonic()
    assert get(env, "dead.test").status == 503
    assert time.monotonic() - started < 2


def test_route_timeout(env: Env) -> None:
    """A slow upstream gives 504 after the route timeout."""
    started = time.monotonic()
    reply = get(env, "slow.test", "/delay/5")
    assert reply.status == 504
    assert 0.9 < time.monotonic() - started < 3


def test_outlier_ejection(env: Env) -> None:
    """consecutive_5xx failures eject the host; it comes back after the ejection time."""
    assert get(env, "outlier.test", "/status/500").status == 500
    assert get(env, "outlier.test", "/status/500").status == 500
    reply = get(env, "outlier.test", "/")
    assert reply.status == 503
    assert b"no healthy upstream" in reply.body
    time.sleep(2.5)
    assert get(env, "outlier.test", "/").status == 200


def test_upstream_tls(env: Env) -> None:
    """Custom CA, server name override, untrusted/mismatched certificates, skip verify."""
    assert get(env, "tls.test").json()["name"] == "tls"
    assert get(env, "tlsname.test").status == 200
    assert get(env, "tlsbadname.test").status == 502
    assert get(env, "tlsuntrusted.test").status == 502
    assert get(env, "tlsskip.test").status == 200


def test_upstream_client_certificate(env: Env) -> None:
    """tls_client_cert/key are presented to an upstream that requires them."""
    assert get(env, "mtls.test").json()["name"] == "mtls"
    assert get(env, "mtlsmissing.test").status in (502, 503)


# -- upgrades ---------------------------------------------------------------------


def _ws_handshake(env: Env, host: str) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", env.gw.port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    return sock, read_until(sock, b"\r\n\r\n")


def test_websocket_echo(env: Env) -> None:
    """allow_websockets turns the connection into a pipe to the upstream."""
    sys.path.insert(0, str(PEERS))
    from ws_echo import frame

    sock, head = _ws_handshake(env, "ws.test")
    with sock:
        assert head.startswith(b"HTTP/1.1 101 ")
        payload = b"hello through the gateway" * 100
        sock.sendall(frame(2, payload, mask=b"abcd"))
        expected = frame(2, payload)
        got = head.split(b"\r\n\r\n", 1)[1]
        while len(got) < len(expected):
            got += sock.recv(65536)
        assert got == expected


def test_websocket_refused_without_flag(env: Env) -> None:
    """Without allow_websockets the upgrade is refused and nothing is piped."""
    sock, head = _ws_handshake(env, "nows.test")
    with sock:
        assert head.startswith(b"HTTP/1.1 403 ")


def test_spdy_upgrade_gate(env: Env) -> None:
    """SPDY upgrades are refused without allow_spdy and forwarded with it."""
    for host, expected in (("nows.test", 403), ("spdy.test", 200)):
        with RawClient(env.gw.port) as client:
            reply = client.request("GET", "/", host, {"Upgrade": "SPDY/3.1",
                                                      "Connection": "Upgrade"})
            assert reply.status == expected, host


def test_error_pages_by_client(env: Env) -> None:
    """Gateway errors are a small HTML page for browsers, JSON on request, else text."""
    page = get(env, "dead.test", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status == 503
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert b"<h1>Service unavailable</h1>" in page.body
    assert page.headers["x-request-id"].encode() in page.body  # to quote
    as_json = get(env, "dead.test", headers={"Accept": "application/json"})
    doc = json.loads(as_json.body)
    assert doc["request_id"] == as_json.headers["x-request-id"]
    assert {k: doc[k] for k in ("status", "error")} == {"status": 503,
                                                       "error": "upstream connect error"}
    plain = get(env, "dead.test")
    assert plain.body == b"503 Service Unavailable: upstream connect error\n"
