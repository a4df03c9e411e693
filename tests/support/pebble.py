"""Debian's pebble (a test ACME CA) and pebble-challtestsrv (fake DNS answering every
name with 127.0.0.1), on loopback, for autocert tests. ``peers.md`` section 4."""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .processes import ManagedProcess, free_port, port_open

PEBBLE_HINT = "apt-get install -y pebble"


@dataclass(frozen=True)
class Pebble:
    directory: str
    wfe_ca: Path
    management: str
    process: ManagedProcess

    def _get(self, path: str) -> bytes:
        context = ssl.create_default_context(cafile=str(self.wfe_ca))
        with urllib.request.urlopen(self.management + path, context=context,
                                    timeout=10) as reply:
            data: bytes = reply.read()
        return data

    def intermediate(self) -> tuple[x509.Certificate, Any]:
        """This run's issuing CA certificate and key (to sign test OCSP responses)."""
        cert = x509.load_pem_x509_certificate(self._get("/intermediates/0"))
        key = serialization.load_pem_private_key(self._get("/intermediate-keys/0"), None)
        return cert, key

    def roots(self) -> bytes:
        """The root and intermediate CA certificates of this run (PEM)."""
        return self._get("/roots/0") + self._get("/intermediates/0")


@contextlib.contextmanager
def pebble(tmpdir: Path, tls_alpn_port: int, timeout: float = 20.0,
           ocsp_url: str = "") -> Iterator[Pebble]:
    """pebble validating TLS-ALPN-01 on 127.0.0.1:``tls_alpn_port`` for every name."""
    root = tmpdir / "pebble"
    root.mkdir(exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(root / "wfe-cert.pem"))
    cert.private_key_pem.write_to_path(str(root / "wfe-key.pem"))
    ca.cert_pem.write_to_path(str(root / "wfe-ca.pem"))
    wfe, management, dns, dns_management = (free_port() for _ in range(4))
    (root / "config.json").write_text(json.dumps({"pebble": {
        "listenAddress": f"127.0.0.1:{wfe}",
        "managementListenAddress": f"127.0.0.1:{management}",
        "certificate": str(root / "wfe-cert.pem"),
        "privateKey": str(root / "wfe-key.pem"),
        "httpPort": free_port(),
        "tlsPort": tls_alpn_port,
        "ocspResponderURL": ocsp_url,
        "externalAccountBindingRequired": False,
    }}))
    with ManagedProcess(["pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
                         "-dns01", f"127.0.0.1:{dns}", "-http01", "", "-https01", "",
                         "-tlsalpn01", "", "-management", f"127.0.0.1:{dns_management}"],
                        log_dir=tmpdir, name="challtestsrv") as dns_proc:
        dns_proc.wait_ready(lambda: port_open("127.0.0.1", dns_management), timeout)
        env = {"PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0",
               "PEBBLE_AUTHZREUSE": "0"}
        with ManagedProcess(["pebble", "-config", str(root / "config.json"), "-dnsserver",
                             f"127.0.0.1:{dns}"], log_dir=tmpdir, name="pebble",
                            env=env) as proc:
            proc.wait_ready(lambda: port_open("127.0.0.1", wfe), timeout)
            yield Pebble(f"https://127.0.0.1:{wfe}/dir", root / "wfe-ca.pem",
                         f"https://127.0.0.1:{management}", proc)
