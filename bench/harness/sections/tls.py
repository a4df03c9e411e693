"""The TLS section (issue 13): nginx and the gateway terminating TLS with the same
certificate (ECDSA P-256, made here), one process each, in front of the same upstream.

Rows: HTTP/1.1 keep-alive over TLS 1.3 (wrk), a new connection per request (wrk with
``Connection: close``: handshakes per second), HTTP/2 over TLS with ALPN (h2load -m1 and
-m10; the gateway on ``codec_type: auto``, as deployed). Each row is reported as the
gateway's ratio to nginx from the same run.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ..certs import client_context, make_certificate
from ..fmt import fmt, fmt_paired
from ..gateway import AuthProvider, gateway_env, gateway_tls_auth_yaml, gateway_tls_yaml
from ..idle import idle_memory, open_idle_tls
from ..load import Bench, Target
from ..nginx import nginx_tls_conf, start_nginx
from ..paths import REPO_ROOT
from ..probes import check_body_tls
from ..procs import Processes, free_port, tree, wait_port
from ..signin import sign_in

# targets (issue 13), gateway / nginx on the same row
TARGET_TLS_KEEPALIVE = 0.35
TARGET_TLS_AUTH = 0.30
TARGET_TLS_H2 = 0.30


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """gateway / nginx req/s per row that has both."""
    out: dict[str, float] = {}
    for row, r in rows.items():
        gw = r.get("gateway", {}).get("median", {}).get("rps")
        ng = r.get("nginx", {}).get("median", {}).get("rps")
        if gw and ng:
            out[row] = gw / ng
    return out


def run_section(args: argparse.Namespace, bench: Bench, procs: Processes, tmp: Path,
                twistd: Path, upstream: int, port: int, provider: AuthProvider | None,
                results: dict[str, Any]) -> None:
    """Every TLS row for nginx and the gateway (``port``: the gateway's, chosen before
    the OIDC provider started so its callback URL is known); fills ``results["tls"]``."""
    out: dict[str, Any] = results.setdefault("tls", {})
    cert, key = make_certificate(tmp)
    ng_port = free_port()
    nginx = start_nginx(procs, tmp, "proxy-tls",
                            nginx_tls_conf(tmp, ng_port, upstream, cert, key), bench.proxy_cpu)
    wait_port(ng_port, nginx)
    config = tmp / "gateway-tls.yaml"
    config.write_text(gateway_tls_auth_yaml(port, upstream, cert, key, provider)
                      if provider is not None else gateway_tls_yaml(port, upstream, cert, key))
    gateway = procs.start("gateway-tls", [str(twistd), "-n", "--pidfile=", "gateway",
                                          "--config", str(config)],
                          bench.proxy_cpu, cwd=REPO_ROOT, env=gateway_env())
    wait_port(port, gateway)
    try:
        out["nginx_check"] = check_body_tls(ng_port)
        out["gateway_check"] = check_body_tls(port)
        ng = Target("nginx", ng_port, lambda: tree(nginx.pid), scheme="https")
        gw = Target("gateway", port, lambda: [gateway.pid], scheme="https")
        auth_target = None
        if provider is not None:
            try:
                session = sign_in(port, tls=client_context())
                headers = {"Host": session["host"], "Cookie": session["cookie"]}
                out["auth_check"] = check_body_tls(port, headers)
                auth_target = replace(gw, name="gateway auth", headers=tuple(
                    f"{k}: {v}" for k, v in headers.items()))
            except Exception as exc:
                out["auth_error"] = f"{type(exc).__name__}: {exc}"
        else:
            out["auth_error"] = results.get("auth", {}).get("skipped", "no OIDC provider")
        keys = ("rps", "p50_ms", "p99_ms")
        rows: dict[str, dict[str, Any]] = {}
        print("TLS (wrk, h2load over TLS 1.3)", flush=True)
        # nginx and the gateway runs alternate (Bench.interleaved)
        keep_alive = bench.interleaved(
            [ng, gw] + ([auth_target] if auth_target is not None else []), bench.wrk, keys)
        rows["TLS keep-alive"] = {"nginx": keep_alive["nginx"], "gateway": keep_alive["gateway"]}
        if auth_target is not None:
            rows["TLS keep-alive, signed-in route"] = {
                "nginx": keep_alive["nginx"], "gateway": keep_alive["gateway auth"]}
        close = ("Connection: close",)
        rows["TLS new connection per request"] = bench.interleaved(
            [replace(t, headers=close) for t in (ng, gw)], bench.wrk, keys)
        if not args.no_h2 and shutil.which("h2load"):
            for m in (1, 10):
                rows[f"HTTP/2 over TLS -m{m}"] = bench.interleaved(
                    [replace(t, streams=m) for t in (ng, gw)], bench.h2load,
                    ("rps", "mean_ms", "max_ms"))
        out["rows"] = rows
        out["ratios"] = ratios(rows)
        if args.idle_connections:
            print(f"Idle TLS keep-alive connections ({args.idle_connections})", flush=True)
            out["idle"] = {}
            for t in (ng, gw):
                try:
                    out["idle"][t.name] = idle_memory(
                        f"{t.name} TLS", t.port, t.pids, args.idle_connections,
                        args.idle_timeout, args.idle_path, opener=open_idle_tls)
                except OSError as exc:
                    out["idle"][t.name] = {"error": str(exc)}
    finally:
        procs.stop(gateway)
        procs.stop(nginx)


def report(results: dict[str, Any], out: TextIO) -> None:
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
        line += fmt_paired(r.get("gateway", {}), f"\n  {'':<34} ")
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
