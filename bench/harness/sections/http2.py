"""HTTP/2 (h2load, h2c with prior knowledge): nginx's h2c port and a second gateway with
``codec_type: http2``, each only when it answers the h2c preface with SETTINGS."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..fmt import fmt, fmt_paired, fmt_rss
from ..gateway import start_gateway
from ..load import CONNECTIONS, Bench, Target
from ..probes import h2c_probe
from ..procs import Processes, wait_port


def run_section(args: argparse.Namespace, bench: Bench, procs: Processes, tmp: Path,
                twistd: Path, up_port: int, px_h2_port: int | None, want_h2: bool,
                nginx: Target, results: dict[str, Any]) -> None:
    """Fills ``results["http2"]`` (``px_h2_port``: nginx's h2c port, None when nginx has
    no http_v2_module; ``want_h2``: h2load is installed)."""
    print("HTTP/2 (h2load)", flush=True)
    h2_keys = ("rps", "mean_ms", "max_ms")
    if not want_h2:
        reason = "h2load not installed (apt-get install -y nghttp2-client)"
        results["http2"] = {"nginx": {"skipped": reason}, "gateway": {"skipped": reason}}
        return
    h2_targets: list[Target] = []
    if px_h2_port is None:
        results["http2"]["nginx"] = {"skipped": "nginx was built without http_v2_module"}
    else:
        ok, why = h2c_probe(px_h2_port)
        if ok:
            h2_targets.append(Target("nginx h2c", px_h2_port, nginx.pids))
        else:
            results["http2"]["nginx"] = {"skipped": f"nginx h2c port {why}"}

    # h2c with prior knowledge only for a gateway configured with codec_type: http2
    gw2, gw2_port = start_gateway(procs, tmp, twistd, "gateway-h2", up_port, "http2",
                                  bench.proxy_cpu, metrics=args.metrics)
    try:
        wait_port(gw2_port, gw2, timeout=30)
    except RuntimeError as exc:
        results["http2"]["gateway"] = {
            "skipped": "gateway with codec_type: http2 did not start: "
            + str(exc).replace("\n", " | ")[:400]}
        gw2_port = 0
    if gw2_port:
        ok, why = h2c_probe(gw2_port)
        if ok:
            h2_targets.append(Target("gateway h2c", gw2_port, lambda: [gw2.pid]))
        else:
            results["http2"]["gateway"] = {
                "skipped": f"gateway with codec_type: http2 + insecure_server {why} "
                "(no h2c on a plain port yet)"}
    if h2_targets:  # nginx and the gateway alternate (see Bench.interleaved)
        measured = bench.interleaved(h2_targets, bench.h2load, h2_keys)
        for target in h2_targets:
            results["http2"]["nginx" if target.name.startswith("nginx") else "gateway"] = \
                measured[target.name]
    procs.stop(gw2)


def report(results: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w("\nHTTP/2 (h2c prior knowledge, h2load -t1 "
      f"-c{CONNECTIONS} -m{results['config']['h2_streams']}):\n")
    h2 = results.get("http2", {})
    if results["config"]["no_h2"]:
        w("  skipped (--no-h2)\n")
    elif not h2:
        w("  not run\n")
    for name, r in h2.items():
        if "skipped" in r:
            w(f"  {name:<12} skipped: {r['skipped']}\n")
            continue
        m = r.get("median", {})
        w(f"  {name:<12} {fmt(m.get('rps'), ',.0f'):>10} req/s, mean {fmt(m.get('mean_ms'), '.2f')}"
          f" ms, max {fmt(m.get('max_ms'), '.2f')} ms, peak RSS {fmt_rss(r.get('peak_rss_kib'))}, "
          f"proxy CPU {fmt(m.get('proxy_cpu%'), '.0f')} %, "
          f"clean {r.get('clean_runs', 0)}/{r.get('used_runs', 0)}{fmt_paired(r)}\n")
