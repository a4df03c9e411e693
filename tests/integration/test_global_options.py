"""Global proxy settings that need their own daemon: X-Forwarded-* trust, header
defaults, DNS family and the idle timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration


def route(up: Upstream, to: str | None = None) -> dict[str, Any]:
    return {"from": "https://app.test", "to": to or up.url,
            "allow_public_unauthenticated_access": True}


def sent_headers(port: int, headers: dict[str, str] | None = None) -> dict[str, str]:
    with RawClient(port) as client:
        reply = client.request("GET", "/", "app.test", headers)
    assert reply.status == 200, reply.body
    return {k.lower(): v for k, v in reply.json()["headers"]}  # type: ignore[index,union-attr]


def test_skip_xff_append(tmp_path: Path) -> None:
    """skip_xff_append leaves X-Forwarded-For as the client sent it."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "skip_xff_append": True}) as gw:
        sent = sent_headers(gw.port, {"X-Forwarded-For": "10.1.1.1"})
        assert sent["x-forwarded-for"] == "10.1.1.1"
        assert "x-forwarded-for" not in sent_headers(gw.port)


def test_trusted_hops(tmp_path: Path) -> None:
    """With xff_num_trusted_hops the client's X-Forwarded-Proto/-Host are kept and the
    client address is taken from X-Forwarded-For (visible in the access log)."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "xff_num_trusted_hops": 1}) as gw:
        sent = sent_headers(gw.port, {"X-Forwarded-For": "203.0.113.7",
                                      "X-Forwarded-Proto": "https",
                                      "X-Forwarded-Host": "public.example"})
        assert sent["x-forwarded-for"] == "203.0.113.7, 127.0.0.1"
        assert sent["x-forwarded-proto"] == "https"
        assert sent["x-forwarded-host"] == "public.example"
        event = gw.wait_for_event(lambda e: e.get("namespace") == "gateway.access")
        assert event["client"] == "203.0.113.7"


def test_untrusted_forwarded_headers_overwritten(tmp_path: Path) -> None:
    """Without trusted hops the client's X-Forwarded-Proto/-Host are replaced."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {"policy": [route(up)]}) as gw:
        sent = sent_headers(gw.port, {"X-Forwarded-Proto": "https",
                                      "X-Forwarded-Host": "evil.example"})
        assert sent["x-forwarded-proto"] == "http"
        assert sent["x-forwarded-host"] == "app.test"
        event = gw.wait_for_event(lambda e: e.get("namespace") == "gateway.access")
        assert event["client"] == "127.0.0.1"


def test_response_headers_disabled(tmp_path: Path) -> None:
    """set_response_headers: {disable: true} removes the default security headers."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "set_response_headers": {"disable": True}}) as gw, \
            RawClient(gw.port) as client:
        reply = client.request("GET", "/", "app.test")
        assert "x-frame-options" not in reply.headers
        assert "strict-transport-security" not in reply.headers


@pytest.mark.parametrize(("family", "status"), [("V4_ONLY", 200), ("AUTO", 200),
                                                ("V6_ONLY", 503)])
def test_dns_lookup_family(tmp_path: Path, family: str, status: int) -> None:
    """An upstream named localhost, listening on IPv4 only, is reached per the family."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up, f"http://localhost:{up.port}")],
            "dns_lookup_family": family}) as gw, RawClient(gw.port) as client:
        assert client.request("GET", "/", "app.test").status == status


def test_idle_keepalive_closed(tmp_path: Path) -> None:
    """A keep-alive connection idle longer than timeout_idle is closed."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "timeout_idle": "1s"}) as gw, RawClient(gw.port) as client:
        assert client.request("GET", "/", "app.test").status == 200
        assert client.closed_by_peer(timeout=4)
