"""autocert end to end against pebble: TLS-ALPN-01 answered on the main listener, the
certificate stored, served, and reused after a restart."""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509

from gateway.autocert.storage import CertificateFiles
from tests.support.daemon import gateway_daemon
from tests.support.ocsp_responder import Signer, ocsp_responder
from tests.support.pebble import PEBBLE_HINT, pebble
from tests.support.peers import echo_upstream
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration
DOMAIN = "app.localhost.test"


def fetch(port: int, roots: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(roots))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=DOMAIN) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {DOMAIN}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    return data


def autocert_config(tmp_path: Path, ca: Any, upstream: str, **extra: Any) -> dict[str, Any]:
    """Autocert from ``ca`` (a pebble) for DOMAIN, a public route to ``upstream``."""
    return {
        "insecure_server": False, "autocert": True, **extra,
        "autocert_dir": str(tmp_path / "autocert"), "autocert_ca": ca.directory,
        "autocert_trusted_ca_file": str(ca.wfe_ca),
        "policy": [{"from": f"https://{DOMAIN}", "to": upstream,
                    "allow_public_unauthenticated_access": True}],
    }


def serves_200(port: int, roots: Path) -> bool:
    """Whether the gateway answers 200 over TLS with a certificate ``roots`` trust."""
    try:
        return fetch(port, roots).startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, OSError):
        return False


def test_autocert_with_pebble(tmp_path: Path, require_binary: Any) -> None:
    """A certificate is obtained through TLS-ALPN-01 on the gateway's own listener,
    served to clients, stored privately, and reused by the next start without an order."""
    require_binary("pebble", PEBBLE_HINT)
    require_binary("pebble-challtestsrv", PEBBLE_HINT)
    port = free_port()
    with pebble(tmp_path, port) as ca, echo_upstream(tmp_path) as up:
        roots = tmp_path / "pebble-roots.pem"
        roots.write_bytes(ca.roots())
        config = autocert_config(tmp_path, ca, up.url)
        with gateway_daemon(tmp_path, config, port=port) as gw:
            wait_until(lambda: serves_200(port, roots), 60, interval=0.5,
                       what="certificate from pebble served")
            messages = [e["message"] for e in gw.log_events()]
            assert any(m.startswith(f"autocert: certificate for {DOMAIN} issued") for m in messages)
        stored = tmp_path / "autocert" / "certs" / f"{DOMAIN}.key"
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        again = tmp_path / "again"
        again.mkdir()
        with gateway_daemon(again, config, port=port) as gw:
            assert fetch(port, roots).startswith(b"HTTP/1.1 200")
            messages = [e["message"] for e in gw.log_events()]
            assert not any("requesting a certificate" in m for m in messages)


def test_ocsp_stapling_and_must_staple(tmp_path: Path, require_binary: Any) -> None:
    """With a CA that names an OCSP responder, the response is fetched and stapled to
    handshakes that ask for it, also with autocert_must_staple on (pebble does not copy
    the must-staple extension into certificates; the CSR's is unit-tested)."""
    require_binary("pebble", PEBBLE_HINT)
    require_binary("openssl", "apt-get install -y openssl")
    port = free_port()
    signer = Signer()
    with ocsp_responder(signer) as (ocsp_url, asked), \
            pebble(tmp_path, port, ocsp_url=ocsp_url) as ca, echo_upstream(tmp_path) as up:
        signer.issuer, signer.key = ca.intermediate()
        roots = tmp_path / "pebble-roots.pem"
        roots.write_bytes(ca.roots())
        config = autocert_config(tmp_path, ca, up.url, autocert_must_staple=True)
        with gateway_daemon(tmp_path, config, port=port):
            def stapled() -> bool:
                result = subprocess.run(
                    ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername",
                     DOMAIN, "-status", "-CAfile", str(roots)],
                    input=b"", capture_output=True, timeout=10)
                return b"OCSP Response Status: successful" in result.stdout

            wait_until(stapled, 60, interval=0.5, what="OCSP response stapled")
        leaf = x509.load_pem_x509_certificates(
            (tmp_path / "autocert" / "certs" / f"{DOMAIN}.crt").read_bytes())[0]
        assert asked and asked[0] == leaf.serial_number


def test_renewal_replaces_a_certificate_near_expiry(tmp_path: Path,
                                                    require_binary: Any) -> None:
    """A stored certificate inside its renewal window is served at first, renewed
    through the CA, and replaced for new connections without a restart."""
    require_binary("pebble", PEBBLE_HINT)
    old_ca = trustme.CA()
    soon = old_ca.issue_cert(DOMAIN, not_after=datetime.datetime.now(datetime.UTC)
                             + datetime.timedelta(days=5))
    CertificateFiles(str(tmp_path / "autocert")).save(
        DOMAIN, soon.cert_chain_pems[0].bytes(), soon.private_key_pem.bytes())
    old_roots = tmp_path / "old-ca.pem"
    old_ca.cert_pem.write_to_path(str(old_roots))
    port = free_port()
    with pebble(tmp_path, port) as ca, echo_upstream(tmp_path) as up:
        roots = tmp_path / "pebble-roots.pem"
        roots.write_bytes(ca.roots())
        config = autocert_config(tmp_path, ca, up.url)
        with gateway_daemon(tmp_path, config, port=port) as gw:
            wait_until(lambda: serves_200(port, roots), 60, interval=0.5,
                       what="renewed certificate served")
            messages = [e["message"] for e in gw.log_events()]
            assert any("requesting a certificate" in m for m in messages)
