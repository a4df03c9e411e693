"""The TLS section of ``bench/run.py`` (issue 13): nginx and the gateway terminating TLS
with the same certificate (ECDSA P-256, made here), one process each, in front of the
same upstream.

Rows: HTTP/1.1 keep-alive over TLS 1.3 (wrk), a new connection per request (wrk with
``Connection: close``: handshakes per second), HTTP/2 over TLS with ALPN (h2load -m1 and
-m10; the gateway on ``codec_type: auto``, as deployed). Each row is reported as the
gateway's ratio to nginx from the same run.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import http.client
import ipaddress
import json
import os
import shutil
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# targets (issue 13), gateway / nginx on the same row
TARGET_TLS_KEEPALIVE = 0.35
TARGET_TLS_AUTH = 0.30
TARGET_TLS_H2 = 0.30


def make_certificate(tmp: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for 127.0.0.1, localhost and the signed-in
    section's names (auth.test, app.test)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
            x509.DNSName("auth.test"), x509.DNSName("app.test")]),
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
        "codec_type: auto",  # ALPN: h2 or http/1.1 (all-in-one's default is http1)
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


# --------------------------------------------------------------------------------------
# configs


def nginx_tls_conf(tmp: Path, port: int, upstream: int, cert: Path, key: Path) -> str:
    """nginx terminating TLS in front of the upstream (1 worker, keepalive 64)."""
    import run
    location = (
        "    location / {\n"
        "      proxy_pass http://up;\n"
        "      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n'
        "    }\n"
    )
    return (
        run.nginx_common(tmp, "proxy-tls")
        + "http {\n" + run.nginx_http_common(tmp, "proxy-tls")
        + f"  upstream up {{ server 127.0.0.1:{upstream}; keepalive 64; "
        "keepalive_requests 1000000; }\n"
        + nginx_tls_server(port, cert, key, location) + "}\n"
    )


def gateway_tls_auth_yaml(port: int, upstream: int, cert: Path, key: Path,
                          auth: Any) -> str:
    """``gateway_tls_yaml`` plus sign-in at https://auth.test and the signed-in route
    https://app.test (the same names as the plain section's)."""
    import run
    q = json.dumps
    return gateway_tls_yaml(port, upstream, cert, key) + "\n".join([
        f"  - from: https://{run.AUTH_HOST}:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        f"    allowed_users: [{q(run.AUTH_USER)}]",
        "    pass_identity_headers: true",
        f"authenticate_service_url: https://auth.test:{port}",
        "idp_provider: oidc",
        f"idp_provider_url: {q(auth.issuer)}",
        f"idp_client_id: {q(auth.client_id)}",
        f"idp_client_secret: {q(auth.client_secret)}",
        "idp_scopes: [openid, email, groups, offline_access]",
    ]) + "\n"


def client_context() -> ssl.SSLContext:
    """The harness's TLS client: no verification (the certificate is made here)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def check_body_tls(port: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``GET /`` over TLS: must be 200 with the upstream's body."""
    import run
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=client_context())
    try:
        conn.request("GET", "/", headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        version = conn.sock.version() if conn.sock is not None else None  # type: ignore[union-attr]
    finally:
        conn.close()
    if resp.status != 200 or len(body) != run.BODY_LEN:
        raise RuntimeError(f"GET https://127.0.0.1:{port}/ {headers or ''}: expected 200 with "
                           f"{run.BODY_LEN} bytes, got {resp.status} with {len(body)} bytes")
    return {"status": resp.status, "body_len": len(body), "tls_version": version}


# --------------------------------------------------------------------------------------
# idle TLS keep-alive connections


def open_idle_tls(port: int, count: int, deadline: float, path: str = "/ping",
                  workers: int = 16) -> tuple[list[socket.socket], dict[str, Any]]:
    """``count`` TLS keep-alive connections, each after a full handshake and one
    ``GET <path>`` answered in full (``workers`` handshakes at a time)."""
    import run
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    ctx = client_context()
    lock = threading.Lock()
    failures: dict[str, int] = {}
    statuses: dict[int, int] = {}
    close_responses = 0

    def one(_: int) -> socket.socket | None:
        nonlocal close_responses
        if time.monotonic() > deadline:
            return None
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(request)
            buf = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("closed before the response ended")
                buf += chunk
                done, status, close = run._response_complete(buf)
                if done:
                    break
        except OSError as exc:
            with lock:
                why = type(exc).__name__
                failures[why] = failures.get(why, 0) + 1
            return None
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            close_responses += close
        # The harness's checks peek at the raw socket (an SSLSocket refuses MSG_PEEK):
        # hand back a duplicate of its descriptor; closing the SSLSocket sends nothing.
        plain = socket.socket(fileno=os.dup(s.fileno()))
        s.close()
        return plain

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        opened = [s for s in pool.map(one, range(count)) if s is not None]
    return opened, {"opened": len(opened), "attempted": count, "statuses": statuses,
                    "connection_close_responses": close_responses, "failures": failures}


# --------------------------------------------------------------------------------------
# the section


def run_section(args: Any, bench: Any, procs: Any, tmp: Path, twistd: Path, upstream: int,
                port: int, provider: Any, results: dict[str, Any]) -> None:
    """Every TLS row for nginx and the gateway (``port``: the gateway's, chosen before
    the OIDC provider started so its callback URL is known); fills ``results["tls"]``."""
    import run
    out: dict[str, Any] = results.setdefault("tls", {})
    cert, key = make_certificate(tmp)
    ng_port = run.free_port()
    nginx = run.start_nginx(procs, tmp, "proxy-tls",
                            nginx_tls_conf(tmp, ng_port, upstream, cert, key), bench.proxy_cpu)
    run.wait_port(ng_port, nginx)
    config = tmp / "gateway-tls.yaml"
    config.write_text(gateway_tls_auth_yaml(port, upstream, cert, key, provider)
                      if provider is not None else gateway_tls_yaml(port, upstream, cert, key))
    gateway = procs.start("gateway-tls", [str(twistd), "-n", "--pidfile=", "gateway",
                                          "--config", str(config)],
                          bench.proxy_cpu, cwd=run.REPO_ROOT, env=run.gateway_env())
    run.wait_port(port, gateway)
    try:
        out["nginx_check"] = check_body_tls(ng_port)
        out["gateway_check"] = check_body_tls(port)
        ng = run.Target("nginx", ng_port, lambda: run.tree(nginx.pid), scheme="https")
        gw = run.Target("gateway", port, lambda: [gateway.pid], scheme="https")
        auth_target = None
        if provider is not None:
            try:
                session = run.sign_in(port, tls=client_context())
                headers = {"Host": session["host"], "Cookie": session["cookie"]}
                out["auth_check"] = check_body_tls(port, headers)
                auth_target = run.replace(gw, name="gateway auth", headers=tuple(
                    f"{k}: {v}" for k, v in headers.items()))
            except Exception as exc:
                out["auth_error"] = f"{type(exc).__name__}: {exc}"
        else:
            out["auth_error"] = results.get("auth", {}).get("skipped", "no OIDC provider")
        keys = ("rps", "p50_ms", "p99_ms")
        rows: dict[str, dict[str, Any]] = {}
        print("TLS (wrk, h2load over TLS 1.3)", flush=True)
        # nginx and the gateway runs alternate (run.Bench.interleaved)
        keep_alive = bench.interleaved(
            [ng, gw] + ([auth_target] if auth_target is not None else []), bench.wrk, keys)
        rows["TLS keep-alive"] = {"nginx": keep_alive["nginx"], "gateway": keep_alive["gateway"]}
        if auth_target is not None:
            rows["TLS keep-alive, signed-in route"] = {
                "nginx": keep_alive["nginx"], "gateway": keep_alive["gateway auth"]}
        close = ("Connection: close",)
        rows["TLS new connection per request"] = bench.interleaved(
            [run.replace(t, headers=close) for t in (ng, gw)], bench.wrk, keys)
        if not args.no_h2 and shutil.which("h2load"):
            for m in (1, 10):
                rows[f"HTTP/2 over TLS -m{m}"] = bench.interleaved(
                    [run.replace(t, streams=m) for t in (ng, gw)], bench.h2load,
                    ("rps", "mean_ms", "max_ms"))
        out["rows"] = rows
        out["ratios"] = ratios(rows)
        if args.idle_connections:
            print(f"Idle TLS keep-alive connections ({args.idle_connections})", flush=True)
            out["idle"] = {}
            for t in (ng, gw):
                try:
                    out["idle"][t.name] = run.idle_memory(
                        f"{t.name} TLS", t.port, t.pids, args.idle_connections,
                        args.idle_timeout, args.idle_path, opener=open_idle_tls)
                except OSError as exc:
                    out["idle"][t.name] = {"error": str(exc)}
    finally:
        procs.stop(gateway)
        procs.stop(nginx)


def report(results: dict[str, Any], out: TextIO) -> None:
    import run
    tls = results.get("tls")
    if not tls:
        return
    w = out.write
    w("\nTLS 1.3 (ECDSA P-256, same certificate; wrk -t1 -c50 / h2load -t1 -c50), "
      "gateway / nginx from the same run:\n")
    targets = {"TLS keep-alive": TARGET_TLS_KEEPALIVE,
               "TLS keep-alive, signed-in route": TARGET_TLS_AUTH,
               "HTTP/2 over TLS -m1": TARGET_TLS_H2}
    for row, r in tls.get("rows", {}).items():
        gw = r.get("gateway", {}).get("median", {}).get("rps")
        ng = r.get("nginx", {}).get("median", {}).get("rps")
        cpu = r.get("gateway", {}).get("median", {}).get("proxy_cpu%")
        ng_cpu = r.get("nginx", {}).get("median", {}).get("proxy_cpu%")
        ratio = tls.get("ratios", {}).get(row)
        # per CPU second: on a loaded box either server may get less than its core
        per_cpu = (gw / cpu) / (ng / ng_cpu) if gw and ng and cpu and ng_cpu else None
        line = (f"  {row:<34} gateway {fmt(gw, ',.0f'):>8} req/s  nginx {fmt(ng, ',.0f'):>8}"
                f"  ratio {fmt(ratio, '.3f'):>6}  (CPU gateway {fmt(cpu, '.0f')} %, "
                f"nginx {fmt(ng_cpu, '.0f')} %; ratio per CPU second {fmt(per_cpu, '.3f')})")
        if row in targets and ratio is not None:
            ok = ratio >= targets[row]
            line += f"   target >= {targets[row]:.2f}: {'met' if ok else 'NOT met'}"
        line += run.fmt_paired(r.get("gateway", {}), f"\n  {'':<34} ")
        w(line + "\n")
    if "auth_error" in tls:
        w(f"  signed-in route over TLS: not run: {tls['auth_error']}\n")
    for name, r in tls.get("idle", {}).items():
        per = r.get("kib_per_connection")
        w(f"  idle TLS keep-alive, {name:<8} {fmt(per, '.2f'):>7} KiB/conn "
          f"({r.get('opened', 0)}/{r.get('requested', 0)} opened, "
          f"{r.get('still_open_at_measurement', 0)} still open)"
          + (f"   n/a: {r['invalid']}" if "invalid" in r else "")
          + (f"   target <= 30 KiB: {'met' if per is not None and per <= 30 else 'NOT met'}"
             if name == "gateway" else "") + "\n")


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)
