"""The whole run: the servers every section shares (the upstream, the nginx proxy, the
OIDC provider), then the sections in order; and the whole report."""

from __future__ import annotations

import argparse
import contextlib
import shutil
from pathlib import Path
from typing import Any, TextIO

from .load import Bench, Target
from .nginx import nginx_has_http2, proxy_conf, start_nginx, upstream_conf
from .probes import check_body
from .procs import Processes, free_port, tree, wait_port
from .sections import http1, http2, tls
from .signin import start_auth


def run_all(args: argparse.Namespace, bench: Bench, procs: Processes, tmp: Path, twistd: Path,
            results: dict[str, Any], stack: contextlib.ExitStack) -> None:
    up_port, px_port = free_port(), free_port()
    want_h2 = not args.no_h2 and shutil.which("h2load") is not None
    nginx_h2 = want_h2 and nginx_has_http2()
    px_h2_port = free_port() if nginx_h2 else None

    print(f"temp dir {tmp}; {results['config']['pinning']}", flush=True)
    upstream = start_nginx(procs, tmp, "upstream", upstream_conf(tmp, up_port), bench.load_cpu)
    wait_port(up_port, upstream)
    check_body(up_port)
    bench.upstream_pids = tree(upstream.pid)

    proxy = start_nginx(procs, tmp, "proxy", proxy_conf(tmp, px_port, up_port, px_h2_port),
                        bench.proxy_cpu)
    wait_port(px_port, proxy)
    nginx = Target("nginx", px_port, lambda: tree(proxy.pid))
    results["nginx_check"] = check_body(px_port)

    # the authenticated route lives in the same gateway process as the public one: the
    # provider must run first (its issuer goes into the config, the callback URL into it)
    gw_port = free_port()
    tls_port = None if args.no_tls else free_port()
    provider, bench.provider_pids = start_auth(args, stack, tmp, gw_port, tls_port,
                                               results["auth"])

    http1.run_section(args, bench, procs, tmp, twistd, up_port, gw_port, nginx, provider,
                      results)

    if tls_port is not None:
        try:
            tls.run_section(args, bench, procs, tmp, twistd, up_port, tls_port,
                            provider, results)
        except Exception as exc:
            results.setdefault("tls", {})["error"] = f"{type(exc).__name__}: {exc}"
            print(f"TLS section: ERROR: {results['tls']['error']}", flush=True)

    if args.no_h2:
        return
    http2.run_section(args, bench, procs, tmp, twistd, up_port, px_h2_port, want_h2, nginx,
                      results)


def report(results: dict[str, Any], out: TextIO) -> None:
    """The table and ratios of every section that ran, in this order: HTTP/1.1 (and the
    idle connections), HTTP/2, TLS."""
    http1.report(results, out)
    http2.report(results, out)
    if "tls" in results:
        tls.report(results, out)
        if "error" in results["tls"]:
            out.write(f"  TLS section: ERROR: {results['tls']['error']}\n")
