"""``client_certificate`` criteria through the daemon over TLS: a route that checks
client certificates against its CA (``tls_downstream_client_ca``) lets its policy read
the certificate's SANs, fingerprint and key hash, over HTTP/1.1 and HTTP/2; a route
without a CA never lets its policy read one (a certificate nobody checked proves only
that its sender holds the key, not what its names say); no certificate where the route
requires one is a 495 before any policy. ``gateway policy check --client-cert`` agrees
on every row (exit 1 where the daemon answers 495).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.cli import main
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.peers import echo_upstream
from tests.support.rawhttp import status_of

pytestmark = pytest.mark.integration


def _leaf(cert: trustme.LeafCert) -> x509.Certificate:
    return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes())


def fingerprint(cert: trustme.LeafCert) -> str:
    return hashlib.sha256(_leaf(cert).public_bytes(Encoding.DER)).hexdigest()


def spki_hash(cert: trustme.LeafCert) -> str:
    spki = _leaf(cert).public_key().public_bytes(Encoding.DER,
                                                  PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


class Env:
    gw: Daemon
    ca: trustme.CA
    people: dict[str, trustme.LeafCert | None]
    config: Path
    tmp: Path


def routes(up: str, ca_file: str, people: dict[str, trustme.LeafCert | None]
           ) -> list[dict[str, Any]]:
    alice, mallory = people["alice"], people["mallory"]
    assert alice is not None and mallory is not None
    checked = {"to": up, "tls_downstream_client_ca_file": ca_file}
    return [
        {"from": "https://san.pol.test", **checked, "policy": [
            {"allow": {"or": [{"client_certificate": {"san_dns": {"is": "alice.example"}}}]}}]},
        {"from": "https://email.pol.test", **checked, "policy": [
            {"allow": {"or": [{"client_certificate": {
                "san_email": {"ends_with": "@example.test"}}}]}}]},
        {"from": "https://fp.pol.test", **checked, "policy": [
            {"allow": {"or": [{"client_certificate": {"fingerprint": fingerprint(alice)}}]}}]},
        {"from": "https://spki.pol.test", **checked, "policy": [
            {"allow": {"or": [{"client_certificate": {"spki_hash": spki_hash(mallory)}}]}}]},
        {"from": "https://deny.pol.test", **checked, "policy": [
            {"allow": {"or": [{"accept": True}]}},
            {"deny": {"or": [{"client_certificate": {"san_dns": {"is": "mallory.example"}}}]}}]},
        # no CA on this route (nor on the listener): the policy never reads a certificate
        {"from": "https://unchecked.pol.test", "to": up, "policy": [
            {"allow": {"or": [{"client_certificate": True}]}}]},
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("policy-certs")
    ca = trustme.CA()
    ca.issue_cert("*.pol.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "server.pem"))
    client_ca = trustme.CA()
    client_ca.cert_pem.write_to_path(str(tmp / "client-ca.pem"))
    people: dict[str, trustme.LeafCert | None] = {
        "alice": client_ca.issue_cert("alice.example", "alice@example.test"),
        "mallory": client_ca.issue_cert("mallory.example"),
        "nobody": None,
    }
    for name, cert in people.items():
        if cert is not None:
            cert.private_key_and_cert_chain_pem.write_to_path(str(tmp / f"{name}.pem"))
    with echo_upstream(tmp, name="certapp") as up:
        config = {
            "insecure_server": False,
            "certificate_file": str(tmp / "server.pem"),
            "certificate_key_file": str(tmp / "server.pem"),
            "codec_type": "auto",
            # no route here needs anyone signed in; a policy route still needs the
            # settings, and no request here reaches the provider
            "authenticate_service_url": "https://auth.pol.test",
            "idp_provider": "oidc", "idp_provider_url": "http://127.0.0.1:9",
            "idp_client_id": "gateway", "idp_client_secret": "secret",
            "policy": routes(up.url, str(tmp / "client-ca.pem"), people),
        }
        with gateway_daemon(tmp, config) as gw:
            e = Env()
            e.gw, e.ca, e.people, e.tmp = gw, ca, people, tmp
            e.config = tmp / "check.yaml"
            e.config.write_text(yaml.safe_dump({**config, "address": f"127.0.0.1:{gw.port}"}))
            yield e


@dataclass(frozen=True)
class Case:
    who: str  # whose certificate the client presents ("nobody": none)
    host: str
    # 200 (the upstream answered), 401 (the policy refused someone not signed in: the
    # gateway asks them to sign in, as on any route) or 495 (no certificate at all)
    status: int

    def __str__(self) -> str:
        return f"{self.who}-{self.host}"


CASES = [
    Case("alice", "san.pol.test", 200), Case("mallory", "san.pol.test", 401),
    Case("nobody", "san.pol.test", 495),
    Case("alice", "email.pol.test", 200), Case("mallory", "email.pol.test", 401),
    Case("alice", "fp.pol.test", 200), Case("mallory", "fp.pol.test", 401),
    Case("mallory", "spki.pol.test", 200), Case("alice", "spki.pol.test", 401),
    Case("alice", "deny.pol.test", 200), Case("mallory", "deny.pol.test", 401),
    Case("nobody", "deny.pol.test", 495),
    # presented, but no CA checked it: the policy sees none
    Case("alice", "unchecked.pol.test", 401), Case("nobody", "unchecked.pol.test", 401),
]


def _context(env: Env, who: str, alpn: list[str]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    env.ca.configure_trust(context)
    cert = env.people[who]
    if cert is not None:
        cert.configure_cert(context)
    context.set_alpn_protocols(alpn)
    return context


def http1(env: Env, case: Case) -> int:
    context = _context(env, case.who, ["http/1.1"])
    with socket.create_connection(("127.0.0.1", env.gw.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=case.host) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {case.host}\r\nAccept: application/json\r\n"
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
    reply = b"".join(chunks)
    status = status_of(reply)
    if status == 200:
        assert b'"path"' in reply, reply[:300]  # the echo upstream's answer
    return status


def http2(env: Env, case: Case) -> int:
    context = _context(env, case.who, ["h2"])
    with H2Client(env.gw.port, tls=context, server_name=case.host, tls_as_given=True) as client:
        reply = client.request("GET", "/", case.host, [("accept", "application/json")])
    if reply.status == 200:
        assert b'"path"' in reply.body, reply.body[:300]
    return reply.status


@pytest.mark.parametrize("case", CASES, ids=str)
def test_http1(env: Env, case: Case) -> None:
    assert http1(env, case) == case.status


@pytest.mark.parametrize("case", CASES, ids=str)
def test_http2(env: Env, case: Case) -> None:
    assert http2(env, case) == case.status


@pytest.mark.parametrize("case", CASES, ids=str)
def test_policy_check_agrees(env: Env, case: Case) -> None:
    """Exit 0 where the daemon lets the request through, 1 where it refuses it (401) or
    asks for a certificate (495)."""
    args = ["policy", "check", "--config", str(env.config),
            "--url", f"https://{case.host}/"]
    if env.people[case.who] is not None:
        args += ["--client-cert", str(env.tmp / f"{case.who}.pem")]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    assert code == (0 if case.status == 200 else 1), (case, code)
