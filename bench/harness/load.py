"""wrk and h2load runs: their command lines, their output parsed, and the warm-up,
repeats and medians of each target, the targets' runs alternating (``Bench.interleaved``)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .procs import Processes, set_pdeathsig
from .sample import CpuWindow, PeakRss

CONNECTIONS = 50


def to_ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", value)
    if not m:
        raise ValueError(f"unexpected time value {value!r}")
    x = float(m.group(1))
    return {"us": x / 1000, "ms": x, "s": x * 1000}[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    r: dict[str, Any] = {}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(f"could not parse wrk output:\n{out}")
    r["rps"] = float(m.group(1))
    for pct, value in re.findall(r"^\s+(50|75|90|99)(?:\.000)?%\s+(\S+)\s*$", out, re.M):
        r[f"p{pct}_ms"] = to_ms(value)
    m = re.search(r"(\d+) requests in", out)
    r["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"\d+ requests in \S+, ([\d.]+)([KMGT]?B) read", out)
    if m and r["requests"]:
        scale = 1024 ** "BKMGT".index(m.group(2)[0])
        # responses carrying the 2 KiB body: > BODY_LEN (a redirect or error page: less)
        r["bytes_per_response"] = round(float(m.group(1)) * scale / r["requests"])
    m = re.search(r"Socket errors: (.*)", out)
    r["socket_errors"] = m.group(1).strip() if m else ""
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non_2xx_3xx"] = int(m.group(1)) if m else 0
    return r


def parse_h2load(out: str) -> dict[str, Any]:
    r: dict[str, Any] = {}
    m = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", out)
    if not m:
        raise RuntimeError(f"could not parse h2load output:\n{out}")
    # h2load falls back to HTTP/1.1 when ALPN picks it: an HTTP/2 row must be HTTP/2
    # (the TLS rows once measured a gateway whose codec_type was http1)
    m2 = re.search(r"Application protocol: (\S+)", out)
    if m2 and m2.group(1) not in ("h2", "h2c"):
        raise RuntimeError(f"h2load spoke {m2.group(1)}, not HTTP/2:\n{out}")
    r["rps"] = float(m.group(1))
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored", out)
    if m:
        r.update(total=int(m.group(1)), done=int(m.group(2)), succeeded=int(m.group(3)),
                 failed=int(m.group(4)), errored=int(m.group(5)))
    m = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
    if m:
        r.update(min_ms=to_ms(m.group(1)), max_ms=to_ms(m.group(2)),
                 mean_ms=to_ms(m.group(3)), sd_ms=to_ms(m.group(4)))
    return r


def shown_cmd(argv: Sequence[str]) -> str:
    """The command line for the JSON, with cookie values (and tokens) replaced by their
    length."""
    def redact(a: str) -> str:
        if a.lower().startswith("authorization:"):
            scheme, _, value = a.split(":", 1)[1].strip().partition(" ")
            return f"Authorization: {scheme} <{len(value)} chars>"
        if not a.lower().startswith("cookie:"):
            return a
        return "Cookie: " + "; ".join(
            f"{k.strip()}=<{len(v)} chars>" for k, _, v in
            (c.partition("=") for c in a.split(":", 1)[1].split(";")))
    return " ".join(redact(a) if " " not in a else repr(redact(a)) for a in argv)


@dataclass
class Target:
    """A proxy under test: its port, the PIDs to sample and how to reach it."""

    name: str
    port: int
    pids: Callable[[], list[int]]
    headers: tuple[str, ...] = ()  # extra wrk -H headers (Host, Cookie)
    scheme: str = "http"  # https: the TLS section (bench/tls.py)
    streams: int | None = None  # h2load -m; None: --h2-streams
    script: str = ""  # wrk -s: a Lua script (the MCP rows' POST)


class Bench:
    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        self.args = args
        self.procs = procs
        cpus = sorted(os.sched_getaffinity(0))
        self.pinned = len(cpus) >= 2 and shutil.which("taskset") is not None
        self.proxy_cpu = str(cpus[0]) if self.pinned else None
        self.load_cpu = str(cpus[1]) if self.pinned else None
        self.upstream_pids: list[int] = []
        self.provider_pids: list[int] = []  # the OIDC provider: ours, not "other processes"

    def load_run(self, argv: list[str], duration: float, groups: dict[str, list[int]],
                 sample_pids: list[int]) -> tuple[str, dict[str, Any], int]:
        """Run one wrk/h2load (pinned with the upstream), with CPU and RSS sampling."""
        if self.load_cpu is not None:
            argv = ["taskset", "-c", self.load_cpu, *argv]
        groups = {**groups, "harness": [os.getpid()]}
        if self.provider_pids:
            groups["oidc"] = self.provider_pids
        with CpuWindow(groups) as window, PeakRss(sample_pids) as peak:
            popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True,
                                     preexec_fn=set_pdeathsig)
            try:
                out, _ = popen.communicate(timeout=duration + 30)
            finally:
                if popen.poll() is None:
                    popen.kill()
                    popen.wait(5)
        info = window.result(popen.pid)
        if popen.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {popen.returncode}:\n{out}")
        return out, info, peak.peak

    def wrk(self, target: Target, duration: float) -> dict[str, Any]:
        argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration:g}s", "--latency"]
        for h in target.headers:
            argv += ["-H", h]
        if target.script:
            argv += ["-s", target.script]
        argv.append(f"{target.scheme}://127.0.0.1:{target.port}/")
        pids = target.pids()
        out, info, peak = self.load_run(
            argv, duration, {"proxy": pids, "upstream": self.upstream_pids}, pids)
        return {**parse_wrk(out), **info, "peak_rss_kib": peak, "cmd": shown_cmd(argv)}

    def h2load(self, target: Target, duration: float) -> dict[str, Any]:
        if target.headers:
            raise ValueError("h2load runs take no extra headers")
        streams = target.streams or self.args.h2_streams
        argv = ["h2load", "-t1", f"-c{CONNECTIONS}", f"-m{streams}",
                f"-D{duration:g}", f"{target.scheme}://127.0.0.1:{target.port}/"]
        pids = target.pids()
        out, info, peak = self.load_run(
            argv, duration, {"proxy": pids, "upstream": self.upstream_pids}, pids)
        return {**parse_h2load(out), **info, "peak_rss_kib": peak, "cmd": " ".join(argv)}

    def interleaved(self, targets: Sequence[Target],
                    run: Callable[[Target, float], dict[str, Any]],
                    keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per target, 1 warm-up + ``repeat`` clean runs (up to 2 x repeat attempts) and
        their medians, the targets' runs alternating (nginx, gateway, nginx, ...): this
        VM's neighbours move a proxy's req/s by up to 40 % within minutes, and
        back-to-back runs see the same neighbours, where one target's three runs followed
        by the other's did not. Each target's result also lists its ``paired`` ratios to
        the first target (run i of each, back to back)."""
        a = self.args
        warm: dict[str, dict[str, Any]] = {}
        for target in targets:
            print(f"  {target.name}: warm-up {a.warmup:g} s", flush=True)
            warm[target.name] = run(target, a.warmup)
        attempts: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}

        def wanting(target: Target) -> bool:
            tried = attempts[target.name]
            return len(tried) < 2 * a.repeat and sum(x["clean"] for x in tried) < a.repeat

        while any(wanting(t) for t in targets):
            for target in targets:
                if not wanting(target):
                    continue
                r = run(target, a.duration)
                attempts[target.name].append(r)
                note = "" if r["clean"] else (
                    f"  (disturbed: other processes {r['cpu%']['other_procs']} %, "
                    f"unaccounted {r['cpu%']['unaccounted']} %, top {r['top_other']})")
                print(f"  {target.name}: run {len(attempts[target.name])}: "
                      f"{r['rps']:,.0f} req/s, proxy CPU {r['cpu%']['proxy']} %{note}",
                      flush=True)
        out = {t.name: _summary(warm[t.name], attempts[t.name], keys, a.repeat)
               for t in targets}
        first = attempts[targets[0].name]
        for target in targets[1:]:
            pairs = zip(attempts[target.name], first, strict=False)
            out[target.name]["paired"] = [round(x["rps"] / y["rps"], 4) for x, y in pairs
                                          if x["clean"] and y["clean"] and y["rps"]]
        return out


def _summary(warm: dict[str, Any], attempts: list[dict[str, Any]], keys: Sequence[str],
             repeat: int) -> dict[str, Any]:
    """Medians of a target's clean runs (or of its least disturbed ones)."""
    runs = [x for x in attempts if x["clean"]]
    if len(runs) < repeat:  # not enough clean runs: the least disturbed ones
        runs = sorted(attempts, key=lambda x: x["cpu%"]["other_procs"]
                      + x["cpu%"]["unaccounted"])[:repeat]
    median = {k: statistics.median(x[k] for x in runs) for k in keys
              if all(k in x for x in runs)}
    median["proxy_cpu%"] = statistics.median(x["cpu%"]["proxy"] for x in runs)
    median["load_upstream_cpu%"] = statistics.median(
        x["cpu%"]["load"] + x["cpu%"]["upstream"] for x in runs)
    return {
        "median": median,
        "peak_rss_kib": max(x["peak_rss_kib"] for x in [warm, *attempts]),
        "clean_runs": sum(x["clean"] for x in runs),
        "used_runs": len(runs),
        "runs": runs, "attempts": attempts, "warmup": warm,
    }
