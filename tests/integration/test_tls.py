"""The TLS listener: SNI certificate choice, hot reload of certificate files, client
certificates per route (495), 421 for misdirected requests, PROXY protocol (with real
haproxy), and the http-to-https redirector."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import Upstream, echo_upstream
from tests.support.processes import ManagedProcess, free_port, port_open, wait_until
from tests.support.rawhttp import one_shot, status_of

pytestmark = pytest.mark.integration


def served_names(port: int, server_name: str | None) -> list[str]:
    """DNS names in the certificate the gateway presents for ``server_name``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return list(san.value.get_values_for_type(x509.DNSName))


def https_get(port: int, server_name: str, ca: trustme.CA, host: str | None = None,
              client: trustme.LeafCert | None = None, path: str = "/") -> bytes:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if client is not None:
        client.configure_cert(context)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host or server_name}\r\n"
                    "Connection: close\r\n\r\n".encode())
        chunks = []
        while True:
            try:
                data = tls.recv(65536)
            except (ssl.SSLError, ConnectionResetError):
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def public(host: str, up: Upstream, **extra: Any) -> dict[str, Any]:
    return {"from": f"https://{host}", "to": up.url, "allow_public_unauthenticated_access": True,
            **extra}


class Env:
    gw: Daemon
    ca: trustme.CA
    client_ca: trustme.CA
    alice: trustme.LeafCert
    mallory: trustme.LeafCert
    tmp: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    for name, names in (("app", ["app.test"]), ("other", ["other.test"]),
                        ("wild", ["*.wild.test"])):
        ca.issue_cert(*names).private_key_and_cert_chain_pem.write_to_path(
            str(tmp / f"{name}.pem"))
    client_ca = trustme.CA()
    client_ca.cert_pem.write_to_path(str(tmp / "client-ca.pem"))
    alice = client_ca.issue_cert("alice.example")
    mallory = client_ca.issue_cert("mallory.example")
    # A CRL from the client CA revoking mallory.
    ca_key = serialization.load_pem_private_key(client_ca.private_key_pem.bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(client_ca.cert_pem.bytes())
    leaf = x509.load_pem_x509_certificate(mallory.cert_chain_pems[0].bytes())
    now = datetime.datetime.now(datetime.UTC)
    crl = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
           .last_update(now).next_update(now + datetime.timedelta(days=1))
           .add_revoked_certificate(x509.RevokedCertificateBuilder()
                                    .serial_number(leaf.serial_number)
                                    .revocation_date(now).build())
           .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    (tmp / "client.crl").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    with echo_upstream(tmp, name="tlsapp") as up:
        config = {
            "insecure_server": False,
            "certificates": [{"cert": str(tmp / f"{n}.pem"), "key": str(tmp / f"{n}.pem")}
                             for n in ("app", "other", "wild")],
            "client_crl_file": str(tmp / "client.crl"),
            "policy": [
                public("app.test", up),
                public("other.test", up),
                public("a.wild.test", up),
                public("b.wild.test", up),
                public("secure.wild.test", up,
                       tls_downstream_client_ca_file=str(tmp / "client-ca.pem")),
            ],
        }
        with gateway_daemon(tmp, config) as gw:
            e = Env()
            e.gw, e.ca, e.client_ca, e.alice, e.mallory, e.tmp = (gw, ca, client_ca, alice,
                                                                 mallory, tmp)
            yield e


def test_sni_picks_certificate(env: Env) -> None:
    """Exact names, then wildcards, then the first certificate for anything else."""
    assert served_names(env.gw.port, "app.test") == ["app.test"]
    assert served_names(env.gw.port, "other.test") == ["other.test"]
    assert served_names(env.gw.port, "a.wild.test") == ["*.wild.test"]
    assert served_names(env.gw.port, "unknown.test") == ["app.test"]
    assert served_names(env.gw.port, None) == ["app.test"]
    reply = https_get(env.gw.port, "other.test", env.ca)
    assert status_of(reply) == 200


def test_misdirected_request_421(env: Env) -> None:
    """A connection set up for one host, asked for a host another certificate serves
    (or no route serves), answers 421; a host the same wildcard covers is fine."""
    assert status_of(https_get(env.gw.port, "app.test", env.ca, host="other.test")) == 421
    assert status_of(https_get(env.gw.port, "a.wild.test", env.ca, host="b.wild.test")) == 200
    assert status_of(https_get(env.gw.port, "app.test", env.ca, host="nothing.test")) == 421


def test_client_certificate_required_per_route(env: Env) -> None:
    """The route with tls_downstream_client_ca needs a valid, unrevoked certificate."""
    assert status_of(https_get(env.gw.port, "secure.wild.test", env.ca)) == 495
    ok = https_get(env.gw.port, "secure.wild.test", env.ca, client=env.alice)
    assert status_of(ok) == 200
    revoked = https_get(env.gw.port, "secure.wild.test", env.ca, client=env.mallory)
    assert status_of(revoked) == 495
    assert b"invalid client certificate" in revoked
    stranger = trustme.CA().issue_cert("stranger.example")
    assert status_of(https_get(env.gw.port, "secure.wild.test", env.ca, client=stranger)) == 495
    assert status_of(https_get(env.gw.port, "a.wild.test", env.ca)) == 200


def test_certificate_files_hot_reload(tmp_path: Path) -> None:
    """Replacing the certificate files switches new connections to the new certificate
    without a restart; established connections are not dropped."""
    first, second = trustme.CA(), trustme.CA()
    first.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "app.pem"))
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "insecure_server": False, "certificate_file": str(tmp_path / "app.pem"),
            "certificate_key_file": str(tmp_path / "app.pem"),
            "policy": [public("app.test", up)]}) as gw:
        context = ssl.create_default_context()
        first.configure_trust(context)
        held = context.wrap_socket(socket.create_connection(("127.0.0.1", gw.port)),
                                   server_hostname="app.test")
        second.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(
            str(tmp_path / "new.pem"))
        os.replace(tmp_path / "new.pem", tmp_path / "app.pem")

        def reloaded() -> bool:
            try:
                return status_of(https_get(gw.port, "app.test", second)) == 200
            except ssl.SSLError:
                return False

        wait_until(reloaded, 10, what="new certificate served")
        held.sendall(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200")
        held.close()


def test_http_redirect_listener(tmp_path: Path) -> None:
    """http_redirect_addr answers every request with a 301 to https, same host and
    target, with the security headers."""
    ca = trustme.CA()
    ca.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "app.pem"))
    redirect_port = free_port()
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "insecure_server": False, "certificate_file": str(tmp_path / "app.pem"),
            "certificate_key_file": str(tmp_path / "app.pem"),
            "http_redirect_addr": f"127.0.0.1:{redirect_port}",
            "policy": [public("app.test", up)]}):
        reply = one_shot(redirect_port, b"GET /a/b?c=1 HTTP/1.1\r\nHost: app.test:8080\r\n\r\n")
        head = reply.split(b"\r\n\r\n")[0].lower()
        assert status_of(reply) == 301
        assert b"location: https://app.test/a/b?c=1" in head
        assert b"strict-transport-security:" in head
        assert b"connection: close" in head


def test_no_redirect_listener_by_default(tmp_path: Path) -> None:
    """Without http_redirect_addr nothing else listens."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [public("app.test", up)]}) as gw:
        listening = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
        ours = [line for line in listening.splitlines()
                if f"pid={gw.process.pid}," in line]
        assert len(ours) == 1, ours


def proxy_header_v1(source: str, port: int, dest_port: int) -> bytes:
    return f"PROXY TCP4 {source} 127.0.0.1 {port} {dest_port}\r\n".encode()


def test_proxy_protocol_header(tmp_path: Path) -> None:
    """With use_proxy_protocol the header's source is the client (X-Forwarded-For, logs);
    a connection without a header is closed; a silent one is dropped at the setup
    deadline, min(timeout_read, 10 s): 3 s here."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "use_proxy_protocol": True, "timeout_read": "3s",
            "policy": [public("app.test", up)]}) as gw:
        reply = one_shot(gw.port, proxy_header_v1("203.0.113.9", 5555, gw.port)
                         + b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        assert status_of(reply) == 200
        body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        headers = {k.lower(): v for k, v in body["headers"]}
        assert headers["x-forwarded-for"] == "203.0.113.9"
        assert one_shot(gw.port, b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n") == b""
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as silent, \
                contextlib.suppress(ConnectionResetError):
            assert silent.recv(1) == b""
        assert 2.7 < time.monotonic() - started < 5


@pytest.mark.parametrize("send_proxy", ["send-proxy", "send-proxy-v2"])
def test_proxy_protocol_behind_haproxy(tmp_path: Path, send_proxy: str,
                                       require_binary: Any) -> None:
    """Real haproxy in front (v1 and v2): the gateway sees the client haproxy saw."""
    haproxy = require_binary("haproxy", "apt-get install -y haproxy")
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "use_proxy_protocol": True, "policy": [public("app.test", up)]}) as gw:
        front = free_port()
        (tmp_path / "haproxy.cfg").write_text(f"""
global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend fe
  bind 127.0.0.1:{front}
  default_backend be
backend be
  server gw 127.0.0.1:{gw.port} {send_proxy}
""")
        with ManagedProcess([haproxy, "-f", str(tmp_path / "haproxy.cfg"), "-db"],
                            log_dir=tmp_path, name=f"haproxy-{send_proxy}") as proc:
            proc.wait_ready(lambda: port_open("127.0.0.1", front), 10)
            with socket.socket() as client:
                client.bind(("127.0.0.5", 0))
                client.settimeout(10)
                client.connect(("127.0.0.1", front))
                client.sendall(b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := client.recv(65536):
                    data += chunk
        assert status_of(data) == 200
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        headers = {k.lower(): v for k, v in body["headers"]}
        assert headers["x-forwarded-for"] == "127.0.0.5"


