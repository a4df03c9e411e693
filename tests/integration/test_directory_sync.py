"""Directory sync end to end: a gateway whose ``idp_service_account`` names a real slapd
decides ``allowed_groups`` from the directory's (nested) groups rather than the IdP's
``groups`` claim, follows changes in the directory at the next sync, and keeps the last
good data when the directory goes away."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvstore import kv_gateway_config
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port
from tests.support.slapd import sample_ldif, slapd

pytestmark = pytest.mark.integration


def wait_for(check: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("storage", ["memory", "kvstore"])
def test_groups_come_from_the_directory(tmp_path: Path, require_binary: Any,
                                        storage: str) -> None:
    require_binary("node", "apt-get install -y nodejs npm")
    require_binary("slapd", "apt-get install -y slapd ldap-utils")
    require_binary("ldapmodify", "apt-get install -y ldap-utils")
    require_binary("redis-server", "apt-get install -y redis-server")
    port = free_port()
    with slapd(tmp_path, sample_ldif()) as ldap, redis_server(tmp_path) as redis, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        account = base64.b64encode(json.dumps({
            "url": ldap.url, "bind_dn": ldap.service_dn, "password": ldap.service_password,
            "user_base_dn": f"ou=people,{ldap.suffix}",
            "group_base_dn": f"ou=groups,{ldap.suffix}"}).encode()).decode()
        config = kv_gateway_config(op, f"kvstore://127.0.0.1:{redis.port}/0", port, up.url)
        config["databroker_storage_type"] = storage
        app = f"http://app.test:{port}"
        config["policy"] = [
            # alice is in "everyone" only through the posix group "ops" (nested)
            {"from": app, "prefix": "/everyone", "to": up.url,
             "allowed_groups": ["everyone"]},
            # the IdP's groups claim says alice is an admin; the directory says not
            {"from": app, "prefix": "/admins", "to": up.url,
             "allowed_groups": [f"cn=admins,ou=groups,{ldap.suffix}"]},
        ]
        config.update(idp_service_account=account, idp_refresh_directory_interval="1s",
                      idp_refresh_directory_timeout="2s")
        run = tmp_path / "gw"
        run.mkdir()
        with gateway_daemon(run, config, port=port) as daemon:
            log = run / "gateway.log"
            wait_for(lambda: "directory sync from ldap" in log.read_text(), "the first sync")
            browser = Browser()
            assert browser.sign_in(f"{app}/everyone", "alice@example.test").status == 200
            assert browser.request("GET", f"{app}/admins").status == 403
            # the directory changes: alice joins admins; the next sync lets her in
            change = (f"dn: cn=admins,ou=groups,{ldap.suffix}\nchangetype: modify\n"
                      f"add: uniqueMember\nuniqueMember: uid=alice,ou=people,{ldap.suffix}\n")
            subprocess.run(["ldapmodify", "-x", "-H", ldap.url, "-D", ldap.root_dn,
                            "-w", ldap.root_password], input=change.encode(), check=True,
                           capture_output=True, timeout=10)
            wait_for(lambda: browser.request("GET", f"{app}/admins").status == 200,
                     "the change to reach the gateway", timeout=10)
            # the directory goes away: the last good data stays, the failure is logged
            ldap.process.stop()
            wait_for(lambda: "keeping the last good data" in log.read_text(),
                     "a failed sync")
            assert browser.request("GET", f"{app}/everyone").status == 200
            assert browser.request("GET", f"{app}/admins").status == 200
            assert daemon.process.running
        if storage == "kvstore":
            with redis.client() as raw:
                users = raw.command("HGETALL", "{gateway}:records:directory.user")
            assert users and all(b"alice" not in bytes(v) for v in users[1::2])


def test_a_user_disabled_in_the_directory_loses_every_session(
        tmp_path: Path, require_binary: Any) -> None:
    """Issue 42: alice is disabled in the directory (out of the user filter, as an
    account lock does); within one sync interval her browser session ends and her open
    tunnel closes, while bob's session stays."""
    import contextlib
    import socket

    from tests.support.peers import tcp_service
    from tests.support.rawhttp import read_until, status_of

    require_binary("node", "apt-get install -y nodejs npm")
    require_binary("slapd", "apt-get install -y slapd ldap-utils")
    require_binary("ldapmodify", "apt-get install -y ldap-utils")
    port = free_port()
    interval = 1.0
    with slapd(tmp_path, sample_ldif()) as ldap, tcp_service(tmp_path) as svc, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        account = base64.b64encode(json.dumps({
            "url": ldap.url, "bind_dn": ldap.service_dn, "password": ldap.service_password,
            "user_base_dn": f"ou=people,{ldap.suffix}",
            "group_base_dn": f"ou=groups,{ldap.suffix}",
            "user_filter": "(&(objectClass=inetOrgPerson)(!(employeeType=disabled)))",
        }).encode()).decode()
        config = kv_gateway_config(op, "", port, up.url,
                                   allowed_domains=["example.test"])
        config.update(databroker_storage_type="memory", idp_service_account=account,
                      idp_refresh_directory_interval=f"{interval:g}s",
                      idp_refresh_directory_timeout="2s")
        config["policy"].append({"from": "tcp+https://db.test:7000",
                                 "to": f"tcp://127.0.0.1:{svc.port}",
                                 "allowed_domains": ["example.test"]})
        app = f"http://app.test:{port}"
        run = tmp_path / "gw"
        run.mkdir()
        with gateway_daemon(run, config, port=port) as daemon:
            log = run / "gateway.log"
            wait_for(lambda: "directory sync from ldap" in log.read_text(), "the first sync")
            alice, bob = Browser(), Browser()
            assert alice.sign_in(f"{app}/", "alice@example.test").status == 200
            assert bob.sign_in(f"{app}/", "bob@example.test").status == 200
            cookie = alice.cookies["app.test"]["_gateway"]
            with socket.create_connection(("127.0.0.1", port), timeout=10) as tunnel:
                tunnel.sendall(("CONNECT db.test:7000 HTTP/1.1\r\nHost: db.test:7000\r\n"
                                f"Cookie: _gateway={cookie}\r\n\r\n").encode())
                assert status_of(read_until(tunnel, b"\r\n\r\n")) == 200
                change = (f"dn: uid=alice,ou=people,{ldap.suffix}\nchangetype: modify\n"
                          "add: employeeType\nemployeeType: disabled\n")
                subprocess.run(["ldapmodify", "-x", "-H", ldap.url, "-D", ldap.root_dn,
                                "-w", ldap.root_password], input=change.encode(),
                               check=True, capture_output=True, timeout=10)
                disabled = time.monotonic()
                tunnel.settimeout(interval + 3)
                with contextlib.suppress(ConnectionResetError):  # (aborted: a reset)
                    assert tunnel.recv(100) == b"", "the tunnel stayed open"
                # one interval for the run to come, and the run's own reading time
                assert time.monotonic() - disabled <= interval + 2
            assert alice.request("GET", f"{app}/").status == 302
            assert bob.request("GET", f"{app}/").status == 200
            assert "no longer in the directory ended" in log.read_text()
            assert daemon.process.running
