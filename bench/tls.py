"""The TLS section of ``bench/run.py`` (issue 13): nginx and the gateway terminating TLS
with the same certificate (ECDSA P-256, made here), one process each, in front of the
same upstream.

Rows: HTTP/1.1 keep-alive over TLS 1.3 (wrk), a new connection per request (wrk with
``Connection: close``: handshakes per second), HTTP/2 over TLS with ALPN (h2load -m1 and
-m10; the gateway on ``codec_type: auto``, as deployed). Each row is reported as the
gateway's ratio to nginx from the same run.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# targets (issue 13), gateway / nginx on the same row
TARGET_TLS_KEEPALIVE = 0.35
TARGET_TLS_H2 = 0.30


def make_certificate(tmp: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "bench-cert.pem", tmp / "bench-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def nginx_tls_server(port: int, cert: Path, key: Path, location: str) -> str:
    """An nginx ``server`` block: TLS 1.3 and 1.2, HTTP/2 by ALPN (nginx 1.22 syntax)."""
    return (
        "  server {\n"
        f"    listen 127.0.0.1:{port} ssl http2 backlog=4096;\n"
        f"    ssl_certificate {cert};\n"
        f"    ssl_certificate_key {key};\n"
        "    ssl_protocols TLSv1.2 TLSv1.3;\n"
        "    ssl_session_cache off;\n"
        "    ssl_session_tickets off;\n"
        f"{location}"
        "  }\n"
    )


def gateway_tls_yaml(port: int, upstream: int, cert: Path, key: Path) -> str:
    return "\n".join([
        "# written by bench/run.py (TLS section)",
        f"address: 127.0.0.1:{port}",
        f"certificate_file: {cert}",
        f"certificate_key_file: {key}",
        "log_level: warn",
        "proxy_log_level: error",
        "policy:",
        f"  - from: https://127.0.0.1:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        "    allow_public_unauthenticated_access: true",
    ]) + "\n"


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """gateway / nginx req/s per row that has both."""
    out: dict[str, float] = {}
    for row, r in rows.items():
        gw = r.get("gateway", {}).get("median", {}).get("rps")
        ng = r.get("nginx", {}).get("median", {}).get("rps")
        if gw and ng:
            out[row] = gw / ng
    return out


ROWS = {  # row: (tool, extra wrk headers / h2load streams, target ratio or None)
    "TLS keep-alive": ("wrk", (), TARGET_TLS_KEEPALIVE),
    "TLS new connection per request": ("wrk", ("Connection: close",), None),
    "HTTP/2 over TLS -m1": ("h2load", 1, TARGET_TLS_H2),
    "HTTP/2 over TLS -m10": ("h2load", 10, None),
}
