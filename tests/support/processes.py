"""Start real processes for tests, wait until they are ready, and stop them by PID.

Everything here is stdlib only and bounded: every wait has a deadline, every poll loop
has a maximum number of rounds, and a started process is always stopped (by the context
manager, by :meth:`ManagedProcess.stop`, or, as a last resort, at interpreter exit).

Network helpers refuse non-loopback targets: tests only ever talk to 127.0.0.0/8 or ::1.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import ipaddress
import math
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

__all__ = [
    "ManagedProcess",
    "ProcessError",
    "free_port",
    "http_ok",
    "is_loopback",
    "loopback_opener",
    "pid_alive",
    "port_open",
    "wait_for_port",
    "wait_until",
]

#: How many trailing log lines an error message quotes.
LOG_TAIL_LINES = 40
#: How many bytes at most are read from the end of a log for the tail / line search.
_LOG_READ_LIMIT = 256 * 1024
#: How many bytes at most are scanned from the start of a log for a line prefix.
_LOG_SCAN_LIMIT = 16 * 1024 * 1024
#: Upper bound for the number of rounds of any poll loop in this module.
_MAX_ROUNDS = 100_000

_PR_SET_PDEATHSIG = 1


class ProcessError(RuntimeError):
    """A managed process failed to start, died, or did not become ready in time."""


# --------------------------------------------------------------------------- helpers


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (the only allowed traffic targets)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _require_loopback(host: str) -> None:
    if not is_loopback(host):
        raise ValueError(f"refusing non-loopback address {host!r}: tests only use 127.0.0.1/::1")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now (the kernel picks it).

    There is an unavoidable race between closing this probe socket and the peer binding
    the port; :mod:`tests.support.peers` retries on "address in use".
    """
    _require_loopback(host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host.strip("[]"), 0))
        port: int = sock.getsockname()[1]
    return port


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    _require_loopback(host)
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    *,
    interval: float = 0.05,
    what: str = "condition",
) -> None:
    """Poll ``check`` until it returns True; raise :class:`TimeoutError` after ``timeout``.

    ``OSError`` raised by ``check`` counts as "not yet". The loop is bounded both by the
    deadline and by a maximum number of rounds.
    """
    deadline = time.monotonic() + timeout
    rounds = min(_MAX_ROUNDS, math.ceil(timeout / max(interval, 0.001)) + 2)
    for _ in range(rounds):
        with contextlib.suppress(OSError):
            if check():
                return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
    raise TimeoutError(f"{what} not met within {timeout:.1f}s")


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Wait until ``host:port`` accepts TCP connections; raise TimeoutError otherwise."""
    _require_loopback(host)
    wait_until(
        lambda: port_open(host, port, timeout=min(0.5, max(timeout, 0.01))),
        timeout,
        what=f"TCP port {host}:{port} open",
    )


class _LoopbackRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to loopback hosts (anything else ends in an HTTPError)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if not is_loopback(urllib.parse.urlsplit(newurl).hostname or ""):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def loopback_opener(*handlers: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
    """A urllib opener that ignores http(s)_proxy settings (peers live on loopback) and
    follows redirects only to loopback hosts. Extra ``handlers`` are added as given."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _LoopbackRedirectHandler(), *handlers
    )


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True if GET ``url`` answers a 2xx status (redirects followed) within ``timeout``."""
    host = urllib.parse.urlsplit(url).hostname or ""
    _require_loopback(host)
    try:
        with loopback_opener().open(url, timeout=timeout) as resp:
            status: int = resp.status
            return 200 <= status < 300
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return False


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int) -> bool:
    """True if a process with ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    # state is the field after the parenthesised command name
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return state != ["Z"]


def _read_head_bytes(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(limit)
    except FileNotFoundError:
        return b""


def _read_tail_bytes(path: Path, limit: int = _LOG_READ_LIMIT) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read(limit)
    except FileNotFoundError:
        return b""


# ----------------------------------------------------------------------- processes

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child
    """Child-side: ask Linux to SIGTERM us if the parent (thread) dies without cleanup."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class ManagedProcess:
    """One child process whose stdout+stderr go to a log file under ``log_dir``.

    ``env`` entries are laid over ``os.environ`` (or used alone with
    ``inherit_env=False``). The child gets its own session (Ctrl-C in the terminal does
    not reach it directly; :meth:`stop` does) and, with ``die_with_parent`` (Linux), is
    sent SIGTERM by the kernel if the thread that started it dies: start it from a
    thread that outlives it (the main thread, in pytest).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_dir: Path,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        inherit_env: bool = True,
        die_with_parent: bool = True,
    ) -> None:
        if not argv:
            raise ValueError("argv must not be empty")
        self.argv: tuple[str, ...] = tuple(str(a) for a in argv)
        self.name: str = name or Path(self.argv[0]).name
        self.cwd: Path | None = cwd
        self.env: dict[str, str] = dict(os.environ) if inherit_env else {}
        if env:
            self.env.update(env)
        self.die_with_parent = die_with_parent
        self.log_dir = Path(log_dir)
        self.log_path: Path = self._pick_log_path()
        self._popen: subprocess.Popen[bytes] | None = None

    def _pick_log_path(self) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name) or "process"
        for i in range(1000):
            candidate = self.log_dir / (f"{safe}.log" if i == 0 else f"{safe}-{i}.log")
            if not candidate.exists():
                return candidate
        raise ProcessError(f"no free log file name for {safe!r} in {self.log_dir}")

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} running={self.running}>"

    # -- state

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status once the process has ended (negative: killed by that signal)."""
        return self._popen.poll() if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    # -- log

    def log_text(self) -> str:
        """The (last 256 KiB of the) log, decoded leniently."""
        return _read_tail_bytes(self.log_path).decode("utf-8", errors="replace")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def find_log_line(self, prefix: str) -> str | None:
        """The first complete log line starting with ``prefix`` (without newline), if any
        (searches the first 16 MiB of the log)."""
        data = _read_head_bytes(self.log_path, _LOG_SCAN_LIMIT).decode("utf-8", errors="replace")
        complete = data[: data.rfind("\n") + 1]
        for line in complete.splitlines():
            if line.startswith(prefix):
                return line
        return None

    def describe(self) -> str:
        status = "running" if self.running else f"exited with {self.returncode}"
        return (
            f"{self.name} (pid {self.pid}, {status}); argv={list(self.argv)!r}; "
            f"log {self.log_path}, last lines:\n{self.log_tail()}"
        )

    # -- lifecycle

    def start(self) -> Self:
        if self._popen is not None:
            raise ProcessError(f"{self.name} was already started (pid {self.pid})")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        preexec = _set_parent_death_signal if self.die_with_parent else None
        with self.log_path.open("ab") as log:
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=preexec,  # only a prctl() call, takes no locks
                )
            except OSError as exc:
                raise ProcessError(f"cannot start {self.name}: {self.argv!r}: {exc}") from exc
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    def wait_ready(
        self,
        check: Callable[[], bool],
        timeout: float,
        *,
        interval: float = 0.05,
    ) -> None:
        """Poll ``check`` until True. Raise :class:`ProcessError` with the log tail if the
        process exits first or ``timeout`` seconds pass. ``OSError`` from ``check`` counts
        as "not ready yet"."""
        if self._popen is None:
            raise ProcessError(f"{self.name} was not started")
        popen = self._popen
        start = time.monotonic()

        def ready() -> bool:
            if popen.poll() is not None:
                raise ProcessError(f"{self.name} died before it was ready: {self.describe()}")
            return check()

        try:
            wait_until(ready, timeout, interval=interval, what=f"{self.name} ready")
        except TimeoutError:
            ready()  # a death during the last interval is the better message
            raise ProcessError(
                f"{self.name} not ready after {time.monotonic() - start:.1f}s "
                f"(timeout {timeout:.1f}s): {self.describe()}"
            ) from None

    def wait_for_log_line(self, prefix: str, timeout: float) -> str:
        """Wait for a log line starting with ``prefix`` and return it."""
        found: list[str] = []

        def check() -> bool:
            line = self.find_log_line(prefix)
            if line is None:
                return False
            found.append(line)
            return True

        self.wait_ready(check, timeout)
        return found[0]

    def stop(self, timeout: float = 10.0, kill_timeout: float = 5.0) -> int | None:
        """SIGTERM the PID, wait up to ``timeout`` s, then SIGKILL and wait ``kill_timeout``.

        Idempotent. Returns the exit status (None if never started). Raises
        :class:`ProcessError` only if the process survives SIGKILL.
        """
        popen = self._popen
        if popen is None:
            return None
        try:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(popen.pid, signal.SIGTERM)
                try:
                    popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(popen.pid, signal.SIGKILL)
                    try:
                        popen.wait(timeout=kill_timeout)
                    except subprocess.TimeoutExpired as exc:
                        raise ProcessError(
                            f"{self.name} (pid {popen.pid}) survived SIGKILL"
                        ) from exc
            return popen.returncode
        finally:
            if popen.poll() is not None:
                with _LIVE_LOCK:
                    _LIVE.discard(self)

    def __enter__(self) -> Self:
        if self._popen is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@atexit.register
def _stop_leftovers() -> None:
    """Last resort: stop every process a test forgot (bounded: short waits each)."""
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for proc in leftovers:
        with contextlib.suppress(Exception):
            proc.stop(timeout=3.0, kill_timeout=2.0)
