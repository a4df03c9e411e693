"""The authorization audit stream through the real daemon: HTTP, CONNECT and forward-auth
decisions (allowed, refused by the allow fields, refused by a policy rule, not signed in)
arrive as one event each in the JSON log under ``gateway.audit``, in ``audit_log_file``
(0600, JSON lines) and as OTLP log records at a collector that decodes the protobuf
messages; ``authorize_log_fields`` chooses the fields; the file is reopened after a
rename and SIGHUP with no event lost; the CONNECT 200 names the request id the event
has."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_tracing import request, routes
from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.otlp_receivers import HttpReceiver
from tests.support.peers import TcpService, Upstream, echo_upstream, oidc_provider, tcp_service
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


@dataclass
class Env:
    gw: Daemon
    up: Upstream
    tcp: TcpService
    rx: HttpReceiver
    port: int
    audit_file: Path
    alice: str  # alice's Cookie header for app.test


def wait_for(check: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} not seen in {timeout}s"
        time.sleep(0.1)


def file_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def log_events(gw: Daemon) -> list[dict[str, Any]]:
    return [e for e in gw.log_events() if e.get("namespace") == "gateway.audit"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("audit")
    port = free_port()
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://auth.test:{port}/oauth2/callback"]))
        up = stack.enter_context(echo_upstream(tmp, name="app"))
        tcp = stack.enter_context(tcp_service(tmp))
        rx = stack.enter_context(HttpReceiver())
        audit_file = tmp / "audit.jsonl"
        gw = stack.enter_context(gateway_daemon(tmp, {
            "authenticate_service_url": f"http://auth.test:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email"], "cookie_secure": False,
            "forward_auth_url": f"http://fa.test:{port}",
            "audit_log": True, "audit_log_file": str(audit_file),
            "otel_logs_exporter": "otlp",
            "otel_exporter_otlp_endpoint": rx.url, "otel_service_name": "edge",
            "policy": [
                {"from": f"http://app.test:{port}", "to": up.url, "name": "app",
                 "allow_any_authenticated_user": True},
                {"from": f"http://bob.test:{port}", "to": up.url, "name": "bobs",
                 "allowed_users": ["bob@example.test"]},
                {"from": f"http://pol.test:{port}", "to": up.url, "name": "pol",
                 "policy": [{"allow": {"or": [{"email": {"is": "bob@example.test"}}]}}]},
                {"from": "tcp+https://db.test:5432", "to": f"tcp://127.0.0.1:{tcp.port}",
                 "name": "db", "allow_any_authenticated_user": True},
                {"from": f"http://public.test:{port}", "to": up.url,
                 "allow_public_unauthenticated_access": True}]}, port=port))
        browser = Browser()
        assert browser.sign_in(f"http://app.test:{port}/", "alice@example.test").status == 200
        jar = browser.cookies.get("app.test", {})
        alice = "; ".join(f"{k}={v}" for k, v in jar.items())
        yield Env(gw, up, tcp, rx, port, audit_file, alice)


def by_request(events: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    found = [e for e in events if e.get("request_id") == request_id]
    assert len(found) == 1, (request_id, events[-5:])
    return found[0]


def test_http_decisions_in_log_file_and_otlp(env: Env) -> None:
    port = env.port
    cases = {  # host, cookie -> (status, decision, reasons, rule)
        "allowed": (f"app.test:{port}", env.alice, 200, "allow"),
        "not signed in": (f"app.test:{port}", "", 401, "deny"),
        "allow fields": (f"bob.test:{port}", env.alice, 403, "deny"),
        "policy": (f"pol.test:{port}", env.alice, 403, "deny"),
    }
    ids = {}
    for name, (host, cookie, status, _) in cases.items():
        rid = f"audit-{name.replace(' ', '-')}-{time.monotonic_ns()}"
        headers = {"Accept": "application/json", "X-Request-Id": rid}
        if cookie:
            headers["Cookie"] = cookie
        got, _ = request(env.gw, host, "/some/path?q=1", headers)
        assert got == status, name
        ids[name] = rid
    # public routes decide nothing: no event
    public_id = f"audit-public-{time.monotonic_ns()}"
    assert request(env.gw, f"public.test:{port}", "/", {"X-Request-Id": public_id})[0] == 200
    wait_for(lambda: all(any(e.get("request_id") == rid for e in file_events(env.audit_file))
                         for rid in ids.values()), "audit lines")
    logged = wait_for(lambda: [e for e in log_events(env.gw)
                               if e.get("request_id") in ids.values()]
                      if len([e for e in log_events(env.gw)
                              if e.get("request_id") in ids.values()]) == len(ids) else None,
                      "audit log events")
    records = wait_for(lambda: [r for r in env.rx.logs()
                                if r.attributes.get("audit.request_id") in ids.values()]
                       if len([r for r in env.rx.logs() if r.attributes.get(
                           "audit.request_id") in ids.values()]) == len(ids) else None,
                       "OTLP log records")
    lines = file_events(env.audit_file)
    assert not any(e.get("request_id") == public_id for e in lines + log_events(env.gw))

    allowed = by_request(lines, ids["allowed"])
    assert allowed["decision"] == "allow" and allowed["status"] == 200
    assert allowed["route"] == "app" and allowed["from"] == f"http://app.test:{port}"
    assert allowed["email"] == "alice@example.test" and allowed["user_id"]
    assert allowed["method"] == "GET" and allowed["path"] == "/some/path"
    assert allowed["host"] == f"app.test:{port}" and allowed["client"] == "127.0.0.1"
    assert allowed["via"] == "http" and allowed["credential"] == "cookie"
    assert allowed["reasons"] and "rule" not in allowed
    assert allowed["provider"] == "default"  # the idp_* settings' provider
    assert list(allowed) == [k for k in ("time", "request_id", "trace_id", "route", "from",
                                         "user_id", "email", "provider", "client", "method",
                                         "host",
                                         "path", "via", "credential", "decision", "status",
                                         "reasons", "rule") if k in allowed]
    unsigned = by_request(lines, ids["not signed in"])
    assert (unsigned["decision"], unsigned["status"], unsigned["credential"]) == (
        "deny", 401, "none")
    assert unsigned["reasons"] == ["user-unauthenticated"] and "user_id" not in unsigned
    fields = by_request(lines, ids["allow fields"])
    assert (fields["decision"], fields["status"], fields["route"]) == ("deny", 403, "bobs")
    assert fields["email"] == "alice@example.test"
    policy = by_request(lines, ids["policy"])
    assert policy["reasons"] == ["policy-no-allow-matched"], policy
    assert policy["rule"].startswith("allow"), policy
    # the same events in the log, under their own namespace, and over OTLP
    for event in logged:
        line = by_request(lines, event["request_id"])
        assert {k: v for k, v in line.items() if k != "time"}.items() <= event.items()
        assert event["level"] == "info"
    for record in records:
        line = by_request(lines, record.attributes["audit.request_id"])
        assert record.attributes["audit.decision"] == line["decision"]
        assert record.attributes["audit.status"] == line["status"]
        assert record.scope == "gateway.audit" and record.severity == "INFO"
        assert record.resource["service.name"] == "edge"
    assert list(records[0].attributes.get("audit.reasons", [])) == by_request(
        lines, records[0].attributes["audit.request_id"])["reasons"]
    mode = stat.S_IMODE(os.stat(env.audit_file).st_mode)
    assert mode == 0o600, oct(mode)


def test_connect_and_forward_auth_decisions(env: Env) -> None:
    with socket.create_connection(("127.0.0.1", env.port), timeout=10) as sock:
        sock.sendall(b"CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\nCookie: "
                     + env.alice.encode() + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    tunnel_id = next(line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                     if line.lower().startswith(b"x-request-id:"))
    fa_id = f"audit-fa-{time.monotonic_ns()}"
    reply = Browser().request("GET", f"http://fa.test:{env.port}/check", headers={
        "Cookie": env.alice, "X-Request-Id": fa_id, "X-Forwarded-Proto": "http",
        "X-Forwarded-Host": f"pol.test:{env.port}", "X-Forwarded-Uri": "/admin?x=1",
        "X-Forwarded-Method": "DELETE"})
    assert reply.status == 403
    lines = wait_for(lambda: file_events(env.audit_file) if {tunnel_id, fa_id} <= {
        e.get("request_id") for e in file_events(env.audit_file)} else None, "events")
    tunnel = by_request(lines, tunnel_id)
    assert (tunnel["via"], tunnel["decision"], tunnel["status"]) == ("connect", "allow", 200)
    assert tunnel["route"] == "db" and tunnel["method"] == "CONNECT"
    assert tunnel["email"] == "alice@example.test"
    fa = by_request(lines, fa_id)
    assert (fa["via"], fa["decision"], fa["status"]) == ("forward-auth", "deny", 403)
    assert (fa["method"], fa["host"], fa["path"], fa["route"]) == (
        "DELETE", f"pol.test:{env.port}", "/admin", "pol")
    assert fa["rule"].startswith("allow") and fa["email"] == "alice@example.test"


def test_file_reopened_after_rename_and_sighup(env: Env) -> None:
    """logrotate's way: rename, then SIGHUP. Requests keep coming the whole time; each
    one's event is in exactly one of the two files, the new one created 0600."""
    tag = f"rot-{time.monotonic_ns()}"
    rotated = env.audit_file.with_suffix(".1")
    sent = []
    for i in range(60):
        rid = f"{tag}-{i}"
        headers = {"Accept": "application/json", "X-Request-Id": rid}
        assert request(env.gw, f"app.test:{env.port}", "/r", headers)[0] == 401
        sent.append(rid)
        if i == 20:
            os.rename(env.audit_file, rotated)
        if i == 25:
            assert env.gw.process.pid is not None
            os.kill(env.gw.process.pid, signal.SIGHUP)
    wait_for(lambda: env.audit_file.exists() and any(
        e.get("request_id") == sent[-1] for e in file_events(env.audit_file)), "last event")
    old = [e["request_id"] for e in file_events(rotated) if e["request_id"].startswith(tag)]
    new = [e["request_id"] for e in file_events(env.audit_file)
           if e["request_id"].startswith(tag)]
    assert sorted(old + new) == sorted(sent)
    assert sent[0] in old and sent[-1] in new
    assert stat.S_IMODE(os.stat(env.audit_file).st_mode) == 0o600


def test_authorize_log_fields_choose(tmp_path: Path) -> None:
    """Only the fields named, in the file and the log; the log off with audit_log: false
    while the file still gets every event."""
    port = free_port()
    audit_file = tmp_path / "a.jsonl"
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app"))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            **routes(port, up), "audit_log": True, "audit_log_file": str(audit_file),
            "authorize_log_fields": ["request_id", "decision", "status", "route"]},
            port=port))
        assert request(gw, f"private.test:{port}", "/x", {"Accept": "application/json",
                                                           "X-Request-Id": "chosen-1"})[0] == 401
        lines = wait_for(lambda: file_events(audit_file), "the event")
        logged = wait_for(lambda: log_events(gw), "the log event")
        assert lines == [{"request_id": "chosen-1", "route": "private", "decision": "deny",
                          "status": 401}]
        assert {k for k in logged[0] if k not in ("time", "level", "namespace", "message")} \
            == {"request_id", "route", "decision", "status"}
        gw.write_config({**routes(port, up), "address": f"127.0.0.1:{port}",
                         "insecure_server": True, "audit_log_file": str(audit_file),
                         "audit_log": False})
        wait_for(lambda: any("configuration reloaded" in e.get("message", "")
                             for e in gw.log_events()), "reload")
        assert request(gw, f"private.test:{port}", "/y", {"Accept": "application/json",
                                                           "X-Request-Id": "chosen-2"})[0] == 401
        lines = wait_for(lambda: file_events(audit_file) if len(file_events(audit_file)) == 2
                         else None, "the second event")
        time.sleep(0.5)
        assert len(log_events(gw)) == 1
    assert lines[1]["request_id"] == "chosen-2" and "email" not in lines[1]


def test_programmatic_token_decision(env: Env) -> None:
    """A CLI's programmatic sign-in, then a request with ``Authorization: Gateway``: an
    allow event whose credential is the token (and the login endpoint itself, the
    gateway's own, makes none)."""
    from urllib.parse import parse_qs, urlsplit

    cli = Browser(accept="*/*")
    login_id = f"audit-login-{time.monotonic_ns()}"
    reply = cli.request("GET", f"http://app.test:{env.port}/.gateway/api/v1/login"
                               "?gateway_redirect_uri=http://127.0.0.1:9/cb",
                        headers={"X-Request-Id": login_id})
    assert reply.status == 200
    final = Browser().sign_in(reply.body.decode(), "alice@example.test",
                              stop="http://127.0.0.1:9/")
    token = parse_qs(urlsplit(final.url).query)["gateway_jwt"][0]
    rid = f"audit-token-{time.monotonic_ns()}"
    ok = Browser(accept="application/json").request(
        "GET", f"http://app.test:{env.port}/api", headers={
            "Authorization": f"Gateway {token}", "X-Request-Id": rid})
    assert ok.status == 200
    lines = wait_for(lambda: file_events(env.audit_file) if any(
        e.get("request_id") == rid for e in file_events(env.audit_file)) else None, "event")
    event = by_request(lines, rid)
    assert (event["credential"], event["decision"], event["status"]) == ("token", "allow", 200)
    assert event["email"] == "alice@example.test"
    assert not any(e.get("request_id") == login_id for e in lines)


def test_tunnel_closed_by_its_recheck_is_an_event(env: Env) -> None:
    """Bob opens a tunnel, then signs out: the next periodic check refuses it, closes it,
    and that refusal is an event (via recheck) with the tunnel's request id."""
    browser = Browser()
    assert browser.sign_in(f"http://app.test:{env.port}/", "bob@example.test").status == 200
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.get("app.test", {}).items())
    with socket.create_connection(("127.0.0.1", env.port), timeout=10) as sock:
        sock.sendall(b"CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\nCookie: "
                     + cookie.encode() + b"\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head
        tunnel_id = next(line.split(b":", 1)[1].strip().decode()
                         for line in head.split(b"\r\n")
                         if line.lower().startswith(b"x-request-id:"))
        confirm = browser.request("GET", f"http://app.test:{env.port}/.gateway/signout/")
        token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0].decode()
        assert browser.request("POST", f"http://app.test:{env.port}/.gateway/signout/",
                               f"csrf={token}".encode()).status == 302
        sock.settimeout(10)
        while True:  # the gateway cuts the tunnel within a check or two
            try:
                if not sock.recv(4096):
                    break
            except ConnectionResetError:
                break
    events = wait_for(lambda: [e for e in file_events(env.audit_file)
                               if e.get("request_id") == tunnel_id and e["via"] == "recheck"],
                      "the recheck's event")
    [revoked] = events
    assert revoked["decision"] == "deny" and revoked["route"] == "db"
    assert revoked["method"] == "CONNECT"
    opened = [e for e in file_events(env.audit_file)
              if e.get("request_id") == tunnel_id and e["via"] == "connect"]
    assert len(opened) == 1 and opened[0]["decision"] == "allow"


def test_workers_share_the_file_and_follow_a_rename(tmp_path: Path) -> None:
    """``workers: 2``: both workers append to one file (whole lines), and after
    logrotate's rename (no signal reaches the workers) each opens the new file within
    a second or two; every request's event is in one of the two files, once."""
    port = free_port()
    audit_file = tmp_path / "audit.jsonl"
    rotated = tmp_path / "audit.jsonl.1"
    from tests.integration.test_workers import SECRET, signing_key
    from tests.support.peers import redis_server

    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with ExitStack() as stack:
        up = stack.enter_context(echo_upstream(tmp_path, name="app", quiet=True))
        redis = stack.enter_context(redis_server(redis_dir))
        gw = stack.enter_context(gateway_daemon(tmp_path, {
            **routes(port, up), "workers": 2, "audit_log_file": str(audit_file),
            "shared_secret": SECRET, "cookie_secret": SECRET, "signing_key": signing_key(),
            "databroker_storage_type": "kvstore",
            "databroker_storage_connection_string": f"kvstore://127.0.0.1:{redis.port}/0"},
            port=port, timeout=40))
        sent = []
        for i in range(120):
            rid = f"w-{i}"
            assert request(gw, f"private.test:{port}", "/w", {
                "Accept": "application/json", "X-Request-Id": rid, "Connection": "close"})[0] \
                == 401
            sent.append(rid)
            if i == 40:
                os.rename(audit_file, rotated)
            if i == 60:
                time.sleep(2.5)  # the workers' moved-file check runs every second
        wait_for(lambda: any(e.get("request_id") == sent[-1]
                             for e in file_events(audit_file)), "the last event")
    old = [e["request_id"] for e in file_events(rotated)]
    new = [e["request_id"] for e in file_events(audit_file)]
    assert sorted(old + new) == sorted(sent)
    assert sent[0] in old and set(sent[61:]) <= set(new)
