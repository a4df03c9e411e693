#!/usr/bin/env python3
"""``workers`` scaling (issue 13): the same gateway with ``workers: 1`` and ``workers: N``
under the same load, reported as a ratio, with the CPU each used.

    .venv/bin/python bench/workers.py                  # workers 1 vs 2, 10 s runs, 3 each
    .venv/bin/python bench/workers.py --workers 4 --duration 5 --repeat 1

Everything runs on 127.0.0.1 in one temp dir: an nginx upstream answering 2 KiB (as in
``bench/run.py``), a redis-server (``workers`` > 1 needs sessions in the kvstore; the
one-worker gateway uses it too, so both do the same work), and the gateway with one
public route. The load is ``wrk -t1 -c50`` as in ``run.py``, in two placements:

- ``load-pinned``: wrk and the upstream on the last CPU, the gateway unpinned (the
  issue's "load generator on its own core"); on a 2-core machine the gateway then has one
  core to itself plus whatever the load leaves of the other;
- ``unpinned``: nothing pinned; every process competes for every core.

Reported per placement and worker count: median req/s, p99, the gateway's CPU (its whole
process tree: supervisor and workers) and the load's (wrk + upstream), in % of one core;
and the N-worker / 1-worker req/s ratio. It measures, it does not judge: exit status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.gateway import find_twistd, gateway_env
from harness.load import CONNECTIONS, parse_wrk
from harness.nginx import BODY, start_nginx, upstream_conf
from harness.procs import Processes, free_port, tree, wait_port
from harness.sample import CpuWindow

REPO = Path(__file__).resolve().parents[1]


def gateway_config(port: int, upstream: int, redis: int, workers: int) -> str:
    secret = "czNjcjN0LXMzY3IzdC1zM2NyM3QtczNjcjN0LXMzY3I="
    return "\n".join([
        "# written by bench/workers.py",
        "insecure_server: true",
        f"address: 127.0.0.1:{port}",
        "log_level: warn",
        "proxy_log_level: error",
        f"workers: {workers}",
        "databroker_storage_type: kvstore",
        f"databroker_storage_connection_string: kvstore://127.0.0.1:{redis}/0",
        f"shared_secret: {secret}",
        f"cookie_secret: {secret}",
        "policy:",
        f"  - from: http://127.0.0.1:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        "    allow_public_unauthenticated_access: true",
    ]) + "\n"


def check(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n"
                     % port)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    if not data.startswith(b"HTTP/1.1 200") or not data.endswith(BODY.encode()):
        raise RuntimeError(f"the gateway did not answer 200 with the body: {data[:200]!r}")


def wait_workers(supervisor: int, count: int, timeout: float = 30.0) -> None:
    """Until the supervisor has ``count`` children (the workers), or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count == 1 or len(tree(supervisor)) - 1 >= count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the supervisor has not started {count} workers")


def run_wrk(duration: float, port: int, gateway: int, upstream: int,
            load_cpu: str | None) -> dict[str, Any]:
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration:g}s", "--latency",
            f"http://127.0.0.1:{port}/"]
    if load_cpu is not None:
        argv = ["taskset", "-c", load_cpu, *argv]
    with CpuWindow({"gateway": tree(gateway), "upstream": tree(upstream),
                    "harness": [os.getpid()]}) as window:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30,
                             check=True).stdout
    info = window.result(None)
    return {**parse_wrk(out), **info}


def measure(args: argparse.Namespace, procs: Processes, tmp: Path, twistd: Path,
            workers: int, placement: str, upstream_port: int, upstream_pid: int,
            redis: int) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    load_cpu = str(cpus[-1]) if placement == "load-pinned" and len(cpus) > 1 else None
    port = free_port()
    config = tmp / f"gateway-{workers}.yaml"
    config.write_text(gateway_config(port, upstream_port, redis, workers))
    proc = procs.start(f"gateway-{workers}-{placement}",
                       [str(twistd), "-n", "--pidfile=", "gateway", "--config", str(config)],
                       None, cwd=REPO, env=gateway_env())
    try:
        wait_port(port, proc)
        wait_workers(proc.pid, workers)
        check(port)
        run_wrk(args.warmup, port, proc.pid, upstream_pid, load_cpu)
        runs = [run_wrk(args.duration, port, proc.pid, upstream_pid, load_cpu)
                for _ in range(args.repeat)]
    finally:
        procs.stop(proc, grace=15)
    result = {
        "workers": workers, "placement": placement,
        "rps": statistics.median(r["rps"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "gateway_cpu%": statistics.median(r["cpu%"]["gateway"] for r in runs),
        "load_cpu%": statistics.median(r["cpu%"]["upstream"] + r["cpu%"]["load"]
                                       for r in runs),
        "clean": sum(r["clean"] for r in runs), "runs": len(runs),
    }
    print(f"  {placement:11} workers={workers}: {result['rps']:>9,.0f} req/s  "
          f"p99 {result['p99_ms']:.1f} ms  gateway CPU {result['gateway_cpu%']:.0f} %  "
          f"load CPU {result['load_cpu%']:.0f} %  clean {result['clean']}/{result['runs']}",
          flush=True)
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="N, compared with 1 (default 2)")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--placement", action="append", choices=("load-pinned", "unpinned"))
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    for tool in ("nginx", "wrk", "redis-server"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            print(f"skipped: {tool} is not installed", file=sys.stderr)
            return 0
    twistd = find_twistd(None)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-workers-"))
    procs = Processes(tmp)
    results: list[dict[str, Any]] = []
    try:
        upstream_port, redis = free_port(), free_port()
        upstream = start_nginx(procs, tmp, "upstream", upstream_conf(tmp, upstream_port),
                               None)
        wait_port(upstream_port, upstream)
        redis_proc = procs.start("redis", ["redis-server", "--port", str(redis), "--bind",
                                           "127.0.0.1", "--save", "", "--appendonly", "no"])
        wait_port(redis, redis_proc)
        cpus = len(os.sched_getaffinity(0))
        print(f"workers benchmark: {cpus} CPUs, wrk -t1 -c{CONNECTIONS}, "
              f"{args.duration:g} s x {args.repeat}", flush=True)
        for placement in args.placement or ["load-pinned", "unpinned"]:
            for workers in (1, args.workers):
                results.append(measure(args, procs, tmp, twistd, workers, placement,
                                       upstream_port, upstream.pid, redis))
            one, many = results[-2], results[-1]
            print(f"  {placement}: {args.workers} workers / 1 = "
                  f"{many['rps'] / one['rps']:.2f}x req/s", flush=True)
    finally:
        procs.stop_all()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
