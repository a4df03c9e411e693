"""The README's claims a newcomer acts on first: its configuration that protects one app
passes ``gateway check`` once the files it names exist (as the Debian package lays them
out), and every relative link it has leads to a file of the repository."""

from __future__ import annotations

import base64
import datetime
import io
import os
import re
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.cli.check import run_check
from tests.docs.pages import DOCS

README = DOCS.parent / "README.md"


def readme_config() -> str:
    """The README's one YAML block (the configuration of "Protect one app")."""
    section = README.read_text(encoding="utf-8").split("\n## Protect one app\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("\n```", 1)[0] + "\n"


def pem_key() -> tuple[ec.EllipticCurvePrivateKey, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())


def certificate(key: ec.EllipticCurvePrivateKey, names: list[str]) -> bytes:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_the_readme_configuration_passes_check(tmp_path: Path) -> None:
    """Written as /etc/gateway/config.yaml with the secrets and the certificate beside it
    (relative paths resolve against the file's directory), it is valid, with no warning,
    and serves the one route it says over HTTPS."""
    text = readme_config()
    (tmp_path / "tls").mkdir()
    (tmp_path / "secrets").mkdir()
    key, key_pem = pem_key()
    (tmp_path / "tls" / "privkey.pem").write_bytes(key_pem)
    (tmp_path / "tls" / "fullchain.pem").write_bytes(
        certificate(key, ["wiki.example.com", "authenticate.example.com"]))
    (tmp_path / "secrets" / "signing-key.pem").write_bytes(pem_key()[1])
    for name in ("shared_secret", "cookie_secret"):  # as `head -c32 /dev/urandom | base64`
        (tmp_path / "secrets" / name).write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    (tmp_path / "secrets" / "idp_client_secret").write_text("client-secret\n")
    config = tmp_path / "config.yaml"
    config.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    assert run_check(str(config), out, err) == 0, err.getvalue()
    assert "routes=1 (hosts=1, public=0, tcp=0) warnings=0" in out.getvalue(), out.getvalue()
    assert "listeners=https://:443" in out.getvalue(), out.getvalue()
    assert len(text.splitlines()) <= 22  # "a ~20-line configuration" (issue 41)


def test_readme_relative_links_lead_to_files() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into the docs"
    missing = [t for t in local if not (README.parent / t).exists()]
    assert missing == []
