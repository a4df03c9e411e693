"""Sessions in a real redis-server: shared by two gateway processes (sign-out in one
ends it in the other), kept across a restart, encrypted at rest, and a prompt 503 (never
a false "allowed") when Redis is down."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvstore import kv_gateway_config as config
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
def test_sessions_shared_restarted_encrypted(tmp_path: Path, require_binary: Any) -> None:
    """Two processes share sessions and sign-outs; a restart keeps them; Redis holds
    only ciphertext; with Redis gone a process that must read a session answers 503."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    pa, pb = free_port(), free_port()
    a_dir, b_dir, c_dir = (tmp_path / n for n in ("a", "b", "c"))
    for d in (a_dir, b_dir, c_dir):
        d.mkdir()
    with redis_server(tmp_path) as redis, \
            oidc_provider(tmp_path, [f"http://auth.test:{pa}/oauth2/callback",
                                     f"http://auth.test:{pb}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://127.0.0.1:{redis.port}/0"
        browser = Browser()
        with gateway_daemon(a_dir, config(op, url, pa, up.url), port=pa), \
                gateway_daemon(b_dir, config(op, url, pb, up.url), port=pb):
            assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test").status \
                == 200
            cookie = browser.cookies["app.test"]["_gateway"]
            # the same cookie (same cookie_secret) is a session in the other process
            assert browser.request("GET", f"http://app.test:{pb}/").status == 200
            with redis.client() as raw:
                stored = raw.command("HGETALL", "{gateway}:records:session")
            assert stored, "no session in Redis"
            assert all(b"alice@example.test" not in bytes(v) for v in stored)
        # a restart keeps the session
        with gateway_daemon(c_dir, config(op, url, pa, up.url), port=pa):
            assert browser.request("GET", f"http://app.test:{pa}/x").status == 200
            with gateway_daemon(b_dir, config(op, url, pb, up.url), port=pb):
                assert browser.request("GET", f"http://app.test:{pb}/y").status == 200
                browser.sign_out(f"http://app.test:{pa}")
                # the other process learns of it from the change stream (polled every
                # 0.5 s), not when some cache time runs out
                ended = time.monotonic()
                while browser.request("GET", f"http://app.test:{pb}/z").status == 200:
                    assert time.monotonic() - ended < 1.5, "sign-out not seen in 1.5 s"
                    time.sleep(0.05)
                assert browser.request("GET", f"http://app.test:{pb}/z").status == 302
    # Redis is gone now: a fresh process that must read a session answers 503 at once
    with redis_server(tmp_path) as other_redis:
        url = f"kvstore://127.0.0.1:{other_redis.port}/0"
    pc = free_port()
    d_dir = tmp_path / "d"
    d_dir.mkdir()
    with oidc_provider(d_dir, [f"http://auth.test:{pc}/oauth2/callback"]) as op2, \
            echo_upstream(d_dir) as up2, \
            gateway_daemon(d_dir, config(op2, url, pc, up2.url), port=pc):
        fresh = Browser()
        fresh.cookies["app.test"] = {"_gateway": cookie}
        started = time.monotonic()
        reply = fresh.request("GET", f"http://app.test:{pc}/")
        assert reply.status == 503
        assert time.monotonic() - started < 8



def test_acl_user_and_password(tmp_path: Path, require_binary: Any) -> None:
    """``kvstore://user:pass@host:port/db``: the gateway signs in as an ACL user that may
    touch only its own keys, in the database the URL names; a wrong password is a 503."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    port = free_port()
    acl = ["--user", "gw", "on", ">s3cret/pw", "~{gateway}:*", "+@all", "-@dangerous",
           "--user", "default", "on", ">admin", "~*", "+@all"]
    with redis_server(tmp_path, password="admin", extra_args=acl) as redis, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://gw:s3cret%2Fpw@127.0.0.1:{redis.port}/3"
        run = tmp_path / "ok"
        run.mkdir()
        browser = Browser()
        with gateway_daemon(run, config(op, url, port, up.url), port=port):
            assert browser.sign_in(f"http://app.test:{port}/", "alice@example.test"
                                   ).status == 200
            with redis.client() as raw:
                raw.command("SELECT", "3")
                assert raw.command("HLEN", "{gateway}:records:session") == 1
        wrong = tmp_path / "wrong"
        wrong.mkdir()
        bad_url = f"kvstore://gw:nope@127.0.0.1:{redis.port}/3"
        with gateway_daemon(wrong, config(op, bad_url, port, up.url), port=port):
            assert browser.request("GET", f"http://app.test:{port}/").status == 503
        logged = (wrong / "gateway.log").read_text()
        assert "WRONGPASS" in logged
        assert "session storage unavailable: kvstore unavailable (" in logged


def test_sign_in_while_redis_is_down_is_503_without_a_cookie(
        tmp_path: Path, require_binary: Any) -> None:
    """A sign-in whose session cannot be stored answers 503 and sets no session cookie:
    a cookie for a session no process can find would be answered with a sign-in
    redirect everywhere (the soak saw 302s for sessions made during a Redis outage)."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    with redis_server(tmp_path) as gone:
        url = f"kvstore://127.0.0.1:{gone.port}/0"
    port = free_port()
    with oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up, \
            gateway_daemon(tmp_path, config(op, url, port, up.url), port=port):
        browser = Browser()
        reply = browser.sign_in(f"http://app.test:{port}/", "alice@example.test")
        assert reply.status == 503, (reply.status, reply.body[:200])
        assert b"could not be saved" in reply.body
        assert "_gateway" not in browser.cookies.get("app.test", {})
        assert "_gateway" not in browser.cookies.get("auth.test", {})
