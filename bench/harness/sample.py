"""What the harness reads from /proc while a load run goes on: the proxies' RSS, the CPU
of the benchmark's own processes and of every other one, and whether the run was
disturbed."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TCK = os.sysconf("SC_CLK_TCK")

# A wrk/h2load run is "clean" when processes outside the benchmark used at most this much
# of a core and the box's busy time not explained by the benchmark's own processes is at
# most UNACCOUNTED_MAX (catches short-lived neighbours that /proc sampling misses).
OTHER_MAX = 5
UNACCOUNTED_MAX = 12


def status_kib(pid: int, field: str) -> int:
    """A ``Vm*`` line of /proc/PID/status in KiB (0 once the process is gone)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def total_rss_kib(pids: Sequence[int]) -> int:
    return sum(status_kib(p, "VmRSS") for p in pids)


def sample_rss(pids: Sequence[int], n: int, gap: float) -> int:
    """The largest of ``n`` samples of the summed VmRSS, ``gap`` seconds apart."""
    best = 0
    for i in range(n):
        if i:
            time.sleep(gap)
        best = max(best, total_rss_kib(pids))
    return best


class PeakRss:
    """Samples the summed VmRSS of ``pids`` every ``interval`` s in a thread."""

    def __init__(self, pids: Sequence[int], interval: float = 0.05) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, total_rss_kib(self.pids))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self.peak = max(self.peak, total_rss_kib(self.pids))


def ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


def all_ticks() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            t = ticks(int(entry))
            if t is not None:
                out[int(entry)] = t
    return out


def cpu_stat() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


@dataclass
class CpuWindow:
    """CPU use of the benchmark's groups and of everything else over one load run."""

    groups: dict[str, list[int]]
    t0: float = 0.0
    before_all: dict[int, int] = field(default_factory=dict)
    before_stat: list[int] = field(default_factory=list)
    before_groups: dict[str, int] = field(default_factory=dict)
    before_children: float = 0.0

    def __enter__(self) -> CpuWindow:
        self.before_all = all_ticks()
        self.before_stat = cpu_stat()
        self.before_groups = {g: sum(ticks(p) or 0 for p in v) for g, v in self.groups.items()}
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.before_children = ru.ru_utime + ru.ru_stime
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def result(self, load_pid: int | None) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        after_children = ru.ru_utime + ru.ru_stime
        after_groups = {g: sum(ticks(p) or 0 for p in v) for g, v in self.groups.items()}
        after_all, after_stat = all_ticks(), cpu_stat()
        cpu: dict[str, int] = {
            g: round(100 * (after_groups[g] - self.before_groups[g]) / TCK / elapsed)
            for g in self.groups
        }
        # the load generator has exited: its CPU shows up in RUSAGE_CHILDREN
        cpu["load"] = round(100 * (after_children - self.before_children) / elapsed)
        mine = {p for v in self.groups.values() for p in v}
        if load_pid is not None:
            mine.add(load_pid)
        foreign = [(t - self.before_all.get(p, 0), p) for p, t in after_all.items()
                   if p not in mine]
        cpu["other_procs"] = round(100 * sum(t for t, _ in foreign) / TCK / elapsed)
        d = [a - b for a, b in zip(after_stat, self.before_stat, strict=False)]
        cpu["box_busy"] = round(100 * (d[0] + d[1] + d[2] + d[5] + d[6]) / TCK / elapsed)
        cpu["unaccounted"] = cpu["box_busy"] - sum(
            v for k, v in cpu.items() if k not in ("box_busy",)
        )
        top = [f"{comm(p)}:{round(100 * t / TCK / elapsed)}%"
               for t, p in sorted(foreign, reverse=True)[:3] if t > 0]
        clean = cpu["other_procs"] <= OTHER_MAX and cpu["unaccounted"] <= UNACCOUNTED_MAX
        return {"cpu%": cpu, "top_other": top, "clean": clean}
