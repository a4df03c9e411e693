"""What every soak scenario is built from: the gate that runs and pauses the workers, the
signed-in sessions they share, a worker's context (``Ctx``), the requests they ask for
(``Ask`` and its builders) and one exchange on an HTTP/1.1 connection, recorded."""


from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from soak_env import FILES, SMALL_BODY, Env
from soak_http import (
    H1,
    Body,
    ConnectFailed,
    EchoJson,
    Empty,
    Exact,
    FileBody,
    Pattern,
    Upload,
    failed_connect,
)
from soak_record import (
    Outcome,
    Recorder,
    Req,
)

MIB = 1 << 20


class Gate:
    """Lets workers run, pauses them (all idle, their connections closed) or stops them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = True
        self._stopped = False
        self.active = 0

    @property
    def closing(self) -> bool:
        return not self._open

    def enter(self) -> bool:
        with self._cond:
            while not self._open and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return False
            self.active += 1
            return True

    def leave(self) -> None:
        with self._cond:
            self.active -= 1
            self._cond.notify_all()

    def pause(self, timeout: float) -> bool:
        """Close the gate and wait until no worker is inside; False on timeout."""
        with self._cond:
            self._open = False
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self.active == 0, timeout)

    def resume(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def stop(self, timeout: float) -> bool:
        with self._cond:
            self._stopped = True
            self._open = False
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self.active == 0, timeout)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up as soon as the gate closes."""
        with self._cond:
            self._cond.wait_for(lambda: not self._open, seconds)


class Sessions:
    """Session cookies from sign-ins (name=value), with when each was made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cookies: list[str] = []
        self.made: dict[str, float] = {}

    def add(self, cookie: str) -> None:
        with self._lock:
            self.cookies.append(cookie)
            self.made[cookie] = time.monotonic()

    def pick(self, rng: random.Random) -> str | None:
        with self._lock:
            return rng.choice(self.cookies) if self.cookies else None

    def age(self, cookie: str) -> float:
        """Seconds since the sign-in that made ``cookie``."""
        with self._lock:
            return time.monotonic() - self.made.get(cookie, time.monotonic())

    def made_before(self, t: float) -> list[str]:
        with self._lock:
            return [c for c in self.cookies if self.made[c] < t]


@dataclass
class Ctx:
    env: Env
    rec: Recorder
    gate: Gate
    sessions: Sessions
    timeout: float
    etags: dict[str, str]
    harness_errors: list[str] = field(default_factory=list)

    def h1_target(self, rng: random.Random) -> tuple[str, int]:
        kind = rng.choice(("plain", "tls"))
        return kind, self.env.gateways[kind].port

    def h1(self, kind: str, server_name: str, rcvbuf: int = 0) -> H1:
        gw = self.env.gateways[kind]
        return H1(gw.port, self.timeout, self.env.tls.h1 if kind == "tls" else None,
                  server_name, rcvbuf)

    def authority(self, host: str, kind: str) -> str:
        return f"{host}:{self.env.gateways[kind].port}"


# --------------------------------------------------------------------------------------
# what to ask for


@dataclass
class Ask:
    """One request: what to send and how to judge the answer."""

    method: str
    host: str  # route host without port
    path: str
    status: int
    body: Callable[[], Body]
    deps: tuple[str, ...]
    headers: list[tuple[str, str]] = field(default_factory=list)
    upload: Upload | None = None
    head_length: int | None = None
    fault: str | None = None
    note: str = ""  # shown with an unexplained outcome

    def req(self, scenario: str, via: str, deps: tuple[str, ...] | None = None) -> Req:
        """``via``: the listener (plain, tls, plain h2, tls h2)."""
        return Req(scenario, f"{self.method} {self.host}{_short(self.path)} [{via}]",
                   self.status, self.deps if deps is None else deps, self.fault, self.note)


def _short(path: str) -> str:
    """Group labels: /bytes/12345 -> /bytes/N."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-1].isdigit():
        parts[-1] = "N"
    return "/".join(parts)


def nginx_small() -> Ask:
    return Ask("GET", "nginx.test", "/", 200, lambda: Exact(SMALL_BODY), ("nginx",))


def nginx_empty() -> Ask:
    return Ask("GET", "nginx.test", "/empty", 204, Empty, ("nginx",))


def nginx_head(path: str = "/16m") -> Ask:
    return Ask("HEAD", "nginx.test", path, 200, Empty, ("nginx",), head_length=FILES[path])


def nginx_304(ctx: Ctx, path: str = "/1m") -> Ask:
    return Ask("GET", "nginx.test", path, 304, Empty, ("nginx",),
               headers=[("If-None-Match", ctx.etags[path])])


def nginx_file(ctx: Ctx, path: str) -> Ask:
    mm = ctx.env.files.maps[path]
    return Ask("GET", "nginx.test", path, 200, lambda: FileBody(mm), ("nginx",))


def echo_bytes(n: int) -> Ask:
    return Ask("GET", "echo.test", f"/bytes/{n}", 200, lambda: Pattern(n), ("echo",))


def echo_head(n: int) -> Ask:
    return Ask("HEAD", "echo.test", f"/bytes/{n}", 200, Empty, ("echo",), head_length=n)


def echo_204() -> Ask:
    return Ask("GET", "echo.test", "/status/204", 204, Empty, ("echo",))


def echo_post(rng: random.Random, size: int, chunked: bool, piece: int = 0,
              pause: float = 0.0) -> Ask:
    up = Upload(rng.randbytes(size), chunked, piece, pause)
    method = rng.choice(("POST", "PUT"))
    sha = up.sha256
    return Ask(method, "echo.test", "/upload", 200, lambda: EchoJson(method, size, sha),
               ("echo",), upload=up)


def signed_in(ctx: Ctx, cookie: str, path: str = "/") -> Ask:
    if path == "/":
        body: Callable[[], Body] = lambda: Exact(SMALL_BODY)  # noqa: E731
    else:
        mm = ctx.env.files.maps[path]
        body = lambda: FileBody(mm)  # noqa: E731
    return Ask("GET", "app.test", path, 200, body, ("nginx", "redis"),
               headers=[("Cookie", cookie), ("Accept", "text/html")],
               note=f"session signed in {ctx.sessions.age(cookie):.1f} s before, "
                    f"cookie ...{cookie[-8:]}")


FAULTS = ("close-mid-body", "reset-mid-body", "chunked-mid-body", "close-before-headers",
          "reset-before-headers", "hang")


def fault(kind: str, n: int) -> Ask:
    path = f"/{kind}/{n}" if kind.endswith("mid-body") else f"/{kind}"
    return Ask("GET", "fault.test", path, 200, lambda: Pattern(n), ("fault",), fault=kind)


def fault_ok(n: int) -> Ask:
    return Ask("GET", "fault.test", f"/ok/{n}", 200, lambda: Pattern(n), ("fault",))


def large_size(rng: random.Random) -> int:
    """1 to 64 MiB, mostly the smaller end."""
    return rng.choice((1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB)) \
        - rng.randrange(0, 4096)


# --------------------------------------------------------------------------------------
# HTTP/1.1 exchanges


def exchange(ctx: Ctx, conn: H1, scenario: str, ask: Ask, kind: str, *,
             slow: tuple[int, float] | None = None, stop_after: int | None = None,
             want_headers: dict[str, str] | None = None) -> Outcome:
    """Send one request on ``conn``, read and record its answer."""
    t0 = time.monotonic()
    send_error = ""
    try:
        conn.send_request(ask.method, ctx.authority(ask.host, kind), ask.path, ask.headers,
                          ask.upload)
    except OSError as exc:  # the gateway may have answered (and closed) early: read it
        send_error = f"send: {type(exc).__name__}: {exc}"
    read = conn.read_response(ask.method, ask.body(), t0, status=ask.status,
                              head_length=ask.head_length, slow=slow, stop_after=stop_after,
                              want_headers=want_headers)
    outcome = read.outcome
    if send_error and not outcome.note:
        outcome = Outcome(outcome.status, outcome.error, outcome.received, outcome.wait,
                          outcome.elapsed, send_error)
    ctx.rec.record(ask.req(scenario, kind), outcome, t0)
    return outcome


def open_h1(ctx: Ctx, scenario: str, kind: str, host: str, rcvbuf: int = 0) -> H1 | None:
    t0 = time.monotonic()
    try:
        return ctx.h1(kind, host, rcvbuf)
    except ConnectFailed as exc:
        ctx.rec.record(Req(scenario, f"connect [{kind}]", 0), failed_connect(exc, t0), t0)
        ctx.gate.sleep(0.5)
        return None


def small_mix(ctx: Ctx, rng: random.Random) -> Ask:
    pick = rng.random()
    if pick < 0.35:
        return nginx_small()
    if pick < 0.45:
        return nginx_empty()
    if pick < 0.55:
        return nginx_head(rng.choice(tuple(FILES)))
    if pick < 0.65:
        return nginx_304(ctx, rng.choice(tuple(FILES)))
    if pick < 0.75:
        return echo_204()
    if pick < 0.85:
        return echo_head(rng.randrange(0, 64 * MIB))
    return echo_bytes(rng.randrange(0, 64 * 1024))
