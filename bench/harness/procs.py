"""The processes the harness starts, each in its own session, stopped by PID (SIGTERM,
then SIGKILL after 5 s), newest first; and the signals that stop the harness itself."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType


class Interrupted(Exception):
    """Raised from a signal handler so that every ``finally`` runs."""


def set_pdeathsig() -> None:
    """In the child before exec: get SIGTERM if the harness dies without cleaning up."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Processes:
    """Every process the harness starts; stopped by PID, newest first."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def start(self, name: str, argv: Sequence[str], cpus: str | None = None,
              cwd: Path | None = None, env: dict[str, str] | None = None) -> Proc:
        if cpus is not None:
            argv = ["taskset", "-c", cpus, *argv]
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                list(argv), cwd=cwd or self.workdir, env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches only the harness, which stops them
                preexec_fn=set_pdeathsig,
            )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, grace: float = 5.0) -> None:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                proc.popen.send_signal(signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except Exception as exc:  # keep stopping the others
                print(f"warning: could not stop {proc.name} (pid {proc.pid}): {exc}",
                      file=sys.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: Proc, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n"
                               f"{proc.log_tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{proc.name} did not listen on 127.0.0.1:{port} in {timeout:.0f} s:\n"
                       f"{proc.log_tail()}")


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                out += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children")
                        .read_text().split()]
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its children (nginx: master + workers)."""
    return [pid, *children(pid)]


def raise_nofile(needed: int) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    # a shell starting us in the background sets SIGINT to "ignore": Ctrl-C must still stop us
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
