"""The metrics endpoint (``metrics_address``): Basic authentication, TLS with client
certificates, and the values a scrape carries — build info, configuration reload status,
the kvstore pool and storage operations, directory sync failures — in a format promtool
accepts."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.daemon import gateway_daemon
from tests.support.kvstore import SECRET
from tests.support.peers import echo_upstream, redis_server
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


def scrape(url: str, auth: str | None = None,
           context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def value(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in the scrape")


def wait_for(check: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_scrape_with_basic_auth(tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("promtool", "apt-get install -y prometheus")
    metrics_port = free_port()
    account = base64.b64encode(json.dumps({
        "url": f"ldap://127.0.0.1:{free_port()}", "bind_dn": "cn=gw,dc=t",
        "password": "pw", "base_dn": "dc=t"}).encode()).decode()
    with redis_server(tmp_path) as redis, echo_upstream(tmp_path) as up:
        config = {
            "metrics_address": f"127.0.0.1:{metrics_port}",
            "metrics_basic_auth": base64.b64encode(b"prom:s3cret").decode(),
            "databroker_storage_type": "kvstore",
            "databroker_storage_connection_string": f"kvstore://127.0.0.1:{redis.port}/0",
            "shared_secret": SECRET, "cookie_secret": SECRET,
            "idp_service_account": account, "idp_refresh_directory_interval": "1s",
            "policy": [{"from": "http://app.test", "to": up.url,
                        "allow_public_unauthenticated_access": True}],
        }
        with gateway_daemon(tmp_path, config) as daemon:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            status, headers, _ = scrape(url)
            assert status == 401
            assert headers.get("WWW-Authenticate") == 'Basic realm="metrics"'
            assert scrape(url, "prom:wrong")[0] == 401
            assert scrape(url, "someone:s3cret")[0] == 401

            def scraped() -> str:
                status, headers, text = scrape(url, "prom:s3cret")
                assert status == 200
                assert headers["Content-Type"].startswith("text/plain; version=")
                return text
            wait_for(lambda: 'directory_sync_failures_total{provider="ldap"}' in scraped(),
                     "a failed directory sync to be counted")
            text = scraped()
            assert 'gateway_build_info{' in text and 'service="gateway"' in text
            assert value(text, 'gateway_config_last_reload_success{service="gateway"}') == 1
            assert value(text, 'gateway_config_last_reload_success_timestamp'
                               '{service="gateway"}') > 1e9
            assert value(text, 'kvstore_conns{service="gateway"}') == 4
            assert value(text, 'storage_operation_duration_ms_count{backend="kvstore",'
                               'operation="sync",result="ok",service="gateway"}') >= 1
            assert value(text, 'directory_sync_failures_total{provider="ldap"}') >= 1
            check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                                   capture_output=True, timeout=30)
            # it parses; the only lint is about the `_ms` names the reference fixes
            assert check.returncode in (0, 3), check.stderr
            lint = [line for line in check.stderr.decode().splitlines()
                    if "should not contain abbreviated units" not in line]
            assert lint == [], lint
            assert "_created" not in text
            # an invalid edit is refused: the status says so, the old config keeps running
            checksum = value(text, 'gateway_config_checksum_int64{service="gateway"}')
            daemon.config_path.write_text("policy: [{from: nope}]\n")
            wait_for(lambda: value(scraped(), 'gateway_config_last_reload_success'
                                              '{service="gateway"}') == 0, "a failed reload")
            assert value(scraped(), 'gateway_config_checksum_int64{service="gateway"}') \
                == checksum


def test_scrape_over_mutual_tls(tmp_path: Path) -> None:
    server_ca, client_ca = trustme.CA(), trustme.CA()
    server = server_ca.issue_cert("127.0.0.1")
    metrics_port = free_port()
    with echo_upstream(tmp_path) as up:
        config = {
            "metrics_address": f"127.0.0.1:{metrics_port}",
            "metrics_certificate": base64.b64encode(
                b"".join(b.bytes() for b in server.cert_chain_pems)).decode(),
            "metrics_certificate_key": base64.b64encode(
                server.private_key_pem.bytes()).decode(),
            "metrics_client_ca": base64.b64encode(client_ca.cert_pem.bytes()).decode(),
            "policy": [{"from": "http://app.test", "to": up.url,
                        "allow_public_unauthenticated_access": True}],
        }
        with gateway_daemon(tmp_path, config):
            url = f"https://127.0.0.1:{metrics_port}/metrics"
            trusting = ssl.create_default_context()
            server_ca.configure_trust(trusting)
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                scrape(url, context=trusting)  # no client certificate
            stranger = trustme.CA().issue_cert("prometheus")
            stranger.configure_cert(trusting)
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                scrape(url, context=trusting)
            signed = ssl.create_default_context()
            server_ca.configure_trust(signed)
            client_ca.issue_cert("prometheus").configure_cert(signed)
            status, _, text = scrape(url, context=signed)
            assert status == 200
            assert "gateway_build_info" in text
