"""Soak test (issue 19): many concurrent clients, for a bounded time, against two gateway
daemons (plain HTTP and TLS, HTTP/1.1 and HTTP/2) in front of a real nginx, the echo
upstream, a websocket echo and a fault-injecting upstream, with sessions in Redis and
sign-in at node-oidc-provider, while components are killed and restarted and the config
is reloaded every few seconds.

    .venv/bin/python bench/soak.py                   # 60 s of traffic (CI: see tests)
    .venv/bin/python bench/soak.py --duration 1800   # the release run (30 minutes)

It prints a table (per scenario: requests, ok, expected errors by the fault that explains
them, unexplained outcomes, latency; the faults; sessions across the Redis restart; the
gateways' descriptors, memory, tracebacks and health probe) and exits 1 when anything is
unexplained, a request stalled, a traceback was logged, descriptors or memory grew, a
session was lost or the health probe failed; 2 when the environment could not be set up.
Everything listens on 127.0.0.1; see docs/development/benchmarks.md ("Soak").
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from harness.procs import Interrupted, signals_raise  # the benchmark harness's own
from soak_client import Ctx, Gate, Sessions
from soak_env import FILES, Env, FdSnapshot, SetupError, environment, fd_snapshot
from soak_faults import GRACE, Injector, Reloader, Sampler, make_schedule
from soak_http import H1, ConnectFailed, Exact
from soak_record import Recorder, Timeline
from soak_report import ProcessReport, Summary, report, scan_log, slope_per_minute
from soak_workers import (
    choose,
    max_in_flight,
    scenario_names,
    sign_in,
    start_workers,
    worker_count,
)

MIN_DURATION = 35.0
CLIENT_TIMEOUT = 20.0  # every client socket operation (route timeout 10 s + margin)
SETTLE = 80.0  # > the pool's idle timeout (60 s) + its reaper's period (15 s)
SETTLE_FROM = 600.0


def phases(duration: float) -> tuple[float, float, float]:
    """(warm-up, faults, calm) seconds: the warm-up is 15 % (8 to 120 s), the calm end
    10 % (5 to 60 s), the faults the rest."""
    warm = min(max(round(0.15 * duration), 8.0), 120.0)
    calm = min(max(round(0.10 * duration), 5.0), 60.0)
    return warm, duration - warm - calm, calm


def nginx_etags(env: Env) -> dict[str, str]:
    """The ETag nginx sends for each file (asked directly, on loopback)."""
    out = {}
    for path in FILES:
        conn = http.client.HTTPConnection("127.0.0.1", env.ports.nginx, timeout=10)
        try:
            conn.request("HEAD", path)
            resp = conn.getresponse()
            resp.read()
            etag = resp.getheader("ETag")
        finally:
            conn.close()
        if not etag:
            raise SetupError(f"nginx sent no ETag for {path}")
        out[path] = etag
    return out


def health(env: Env, kind: str) -> str:
    gw = env.gateways[kind]
    try:
        conn = H1(gw.port, 10.0, env.tls.h1 if kind == "tls" else None, "nginx.test")
    except ConnectFailed as exc:
        return f"no connection: {exc}"
    try:
        conn.send_request("GET", f"nginx.test:{gw.port}", "/healthz")
        read = conn.read_response("GET", Exact(b"OK\n"), time.monotonic())
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    o = read.outcome
    if o.error is None and o.status == 200:
        return "200 OK"
    return f"{o.status} {o.error or ''} {o.note}".strip()


def quiet_snapshot(env: Env, reloader: Reloader, limit: float = 10.0) -> dict[str, FdSnapshot]:
    """Descriptors and RSS of both gateways with no client connected: waits (up to
    ``limit``) until every client connection and CLOSE_WAIT socket is gone."""
    names = env.ports.upstream_names()
    with reloader.hold:
        time.sleep(1.0)
        end = time.monotonic() + limit
        while True:
            snaps = {}
            for kind, gw in env.gateways.items():
                assert gw.pid is not None
                snaps[kind] = fd_snapshot(gw.pid, gw.port, names)
            if all(s.downstream == 0 and s.close_wait == 0 for s in snaps.values()) or \
                    time.monotonic() > end:
                return snaps
            time.sleep(0.25)


def run(env: Env, args: argparse.Namespace) -> Summary:
    t0 = time.monotonic()
    warm, main, calm = phases(args.duration)
    rec = Recorder(t0)
    timeline = Timeline(GRACE)
    gate = Gate()
    ctx = Ctx(env, rec, gate, Sessions(), CLIENT_TIMEOUT, nginx_etags(env))
    for _ in range(3):
        outcome, cookie = sign_in(ctx)
        if cookie is None:
            raise SetupError(f"the first sign-ins failed: {outcome}")
        ctx.sessions.add(cookie)
    print(f"signed in 3 times as alice; starting {worker_count(args.scenarios)} client threads: "
          f"warm-up {warm:g} s, faults {main:g} s, calm {calm:g} s", flush=True)
    sampler = Sampler(env, t0)
    reloader = Reloader(ctx, args.reload_interval)
    injector = Injector(ctx, timeline, [], t0)
    try:
        return _traffic(env, args, ctx, sampler, reloader, injector, (warm, main, calm))
    finally:
        injector.release.set()  # the components it restarted may go now


def _traffic(env: Env, args: argparse.Namespace, ctx: Ctx, sampler: Sampler,
             reloader: Reloader, injector: Injector, phase: tuple[float, float, float]
             ) -> Summary:
    warm, main, calm = phase
    gate, rec, t0 = ctx.gate, ctx.rec, injector.t0
    stop = threading.Event()  # never set: an interruptible sleep
    sampler.start()
    reloader.start()
    start = time.monotonic()
    threads = start_workers(ctx, args.seed, args.scenarios)
    try:
        stop.wait(warm)
        if not gate.pause(60):
            raise RuntimeError("the workers did not pause within 60 s")
        warm_snaps = quiet_snapshot(env, reloader)
        for kind, snap in warm_snaps.items():
            print(f"  warm-up end, gateway {kind}: {snap.describe()}, RSS "
                  f"{snap.rss_kib / 1024:.1f} MiB", flush=True)
        gate.resume()
        main_start = time.monotonic()
        warm_end = main_start - t0
        injector.schedule = [] if args.no_faults else make_schedule(main_start, main)
        injector.start()
        stop.wait(max(0.0, main_start + main - time.monotonic()))
        injector.done.wait(max(0.0, main_start + main + 30 - time.monotonic()))
        print(f"  [{time.monotonic() - t0:6.1f} s] calm: no more faults", flush=True)
        stop.wait(max(0.0, main_start + main + calm - time.monotonic()))
    finally:
        traffic = time.monotonic() - start
        reloader.stop.set()
        injector.stop.set()
        gate.stop(90)
        for t in threads:
            t.join(5)
        reloader.join(15)
        injector.done.wait(30)
    end_snaps = quiet_snapshot(env, reloader)
    settled: dict[str, FdSnapshot] = {}
    if args.settle:
        print(f"  waiting {args.settle:g} s without traffic (idle upstream connections "
              "must close)", flush=True)
        time.sleep(args.settle)
        settled = quiet_snapshot(env, reloader)
    sampler.stop.set()
    sampler.join(5)
    rec.finish(timeline=injector.timeline)
    processes = []
    for kind, gw in env.gateways.items():
        assert gw.pid is not None
        series = sampler.series.get(kind, [])
        under_traffic = [(t, r) for t, r, _ in series if warm_end <= t <= warm_end + main + calm]
        processes.append(ProcessReport(
            kind, gw.pid, warm_snaps[kind], end_snaps[kind],
            max((r for _, r, _ in series), default=0), scan_log(gw.log_path),
            health(env, kind), settled.get(kind), slope_per_minute(under_traffic),
            gw.daemon.process.returncode))
    errors = [*ctx.harness_errors, *reloader.errors, *injector.errors]
    if any(t.is_alive() for t in threads):
        errors.append("client threads still running after the stop: "
                      + ", ".join(t.name for t in threads if t.is_alive()))
    return Summary(
        duration=args.duration, phases=phase, seed=args.seed,
        workers=worker_count(args.scenarios), in_flight=max_in_flight(args.scenarios),
        complete=args.scenarios is None and not args.no_faults, settle=args.settle,
        ports={"plain": env.ports.plain, "tls": env.ports.tls}, recorder=rec,
        timeline=injector.timeline, faults=injector.results, sessions=injector.sessions,
        reloads=reloader.count, processes=processes, harness_errors=errors, wall=traffic)


def summary_json(summary: Summary) -> dict[str, object]:
    stats = {name: {"requests": s.requests, "ok": s.ok, "expected": dict(s.expected),
                    "unexplained": s.unexplained, "stalls": s.stalls,
                    "max_wait_s": s.max_wait}
             for name, s in summary.recorder.stats.items()}
    return {
        "duration": summary.duration, "phases": summary.phases, "seed": summary.seed,
        "scenarios": stats,
        "faults": [vars(f) for f in summary.faults],
        "sessions": [vars(c) for c in summary.sessions],
        "processes": [{"kind": p.kind, "warm": vars(p.warm), "end": vars(p.end),
                       "rss_max_kib": p.rss_max_kib, "tracebacks": p.log.tracebacks,
                       "errors": dict(p.log.errors), "health": p.health}
                      for p in summary.processes],
        "unexplained": [vars(u) for u in summary.recorder.unexplained[:1000]],
        "failures": summary.failures(),
        "harness_errors": summary.harness_errors,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0,
                   help=f"seconds of traffic (>= {MIN_DURATION:g}; 1800 for a release)")
    p.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    p.add_argument("--reload-interval", type=float, default=3.0,
                   help="seconds between config rewrites")
    p.add_argument("--keep-tmp", action="store_true",
                   help="keep the temp dir (configs, logs) even when the soak passes")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    names = ", ".join(scenario_names())
    p.add_argument("--only", default="",
                   help=f"comma-separated scenarios to run, to chase one problem ({names}); "
                   "sign_in and health always run")
    p.add_argument("--skip", default="", help="comma-separated scenarios not to run")
    p.add_argument("--no-faults", action="store_true",
                   help="no component faults (config reloads and per-request faults still "
                   "happen)")
    p.add_argument("--settle", type=float, default=None,
                   help="seconds to wait without traffic at the end, then idle upstream "
                   "connections must be gone (the pool closes them after 60 s); default: "
                   f"{SETTLE:g} for runs of {SETTLE_FROM:g} s or more, else 0")
    args = p.parse_args(argv)
    if args.settle is None:
        args.settle = SETTLE if args.duration >= SETTLE_FROM else 0.0
    only, skip = ({x.strip() for x in v.split(",") if x.strip()} for v in (args.only, args.skip))
    unknown = (only | skip) - set(scenario_names())
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    args.scenarios = choose(only, skip)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard or (hard == resource.RLIM_INFINITY and soft < 4096):
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    tmp = Path(tempfile.mkdtemp(prefix="gateway-soak-"))
    print(f"temp dir {tmp}", flush=True)
    summary: Summary | None = None
    status = 1
    try:
        with signals_raise(), environment(tmp, args.seed) as env:
            summary = run(env, args)
    except SetupError as exc:
        print(f"\nsetup failed: {exc}", file=sys.stderr)
        status = 2
    except (KeyboardInterrupt, Interrupted) as exc:
        print(f"\ninterrupted ({str(exc) or 'SIGINT'}): stopped everything", file=sys.stderr)
        status = 130
    except Exception:
        print(f"\nthe soak itself failed:\n{traceback.format_exc()}", file=sys.stderr)
        status = 2
    if summary is not None:
        report(summary, sys.stdout)
        status = 1 if summary.failures() else 0
        if args.json:
            Path(args.json).write_text(json.dumps(summary_json(summary), indent=2,
                                                  default=str) + "\n")
    if args.keep_tmp:
        print(f"configs, logs and files kept in {tmp}")
    elif status != 0:  # keep what explains the failure, not the 81 MiB nginx served
        shutil.rmtree(tmp / "nginx" / "html", ignore_errors=True)
        print(f"configs and logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
