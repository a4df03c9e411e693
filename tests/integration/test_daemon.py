"""The daemon end to end: start, serve, log JSON, reload, refuse bad configs, stop."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from tests.support.daemon import REPO_ROOT, daemon_env, gateway_daemon, twistd_argv
from tests.support.peers import Upstream, echo_upstream
from tests.support.processes import ManagedProcess, free_port, port_open, wait_until

pytestmark = pytest.mark.integration


def public_route(upstream: Upstream, host: str = "app.localhost.test", **extra: Any
                 ) -> dict[str, Any]:
    return {"from": f"https://{host}", "to": upstream.url,
            "allow_public_unauthenticated_access": True, **extra}


def test_serves_public_route_and_internal_endpoints(tmp_path: Path) -> None:
    """A public route forwards to its upstream; /ping, unknown hosts, protected routes."""
    with echo_upstream(tmp_path, name="app") as up, gateway_daemon(tmp_path, {
        "policy": [public_route(up, set_request_headers={"X-Route": "app"})],
    }) as gw:
        status, headers, body = gw.get("/hello?x=1", host="app.localhost.test",
                                       headers={"X-Gateway-Jwt-Assertion": "forged"})
        assert status == 200
        echoed = json.loads(body)
        assert echoed["path"] == "/hello?x=1"
        sent = {name.lower(): value for name, value in echoed["headers"]}
        assert sent["host"] == f"127.0.0.1:{up.port}"
        assert sent["x-route"] == "app"
        assert sent["x-forwarded-for"] == "127.0.0.1"
        assert "x-gateway-jwt-assertion" not in sent
        assert headers["X-Frame-Options"] == "SAMEORIGIN"
        assert gw.get("/ping")[0:3:2] == (200, b"OK\n")
        assert gw.get("/", host="unknown.example")[0] == 404
        assert gw.get("/robots.txt", host="x.example")[2] == b"User-agent: *\nDisallow: /"


def test_logs_are_json_lines(tmp_path: Path) -> None:
    """Every output line is one JSON object, twistd's own start-up lines included."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
        "policy": [public_route(up)]}) as gw:
        gw.get("/ping")
        gw.wait_for_event(lambda e: e.get("namespace") == "gateway.access", what="access log")
        events = gw.log_events()
    messages = [e["message"] for e in events]
    assert any(m.startswith("twistd ") and "starting up" in m for m in messages)
    assert any(m.startswith("gateway 0.1.0 starting") for m in messages)
    assert {"time", "level", "namespace", "message"} <= set(events[0])


def test_debug_mode_logs_human_text(tmp_path: Path) -> None:
    """GATEWAY_DEBUG=true switches to human-readable lines."""
    with echo_upstream(tmp_path) as up, gateway_daemon(
        tmp_path, {"policy": [public_route(up)]}, env={"GATEWAY_DEBUG": "true"}
    ) as gw:
        wait_until(lambda: "proxy service started" in gw.process.log_text(), 10)
        lines = gw.process.log_text().splitlines()
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[0])
    assert any(" INFO " in line for line in lines)


def test_log_level_filters(tmp_path: Path) -> None:
    """log_level: error hides info and warn lines, twistd's included."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
        "policy": [public_route(up)], "log_level": "error"}) as gw:
        assert gw.get("/ping")[0] == 200
        time.sleep(0.5)
        levels = {e["level"] for e in gw.log_events()}
    assert levels <= {"error", "critical"}


def test_reload_on_edit_and_keep_on_invalid(tmp_path: Path) -> None:
    """An edit swaps routes within seconds; an invalid edit is logged and changes nothing."""
    with echo_upstream(tmp_path, name="one") as one, echo_upstream(tmp_path, name="two") as two, \
            gateway_daemon(tmp_path, {"policy": [public_route(one)]}) as gw:
        def served_by() -> str:
            return str(json.loads(gw.get("/", host="app.localhost.test")[2])["name"])

        assert served_by() == "one"
        gw.write_config({"insecure_server": True, "address": f"127.0.0.1:{gw.port}",
                         "policy": [public_route(two)]})
        wait_until(lambda: served_by() == "two", 5, what="reload to upstream two")
        gw.write_config({"insecure_server": True, "address": f"127.0.0.1:{gw.port}",
                         "services": "blue", "policy": [public_route(one)]})
        event = gw.wait_for_event(lambda e: e.get("errors"), what="reload error")
        assert event["level"] == "error"
        assert event["errors"] == ["services: config: blue is an invalid service type; valid "
                                   "values: all, authenticate, authorize, databroker, proxy"]
        assert served_by() == "two"


def test_sighup_reloads(tmp_path: Path) -> None:
    """SIGHUP reloads even when file polling would not notice yet."""
    with echo_upstream(tmp_path, name="one") as one, echo_upstream(tmp_path, name="two") as two, \
            gateway_daemon(tmp_path, {"policy": [public_route(one)]},
                           extra_args=("--poll-interval", "3600")) as gw:
        gw.write_config({"insecure_server": True, "address": f"127.0.0.1:{gw.port}",
                         "policy": [public_route(two)]})
        time.sleep(0.3)
        assert json.loads(gw.get("/", host="app.localhost.test")[2])["name"] == "one"
        assert gw.process.pid is not None
        os.kill(gw.process.pid, signal.SIGHUP)
        gw.wait_for_event(lambda e: "reloaded (SIGHUP)" in e.get("message", ""), what="SIGHUP")
        assert json.loads(gw.get("/", host="app.localhost.test")[2])["name"] == "two"


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM stops every service in order; twistd then re-raises the signal, which
    systemd counts as a clean stop."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [public_route(up)]}) as gw:
        code = gw.process.stop()
        messages = [e["message"] for e in gw.log_events()]
    assert code in (0, -signal.SIGTERM)
    assert "proxy service stopping" in messages
    assert messages[-1] == "Server Shut Down."


@pytest.mark.parametrize(("config", "expected"), [
    ({"services": "blue"}, "services: config: blue is an invalid service type"),
    ({"policy": [{"from": "https://a.example/p", "to": "http://b"}]},
     "policy[0].from: config: policy source url (https://a.example/p) contains a path, but it "
     "should be set using the path field instead"),
    ({"insecure_server": False}, "insecure_server: config: server must be run with `autocert`, "
     "`insecure_server` or manually provided certificates to start"),
    ({"cookie_secret": "gN3xnvfsAwfCXxnJorGLKUG4l2wC8sS8nfLMhcStPg=="},
     "cookie_secret: proxy: invalid 'COOKIE_SECRET': cryptutil: got 31 bytes but want 32"),
    ({"databroker_storage_type": "kvstore"}, "config: missing databroker storage backend dsn"),
])
def test_bad_config_exits_before_binding(tmp_path: Path, config: dict[str, Any],
                                         expected: str) -> None:
    """A bad config exits non-zero with the message, no traceback, nothing bound."""
    port = free_port()
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"insecure_server": True, "address": f"127.0.0.1:{port}",
                                    **config}))
    result = subprocess.run(twistd_argv(path), cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60, env={**os.environ, **daemon_env()})
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not port_open("127.0.0.1", port)


def test_example_config_starts(tmp_path: Path) -> None:
    """conf/config.example.yaml, with its secrets supplied, starts and serves its public
    route (the address is moved to a free port through the environment)."""
    port = free_port()
    env = {**os.environ, **daemon_env(), "ADDRESS": f"127.0.0.1:{port}",
           "SHARED_SECRET": "a2trazMya2trazMya2trazMya2trazMya2trazMya2s=",
           "COOKIE_SECRET": "a2trazMya2trazMya2trazMya2trazMya2trazMya2s=",
           "IDP_CLIENT_SECRET": "secret"}
    argv = twistd_argv(REPO_ROOT / "conf" / "config.example.yaml")
    with ManagedProcess(argv, log_dir=tmp_path, name="gateway", cwd=REPO_ROOT, env=env,
                        inherit_env=False) as gw:
        gw.wait_ready(lambda: port_open("127.0.0.1", port), 20)
        wait_until(lambda: "proxy service started" in gw.log_text(), 10)
        assert "error" not in {json.loads(line)["level"] for line in gw.log_text().splitlines()}


def test_tls_listener_serves_configured_certificate(tmp_path: Path) -> None:
    """Without insecure_server, the listener speaks TLS with the configured certificate."""
    ca = trustme.CA()
    leaf = ca.issue_cert("app.localhost.test", "127.0.0.1")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
        "insecure_server": False,
        "certificate_file": str(tmp_path / "server.pem"),
        "certificate_key_file": str(tmp_path / "server.pem"),
        "policy": [public_route(up)],
    }) as gw:
        url = gw.url.replace("http://", "https://") + "/ping"
        with urllib.request.urlopen(url, context=context, timeout=10) as response:
            assert response.status == 200
            assert response.read() == b"OK\n"
        plain = urllib.request.Request(gw.url + "/ping")
        with pytest.raises(OSError):
            urllib.request.urlopen(plain, timeout=5)
