"""CPU per request of the gateway over TLS, A/B between source trees (issue 13).

On a shared, noisy machine req/s moves with the neighbours; the gateway's own CPU time
per request moves much less. This starts one nginx upstream and one TLS gateway per
source tree (``--tree``, e.g. a worktree of the previous commit and this one), then
alternates wrk runs between them, reading each gateway's utime+stime from
``/proc/<pid>/stat`` around each run:

    .venv/bin/python bench/tls_cpu.py --tree base=/work/wt-base --tree new=. --rounds 4

Each line is one run: requests, req/s and µs of gateway CPU per request; the summary is
the median per tree and its best run (the noise of a shared machine only adds time:
many short rounds and the best run compare code, the median compares typical runs).
``--plain`` measures the plain-HTTP listener instead (no regression check),
``--plain --h2 1 --h2c`` measures h2c (prior knowledge) on ``codec_type: http2``;
``--cookie``/``--host`` are not needed: the public route is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.certs import client_context, make_certificate
from harness.gateway import (
    AuthProvider,
    gateway_env,
    gateway_tls_auth_yaml,
    gateway_tls_yaml,
    gateway_yaml,
)
from harness.idle import idle_memory, open_idle_tls
from harness.load import parse_h2load, parse_wrk
from harness.nginx import start_nginx, upstream_conf
from harness.paths import REPO_ROOT, import_peers
from harness.procs import Proc, Processes, free_port, raise_nofile, wait_port
from harness.sample import TCK
from harness.signin import sign_in

# What a browser sends with a page request besides Host and Cookie (Chromium 130).
BROWSER_HEADERS = (
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "*/*;q=0.8",
    "Accept-Encoding: gzip, deflate, br, zstd",
    "Accept-Language: en-GB,en;q=0.9",
    "Cache-Control: max-age=0",
    'Sec-Ch-Ua: "Chromium";v="130", "Not?A_Brand";v="99"',
    "Sec-Ch-Ua-Mobile: ?0",
    'Sec-Ch-Ua-Platform: "Linux"',
    "Sec-Fetch-Dest: document",
    "Sec-Fetch-Mode: navigate",
    "Sec-Fetch-Site: same-origin",
    "Sec-Fetch-User: ?1",
    "Upgrade-Insecure-Requests: 1",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/130.0.0.0 Safari/537.36",
    "Referer: https://app.test/index.html",
)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def arguments(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True,
                   help="NAME=PATH of a source tree; PATH:plain for its plain-HTTP listener")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--plain", action="store_true", help="plain HTTP instead of TLS")
    p.add_argument("--close", action="store_true", help="Connection: close (handshakes)")
    p.add_argument("--h2", type=int, default=0, help="h2load -mN over TLS instead of wrk")
    p.add_argument("--h2c", action="store_true",
                   help="with --plain --h2 N: the gateway on codec_type: http2 (h2c)")
    p.add_argument("--profile", default=None,
                   help="py-spy record each tree in round 1, raw collapsed stacks to DIR")
    p.add_argument("--strace", default=None, help="strace -c each tree in round 1 into DIR")
    p.add_argument("--auth", action="store_true",
                   help="the signed-in route (node-oidc-provider, one sign-in per gateway)")
    p.add_argument("--public-too", action="store_true",
                   help="with --auth: alternate each run on the signed-in route with one on "
                        "the same gateway's public route (what the signed-in route adds, "
                        "free of the machine's drift between runs)")
    p.add_argument("--browser", action="store_true",
                   help="send the headers of a browser's page request (14 more) with each "
                        "request, as real traffic does (wrk sends Host only)")
    p.add_argument("--idle", type=int, default=0,
                   help="first measure RSS per idle keep-alive connection (N of them)")
    p.add_argument("--native", action="store_true", help="with --profile: C frames too")
    p.add_argument("--twistd", default=str(REPO_ROOT / ".venv" / "bin" / "twistd"))
    return p.parse_args(argv)


Gateways = dict[str, tuple[Proc, int, str]]  # name -> (process, port, scheme)


def start_gateways(args: argparse.Namespace, procs: Processes, tmp: Path, up: int,
                   certificate: tuple[Path, Path], provider: AuthProvider | None,
                   ports: dict[str, int], proxy_cpu: str | None
                   ) -> tuple[Gateways, dict[str, list[str]]]:
    """One gateway per ``--tree`` in front of upstream port ``up`` (signed in once with
    ``provider``), and the load tool's extra arguments for each."""
    cert, key = certificate
    gateways: Gateways = {}
    headers: dict[str, list[str]] = {}
    for spec in args.tree:
        name, path = spec.split("=", 1)
        plain = args.plain or path.endswith(":plain")
        path = path.removesuffix(":plain")
        port = ports[spec]
        conf = tmp / f"{name}.yaml"
        if plain:
            conf.write_text(gateway_yaml(port, up, "http2" if args.h2c else None, provider))
        elif provider is not None:
            conf.write_text(gateway_tls_auth_yaml(port, up, cert, key, provider))
        else:
            conf.write_text(gateway_tls_yaml(port, up, cert, key))
        env = gateway_env()
        env["PYTHONPATH"] = str(Path(path).resolve())
        proc = procs.start(name, [args.twistd, "-n", "--pidfile=", "gateway", "--config",
                                  str(conf)], proxy_cpu, cwd=Path(path), env=env)
        wait_port(port, proc)
        gateways[name] = (proc, port, "http" if plain else "https")
        headers[name] = []
        if provider is not None:
            session = sign_in(port, tls=None if plain else client_context())
            headers[name] = ["-H", f"Host: {session['host']}", "-H",
                             f"Cookie: {session['cookie']}"]
        if args.browser:
            headers[name] += [arg for h in BROWSER_HEADERS for arg in ("-H", h)]
    return gateways, headers


def load_command(args: argparse.Namespace, scheme: str, port: int, extra: list[str],
                 load_cpu: str | None) -> list[str]:
    """wrk (or h2load with ``--h2``) for one run, pinned to ``load_cpu``."""
    if args.h2:
        argv = ["h2load", "-t1", "-c50", f"-m{args.h2}", f"-D{args.duration:g}",
                f"{scheme}://127.0.0.1:{port}/"]
    else:
        argv = ["wrk", "-t1", "-c50", f"-d{args.duration:g}s"]
        if args.close:
            argv += ["-H", "Connection: close"]
        argv += extra
        argv.append(f"{scheme}://127.0.0.1:{port}/")
    return argv if load_cpu is None else ["taskset", "-c", load_cpu, *argv]


def observer(args: argparse.Namespace, pid: int, file_name: str
             ) -> subprocess.Popen[bytes] | None:
    """py-spy (``--profile``) or strace (``--strace``) on the gateway for one run."""
    if args.profile:
        return subprocess.Popen(
            [str(Path(args.twistd).parent / "py-spy"), "record", "-r", "200",
             *(["--native"] if args.native else []), "-f", "raw",
             "-o", str(Path(args.profile) / f"{file_name}.txt"),
             "-p", str(pid), "-d", f"{args.duration:g}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if args.strace:
        return subprocess.Popen(
            ["strace", "-c", "-o", str(Path(args.strace) / f"{file_name}.strace"),
             "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return None


def measure(args: argparse.Namespace, pid: int, argv: list[str], name: str, rnd: int
            ) -> tuple[float, float]:
    """One run of the load tool: (µs of gateway CPU per request, req/s), printed."""
    spy = observer(args, pid, name.replace("/", "-")) if rnd == 1 else None
    before, t0 = cpu_ticks(pid), time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    if spy is not None:
        if args.strace:
            spy.send_signal(2)
        spy.wait()
    after, t1 = cpu_ticks(pid), time.monotonic()
    if args.h2:
        parsed = parse_h2load(out)
        requests = parsed.get("succeeded") or parsed["rps"] * args.duration
    else:
        parsed = parse_wrk(out)
        requests = parsed["requests"]
        if parsed["non_2xx_3xx"] or parsed.get("bytes_per_response", 2048) < 2048:
            print(f"  {name}: {parsed['non_2xx_3xx']} non-2xx/3xx, "
                  f"{parsed.get('bytes_per_response')} bytes per response")
    us = (after - before) / TCK * 1e6 / max(requests, 1)
    rps = requests / (t1 - t0)
    if args.strace and rnd == 1:
        print(f"  {name}: strace -c of {requests} requests in {args.strace}")
    label = "warm-up" if rnd == 0 else f"round {rnd}"
    print(f"{label:8} {name:8} {requests:8d} req {rps:9,.0f} req/s "
          f"{us:7.1f} us/req  cpu {100 * (after - before) / TCK / (t1 - t0):.0f} %",
          flush=True)
    return us, rps


def main(argv: list[str]) -> int:
    args = arguments(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-tlscpu-"))
    procs = Processes(tmp)
    cpus = sorted(os.sched_getaffinity(0))
    proxy_cpu, load_cpu = (str(cpus[0]), str(cpus[1])) if len(cpus) >= 2 else (None, None)
    certificate = make_certificate(tmp)
    results: dict[str, list[tuple[float, float]]] = {}
    stack = contextlib.ExitStack()
    try:
        up = free_port()
        upstream = start_nginx(procs, tmp, "upstream", upstream_conf(tmp, up), load_cpu)
        wait_port(up, upstream)
        ports = {spec: free_port() for spec in args.tree}
        provider = None
        if args.auth:  # one provider that every tree's gateway signs in with
            peers, _ = import_peers()
            op = stack.enter_context(peers.oidc_provider(tmp, redirect_uris=[
                f"{'http' if spec.endswith(':plain') or args.plain else 'https'}://auth.test:"
                f"{port}/oauth2/callback" for spec, port in ports.items()]))
            provider = AuthProvider(op.issuer, op.client_id, op.client_secret)
        gateways, headers = start_gateways(args, procs, tmp, up, certificate, provider, ports,
                                           proxy_cpu)
        if args.idle:
            raise_nofile(2 * args.idle + 1000)
            for name, (proc, port, scheme) in gateways.items():
                idle_memory(name, port, lambda p=proc: [p.pid], args.idle, 120.0, "/ping",
                            opener=None if scheme == "http" else open_idle_tls)
        runs = [(name, name, headers[name]) for name in gateways]
        if args.public_too and provider is not None:
            # the public route: the same request without the signed-in Host and Cookie
            runs = [r for name in gateways for r in (
                (name, name, headers[name]), (name, f"{name}/public", headers[name][4:]))]
        results = {name: [] for _, name, _ in runs}
        for rnd in range(args.rounds + 1):  # round 0 warms up
            for gw_name, name, extra in runs:
                proc, port, scheme = gateways[gw_name]
                row = measure(args, proc.pid, load_command(args, scheme, port, extra,
                                                           load_cpu), name, rnd)
                if rnd:
                    results[name].append(row)
        for name, rows in ((n, r) for n, r in results.items() if r):
            print(f"median {name:8} {statistics.median(r[0] for r in rows):7.1f} us/req "
                  f"{statistics.median(r[1] for r in rows):9,.0f} req/s   "
                  f"best {min(r[0] for r in rows):7.1f} us/req")
    finally:
        procs.stop_all()
        stack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
