"""Loopback benchmark: nginx reverse proxy vs. the gateway in front of the same nginx upstream.

One command, stdlib only:

    .venv/bin/python bench/run.py            # full run: 10 s wrk runs, 1 warm-up + 3 measured
    .venv/bin/python bench/run.py --quick    # 3 s runs, 1 warm-up + 1 measured
    .venv/bin/python bench/run.py --no-auth  # without the authenticated route
    .venv/bin/python bench/run.py --kvstore  # the authenticated route's sessions in Redis
    .venv/bin/python bench/run.py --no-mcp   # without the MCP rows

It starts (all on 127.0.0.1, free ports, everything under one temp dir):

* an nginx upstream answering every request with a 2 KiB body (``"ok\\n"`` + 2045 x ``x``),
* nginx as a reverse proxy (1 worker, upstream keepalive 64),
* the gateway (``twistd -n --pidfile= gateway --config FILE``) with one public route and,
  when node and ``tests/peers/oidc/node_modules`` are there (and without ``--no-auth``),
  sign-in against node-oidc-provider (also on loopback) and a second, authenticated route,

drives each proxy with ``wrk -t1 -c50 --latency`` (median of N runs after a warm-up, runs
disturbed by other processes on the box are repeated, as in the perf baseline), drives the
gateway's authenticated route the same way with a session cookie from one sign-in, samples the
proxies' peak RSS, measures the memory of 5,000 idle keep-alive connections, optionally runs
``h2load`` against h2c endpoints, runs the TLS section (``harness/sections/tls.py``: nginx and
the gateway terminating TLS 1.3 with the same certificate), prints a table and writes the raw
results as JSON.

This file is the command line; the harness is the package ``bench/harness/``. It only
relies on ``twistd gateway --config`` (and, for sign-in, on the stdlib-only
test peers in ``tests/support``), never on the gateway's internals.
It measures; it does not judge: the exit status is 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.gateway import find_twistd
from harness.load import CONNECTIONS, Bench
from harness.nginx import BODY_LEN
from harness.paths import BENCH_DIR, REPO_ROOT
from harness.procs import Interrupted, Processes, raise_nofile, signals_raise
from harness.sections.http1 import (
    TARGET_AUTH_RATIO,
    TARGET_IDLE_KIB,
    TARGET_P99_MS,
    TARGET_RATIO,
)
from harness.suite import report, run_all


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="3 s runs, 1 measured run (overrides --duration/--repeat)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    p.add_argument("--repeat", type=int, default=3, help="measured runs per target (median)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of the warm-up run; None: min(5, duration)")
    p.add_argument("--idle-connections", type=int, default=5000,
                   help="idle keep-alive connections for the memory measurement (0: skip)")
    p.add_argument("--idle-timeout", type=float, default=60.0,
                   help="time limit for opening the idle connections, per target")
    p.add_argument("--idle-path", default="/ping",
                   help="path of the one request sent on each idle connection")
    p.add_argument("--no-h2", action="store_true", help="skip the HTTP/2 section")
    p.add_argument("--no-tls", action="store_true",
                   help="skip the TLS section (bench/harness/sections/tls.py: keep-alive, "
                   "signed-in route, new connection per request, HTTP/2 over TLS, idle TLS "
                   "connections)")
    p.add_argument("--kvstore", action="store_true",
                   help="keep the signed-in route's sessions in a local redis-server")
    p.add_argument("--metrics", action="store_true",
                   help="give the gateway a metrics_address (request metrics on)")
    p.add_argument("--otlp", action="store_true",
                   help="also a gateway tracing over OTLP/HTTP at the default sample rate "
                   "(to a local sink), measured against the plain gateway of the same run")
    p.add_argument("--no-mcp", action="store_true",
                   help="skip the MCP rows (a tools/call through MCP policy vs. the same POST "
                   "on a signed-in route)")
    p.add_argument("--no-auth", action="store_true",
                   help="skip the authenticated route (no OIDC provider, public route only)")
    p.add_argument("--h2-streams", type=int, default=1,
                   help="h2load -m: concurrent streams per connection")
    p.add_argument("--twistd", default=None,
                   help="twistd to run; None: <repo>/.venv/bin/twistd")
    p.add_argument("--out", default=None,
                   help="JSON results file; None: bench/results/<timestamp>.json")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.repeat = 3.0, 1
    if args.warmup is None:
        args.warmup = min(5.0, args.duration)
    if args.duration <= 0 or args.repeat < 1 or args.duration > 600:
        p.error("--duration must be in (0, 600] and --repeat >= 1")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    missing = [t for t in ("nginx", "wrk") if shutil.which(t) is None]
    if missing:
        print(f"missing tools: {', '.join(missing)} (apt-get install -y nginx wrk "
              "nghttp2-client)", file=sys.stderr)
        return 2
    twistd = find_twistd(args.twistd)
    # the harness holds the idle client sockets; children (nginx, twistd) inherit the limit
    nofile = raise_nofile(2 * args.idle_connections + 1000)
    if args.idle_connections and nofile[0] < args.idle_connections + 500:
        print(f"RLIMIT_NOFILE is {nofile[0]}: idle connections reduced", file=sys.stderr)
        args.idle_connections = max(0, nofile[0] - 500)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    procs = Processes(tmp)
    bench = Bench(args, procs)
    started = time.time()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "config": {
            "duration": args.duration, "repeat": args.repeat, "warmup": args.warmup,
            "connections": CONNECTIONS, "idle_connections": args.idle_connections,
            "idle_path": args.idle_path, "h2_streams": args.h2_streams, "no_h2": args.no_h2,
            "no_auth": args.no_auth,
            "body_bytes": BODY_LEN, "cpus": os.cpu_count(),
            "pinning": (f"proxy on CPU{bench.proxy_cpu}, wrk/h2load + upstream on "
                        f"CPU{bench.load_cpu}") if bench.pinned else "unpinned (< 2 CPUs)",
            "twistd": str(twistd), "repo": str(REPO_ROOT), "rlimit_nofile": nofile[0],
        },
        "targets": {"ratio_min": TARGET_RATIO, "auth_ratio_min": TARGET_AUTH_RATIO,
                    "gateway_p99_ms_max": TARGET_P99_MS,
                    "idle_kib_per_conn_max": TARGET_IDLE_KIB},
        "http1": {}, "auth": {}, "mcp": {}, "idle": {}, "http2": {},
    }
    out_path = Path(args.out) if args.out else (
        BENCH_DIR / "results" / time.strftime("%Y%m%d-%H%M%S.json", time.localtime(started)))
    failed = False
    try:
        with signals_raise(), contextlib.ExitStack() as stack:
            run_all(args, bench, procs, tmp, twistd, results, stack)
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"\ninterrupted ({str(exc) or 'SIGINT'}): stopping everything", file=sys.stderr)
        results["interrupted"] = str(exc) or "SIGINT"
        failed = True
    except Exception as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        results["error"] = str(exc)
        failed = True
    finally:
        procs.stop_all()
    results["seconds"] = round(time.time() - started, 1)
    report(results, sys.stdout)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nraw results: {out_path}")
    print(f"total time: {results['seconds']:.0f} s")
    if args.keep_tmp or failed:
        print(f"configs and logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if "interrupted" in results:
        return 130
    return 1 if "error" in results or "error" in results["auth"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
