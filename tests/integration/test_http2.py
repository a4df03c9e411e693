"""HTTP/2 toward clients: h2c prior knowledge, ALPN over TLS, flow control, codec_type."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.support.daemon import gateway_daemon
from tests.support.peers import Upstream, echo_upstream

pytestmark = pytest.mark.integration
CURL = shutil.which("curl") or "curl"


def route(up: Upstream) -> dict[str, Any]:
    return {"from": "https://app.test", "to": up.url, "timeout": "60s",
            "allow_public_unauthenticated_access": True}


def curl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([CURL, "-sS", "--max-time", str(int(timeout)), *args],
                          capture_output=True, timeout=timeout + 10)


def test_h2c_prior_knowledge_and_http1_on_one_port(tmp_path: Path) -> None:
    """codec_type auto: HTTP/2 by prior knowledge and HTTP/1.1 side by side."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "auto"}) as gw:
        h2 = curl("--http2-prior-knowledge", "-H", "Host: app.test", "-o", "/dev/null", "-w",
                  "%{http_version} %{http_code}", f"{gw.url}/x")
        assert h2.stdout == b"2 200", h2.stderr
        h1 = curl("--http1.1", "-H", "Host: app.test", "-w", "\n%{http_version}",
                  f"{gw.url}/x?q=1")
        body, version = h1.stdout.rsplit(b"\n", 1)
        assert version == b"1.1"
        assert json.loads(body)["path"] == "/x?q=1"


def test_h2_request_reaches_upstream_as_http1(tmp_path: Path) -> None:
    """Pseudo-headers become the request line and Host; cookies are joined again."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "http2"}) as gw:
        result = curl("--http2-prior-knowledge", "-H", "Host: app.test", "-H", "Cookie: a=1",
                      "-H", "Cookie: b=2", "--data-binary", "hello", f"{gw.url}/p/../q?x=1")
        echoed = json.loads(result.stdout)
        headers = {k.lower(): v for k, v in echoed["headers"]}
        assert echoed["path"] == "/q?x=1"
        assert echoed["method"] == "POST"
        assert echoed["body_length"] == 5
        assert headers["cookie"] in ("a=1; b=2", "a=1;b=2")
        assert headers["x-forwarded-host"] == "app.test"


def test_http1_codec_refuses_h2c(tmp_path: Path) -> None:
    """codec_type http1 does not speak HTTP/2: the preface is refused."""
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "http1"}) as gw:
        result = curl("--http2-prior-knowledge", "-H", "Host: app.test", f"{gw.url}/")
        assert result.returncode != 0 or b"HTTP/2" not in result.stdout


def test_h2_flow_control_large_download_and_upload(tmp_path: Path) -> None:
    """64 MiB each way over one HTTP/2 stream arrive intact."""
    size = 64 << 20
    upload = tmp_path / "upload.bin"
    upload.write_bytes(bytes(range(256)) * (size // 256))
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "http2"}) as gw:
        down = curl("--http2-prior-knowledge", "-H", "Host: app.test", f"{gw.url}/bytes/{size}")
        assert len(down.stdout) == size
        assert hashlib.sha256(down.stdout).digest() == hashlib.sha256(
            upload.read_bytes()).digest()
        up_result = curl("--http2-prior-knowledge", "-H", "Host: app.test",
                         "--data-binary", f"@{upload}", f"{gw.url}/upload")
        echoed = json.loads(up_result.stdout)
        assert echoed["body_length"] == size
        assert echoed["body_sha256"] == hashlib.sha256(upload.read_bytes()).hexdigest()


def test_h2_concurrent_streams(tmp_path: Path, require_binary: Any) -> None:
    """Many concurrent streams on few connections all succeed (h2load)."""
    h2load = require_binary("h2load", "apt-get install -y nghttp2-client")
    with echo_upstream(tmp_path, quiet=True) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "http2"}) as gw:
        result = subprocess.run([h2load, "-n", "300", "-c", "3", "-m", "20", "-H",
                                 ":authority: app.test", f"{gw.url}/"],
                                capture_output=True, timeout=60, text=True)
        assert "300 succeeded" in result.stdout, result.stdout
        assert "status codes: 300 2xx" in result.stdout


def test_alpn_negotiates_h2_over_tls(tmp_path: Path) -> None:
    """With TLS and codec auto, ALPN picks h2 for HTTP/2 clients and http/1.1 for others."""
    ca = trustme.CA()
    cert = ca.issue_cert("app.test")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [route(up)], "codec_type": "auto", "insecure_server": False,
            "certificate_file": str(tmp_path / "server.pem"),
            "certificate_key_file": str(tmp_path / "server.pem")}) as gw:
        base = ["--cacert", str(tmp_path / "ca.pem"), "--resolve",
                f"app.test:{gw.port}:127.0.0.1", "-H", "Host: app.test", "-o", "/dev/null", "-w",
                "%{http_version} %{http_code}", f"https://app.test:{gw.port}/"]
        assert curl("--http2", *base).stdout == b"2 200"
        assert curl("--http1.1", *base).stdout == b"1.1 200"


def test_chromium_over_h2(tmp_path: Path) -> None:
    """A real browser (Debian's headless Chromium) over HTTPS with codec auto: ALPN picks
    h2, and 40 downloads (up to 4 MiB, flow control both ways) and 6 uploads at once on
    its connection all arrive whole, each request over h2."""
    import json
    import subprocess

    from tests.conftest import _require_binary
    from tests.support.daemon import REPO_ROOT
    from tests.support.peers import NODE_INSTALL_HINT
    from tests.support.processes import free_port
    chromium = _require_binary("chromium", "apt-get install -y chromium")
    node = _require_binary("node", NODE_INSTALL_HINT)
    browser_dir = REPO_ROOT / "tests" / "peers" / "browser"
    ca = trustme.CA()
    ca.issue_cert("app.test").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem"))
    sizes = [1 + 9973 * i for i in range(36)] + [1 << 20, 3 << 20, 4 << 20, 65535]
    uploads = [1, 65535, 65536, 300_000, 1 << 20, 2 << 20]
    port = free_port()
    with echo_upstream(tmp_path) as up, gateway_daemon(tmp_path, {
            "policy": [{**route(up), "from": f"https://app.test:{port}"}],
            "codec_type": "auto", "insecure_server": False,
            "certificate_file": str(tmp_path / "server.pem"),
            "certificate_key_file": str(tmp_path / "server.pem")}, port=port) as gw:
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"url": f"https://app.test:{gw.port}/page", "host": "app.test",
                                    "sizes": sizes, "uploads": uploads}))
        result = subprocess.run([node, "h2fetch.js", str(spec)], cwd=browser_dir,
                                capture_output=True, text=True, timeout=120,
                                env={"CHROMIUM": chromium, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["status"] == 200 and out["page"] == ["h2"]
    assert out["downloads"] == [[200, n, True] for n in sizes]
    assert out["uploads"] == [[200, n, "POST"] for n in uploads]
    assert len(out["protocols"]) >= len(sizes) + len(uploads)  # (and the favicon)
    assert set(out["protocols"]) == {"h2"}
