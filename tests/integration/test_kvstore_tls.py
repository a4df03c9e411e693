"""``kvstores://`` against a real redis-server that requires TLS and client certificates:
the CA file and client certificate settings are what let a session through; a wrong CA or
a missing client certificate is a 503, never a false "allowed"; skip-verify skips only
the server check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvstore import kv_gateway_config as config
from tests.support.kvstore import sentinel
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration


def test_sessions_over_tls_with_client_certificates(tmp_path: Path,
                                                    require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    server_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server_ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem \
        .write_to_path(str(tmp_path / "redis.pem"))
    server_ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    stranger_ca.cert_pem.write_to_path(str(tmp_path / "stranger-ca.pem"))
    client_ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    gateway_cert = client_ca.issue_cert("gateway.test")
    gateway_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    gateway_cert.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    tls_port, port = free_port(), free_port()
    redis_tls = ["--tls-port", str(tls_port), "--tls-cert-file", str(tmp_path / "redis.pem"),
                 "--tls-key-file", str(tmp_path / "redis.pem"),
                 "--tls-ca-cert-file", str(tmp_path / "client-ca.pem"),
                 "--tls-auth-clients", "yes"]
    with redis_server(tmp_path, extra_args=redis_tls) as redis, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstores://127.0.0.1:{tls_port}/0"

        def gateway(name: str, **tls: Any) -> Any:
            run_dir = tmp_path / name
            run_dir.mkdir()
            return gateway_daemon(run_dir, {**config(op, url, port, up.url), **tls}, port=port)

        good = {"databroker_storage_ca_file": str(tmp_path / "ca.pem"),
                "databroker_storage_cert_file": str(tmp_path / "client.pem"),
                "databroker_storage_key_file": str(tmp_path / "client.key")}
        browser = Browser()
        with gateway("good", **good):
            assert browser.sign_in(f"http://app.test:{port}/", "alice@example.test"
                                   ).status == 200

            def stored() -> bool:
                with redis.client() as raw:  # the plain port, to look
                    return bool(raw.command("HLEN", "{gateway}:records:session") == 1)

            wait_until(stored, 10, what="session written over TLS")
        cookie = browser.cookies["app.test"]["_gateway"]

        def first_visit(name: str, **tls: Any) -> int:
            fresh = Browser()
            fresh.cookies["app.test"] = {"_gateway": cookie}
            with gateway(name, **tls):
                return fresh.request("GET", f"http://app.test:{port}/").status

        # a fresh process reads the session over TLS
        assert first_visit("again", **good) == 200
        # a server certificate from a CA we do not trust: the session cannot be read
        assert first_visit("stranger", **{
            **good, "databroker_storage_ca_file": str(tmp_path / "stranger-ca.pem")}) == 503
        # no client certificate: Redis refuses the handshake
        assert first_visit("anonymous",
                           databroker_storage_ca_file=str(tmp_path / "ca.pem")) == 503
        # skip-verify accepts the untrusted server but still presents the client certificate
        assert first_visit("skip", **{
            **good, "databroker_storage_ca_file": str(tmp_path / "stranger-ca.pem"),
            "databroker_storage_tls_skip_verify": True}) == 200


def test_sessions_via_sentinel_over_tls(tmp_path: Path, require_binary: Any) -> None:
    """kvstores+sentinel://: TLS to the sentinel and to the master it names (txredisapi
    alone would reach the master in plain TCP)."""
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "redis.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    tls = {"tls-cert-file": str(tmp_path / "redis.pem"),
           "tls-key-file": str(tmp_path / "redis.pem"),
           "tls-ca-cert-file": str(tmp_path / "ca.pem"), "tls-auth-clients": "no"}
    master_tls, port = free_port(), free_port()
    master_args = ["--tls-port", str(master_tls),
                   *(arg for key, value in tls.items() for arg in (f"--{key}", value))]
    sentinel_tls = "".join(f"{key} {value}\n" for key, value in tls.items()) + \
        "tls-replication yes\n"
    with redis_server(tmp_path, extra_args=master_args) as master, \
            sentinel(tmp_path, master_tls, sentinel_tls, tls=True) as sentinel_port, \
            oidc_provider(tmp_path, [f"http://auth.test:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstores+sentinel://127.0.0.1:{sentinel_port}/mymaster/0"
        settings = {**config(op, url, port, up.url),
                    "databroker_storage_ca_file": str(tmp_path / "ca.pem")}
        with gateway_daemon(tmp_path, settings, port=port):
            assert Browser().sign_in(f"http://app.test:{port}/", "alice@example.test"
                                     ).status == 200

            def stored() -> bool:
                with master.client() as raw:
                    return bool(raw.command("HLEN", "{gateway}:records:session") == 1)

            wait_until(stored, 10, what="session written to the master over TLS")
