"""What happens to the soak while it runs: component faults on a schedule, a config
reload every few seconds, and a sampler of the gateways' descriptors and memory."""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from soak_client import Ctx
from soak_env import SMALL_BODY, Env, fd_count, gateway_config, rss_kib
from soak_http import H1, ConnectFailed, Empty, Exact
from soak_record import BAD_HEADERS, Outcome, Req, Timeline
from soak_workers import sign_in

#: How long after a component is back its outage still explains a failure (seconds).
#: Upstreams: requests that were in flight, or an idle pooled connection the gateway
#: took in the same instant it died. Redis: the gateway's reconnect plus the change
#: stream poll (0.5 s) and its 2 s distrust; the identity provider: the sign-in flow
#: that started while it was down (several round trips).
GRACE = {"nginx": 2.0, "echo": 2.0, "ws": 2.0, "fault": 2.0, "redis": 5.0, "idp": 5.0}
RECOVERY_LIMIT = 20.0  # a component not usable through the gateway by then: a failure


@dataclass
class FaultResult:
    name: str
    at: float  # seconds since the soak started
    down: float
    recovered_after: float | None = None  # seconds after the component was back
    problem: str = ""


@dataclass
class SessionCheck:
    at: float
    before: int  # live sessions in Redis before the kill
    after: int  # ... after the restart
    lost: int  # ids present before and gone after
    cookies_checked: int = 0
    cookies_failed: int = 0
    detail: str = ""


# --------------------------------------------------------------------------------------
# probes through the plain gateway


def _probe_once(ctx: Ctx, host: str, path: str, status: int, body: bytes | None,
                headers: list[tuple[str, str]] | None = None) -> bool:
    port = ctx.env.gateways["plain"].port
    try:
        conn = H1(port, 10.0)
    except ConnectFailed:
        return False
    try:
        conn.send_request("GET", f"{host}:{port}", path, headers or [])
        read = conn.read_response("GET", Exact(body) if body is not None else Empty(),
                                  time.monotonic())
        return read.outcome.error is None and read.outcome.status == status
    except OSError:
        return False
    finally:
        conn.close()


def probe_for(ctx: Ctx, component: str) -> Callable[[], bool]:
    if component == "nginx":
        return lambda: _probe_once(ctx, "nginx.test", "/", 200, SMALL_BODY)
    if component == "echo":
        return lambda: _probe_once(ctx, "echo.test", "/status/204", 204, None)
    if component == "redis":
        def signed_in() -> bool:
            cookie = ctx.sessions.pick(random.Random())
            return cookie is not None and _probe_once(
                ctx, "app.test", "/", 200, SMALL_BODY, [("Cookie", cookie)])
        return signed_in
    if component == "idp":
        def signs_in() -> bool:
            outcome, cookie = sign_in(ctx)
            if cookie is not None:
                ctx.sessions.add(cookie)
            return outcome.error is None
        return signs_in
    raise ValueError(component)


def wait_recovered(check: Callable[[], bool], since: float, stop: threading.Event
                   ) -> float | None:
    deadline = since + RECOVERY_LIMIT
    while time.monotonic() < deadline and not stop.is_set():
        if check():
            return time.monotonic() - since
        time.sleep(0.2)
    return None


# --------------------------------------------------------------------------------------
# sessions in Redis


def live_sessions(env: Env) -> set[str]:
    """Ids of session records in Redis that are not tombstones."""
    with env.redis_client() as client:
        reply = client.command("HGETALL", "{gateway}:records:session")
    items = reply if isinstance(reply, list) else []
    out = set()
    for key, value in zip(items[::2], items[1::2], strict=True):
        parts = bytes(value).split(b"|") if isinstance(value, bytes) else []
        if len(parts) >= 5 and parts[4]:
            out.add(bytes(key).decode() if isinstance(key, bytes) else str(key))
    return out


# --------------------------------------------------------------------------------------
# the fault injector


@dataclass
class Injector:
    ctx: Ctx
    timeline: Timeline
    schedule: list[tuple[float, str]]  # (monotonic time, fault name)
    t0: float
    stop: threading.Event = field(default_factory=threading.Event)
    #: The thread that restarted a component must outlive it (the children get
    #: PR_SET_PDEATHSIG, which fires when the *thread* that forked them ends): it waits
    #: for this before it returns.
    release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    results: list[FaultResult] = field(default_factory=list)
    sessions: list[SessionCheck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    #: seconds each component stays down
    DOWN = {"echo restart": 1.0, "nginx restart": 1.0, "redis kill": 3.0, "idp down": 4.0}

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="injector", daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        for at, name in self.schedule:
            if self.stop.wait(max(0.0, at - time.monotonic())):
                break
            try:
                self.results.append(self._fault(name))
            except Exception:
                self.errors.append(f"{name}: {traceback.format_exc()}")
        self.done.set()
        self.release.wait()

    def _fault(self, name: str) -> FaultResult:
        env = self.ctx.env
        down = self.DOWN[name]
        component = name.split()[0]
        comp = env.components()[component]
        result = FaultResult(name, time.monotonic() - self.t0, down)
        print(f"  [{result.at:6.1f} s] fault: {name} ({down:g} s)", flush=True)
        check: SessionCheck | None = None
        before: set[str] = set()
        cookies: list[str] = []
        if component == "redis":
            before = live_sessions(env)
            cookies = self.ctx.sessions.made_before(time.monotonic())
        window = self.timeline.open(component, name.split()[1] if component != "idp"
                                    else "down")
        if component == "idp":
            comp.stop()
        else:
            comp.kill(group=component == "nginx")
        self.stop.wait(down)
        try:
            comp.start()
        except Exception as exc:
            result.problem = f"did not start again: {exc}"[:300]
            self.timeline.close(window)
            return result
        self.timeline.close(window)
        assert window.end is not None
        recovered = wait_recovered(probe_for(self.ctx, component), window.end, self.stop)
        window.recovered_after = result.recovered_after = recovered
        if recovered is None and not self.stop.is_set():
            result.problem = f"not usable through the gateway {RECOVERY_LIMIT:g} s after " \
                             "it was back"
        if component == "redis":
            after = live_sessions(env)
            check = SessionCheck(result.at, len(before), len(after), len(before - after))
            sample = cookies[-50:]
            failed = [c for c in sample if not _probe_once(
                self.ctx, "app.test", "/", 200, SMALL_BODY, [("Cookie", c)])]
            check.cookies_checked, check.cookies_failed = len(sample), len(failed)
            self.sessions.append(check)
        return result


def make_schedule(start: float, length: float) -> list[tuple[float, str]]:
    """The faults of the main phase: a cycle of the four component faults, spread out
    and repeated while time remains (one cycle needs about 22 s; at most one a minute)."""
    cycle = ["echo restart", "redis kill", "nginx restart", "idp down"]
    cost = {name: Injector.DOWN[name] + 2.0 for name in cycle}  # down + restart + probe
    gap = max(1.0, (min(length, 60.0) - 1.0 - sum(cost.values())) / len(cycle))
    out: list[tuple[float, str]] = []
    t = start + 1.0
    end = start + length
    while True:
        for name in cycle:
            if t + cost[name] > end:
                return out
            out.append((t, name))
            t += cost[name] + gap


# --------------------------------------------------------------------------------------
# config reload


@dataclass
class Reloader:
    """Every ``interval`` seconds: rewrite both config files (``os.replace``) with the next
    value of the reload route's response header, and check it takes effect."""

    ctx: Ctx
    interval: float
    stop: threading.Event = field(default_factory=threading.Event)
    hold: threading.Lock = field(default_factory=threading.Lock)  # held: no reload
    thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)
    count: int = 0

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="reloader", daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                with self.hold:
                    self._reload()
            except Exception:
                self.errors.append(traceback.format_exc())

    def _reload(self) -> None:
        env = self.ctx.env
        env.generation += 1
        generation = env.generation
        for kind, gw in env.gateways.items():
            gw.rewrite(gateway_config(kind, env.ports, env.issuer, env.secrets, env.tls,
                                      generation))
        self.count += 1
        t0 = time.monotonic()
        for kind in env.gateways:
            self._check(kind, generation, t0)

    def _check(self, kind: str, generation: int, t0: float) -> None:
        """The new header value must show within 10 s (the daemon polls every 0.2 s;
        an nginx restart may overlap: answers other than 200 are retried)."""
        gw = self.ctx.env.gateways[kind]
        want = str(generation)
        seen = ""
        while time.monotonic() - t0 < 10.0 and not self.stop.is_set():
            try:
                conn = H1(gw.port, 5.0, self.ctx.env.tls.h1 if kind == "tls" else None,
                          "reload.test")
            except ConnectFailed:
                time.sleep(0.1)
                continue
            try:
                conn.send_request("GET", f"reload.test:{gw.port}", "/")
                read = conn.read_response("GET", Exact(SMALL_BODY), time.monotonic())
            except OSError:
                read = None
            finally:
                conn.close()
            if read is not None and read.head is not None and read.outcome.status == 200:
                seen = read.head.headers.get("x-soak-generation", "")
                if seen == want:
                    break
            time.sleep(0.1)
        if self.stop.is_set() and seen != want:
            return
        took = time.monotonic() - t0
        ok = seen == want
        self.ctx.rec.record(
            Req("config reload", f"reload on {kind}", 200),
            Outcome(200, None if ok else BAD_HEADERS, elapsed=took, wait=took,
                    note="" if ok else f"X-Soak-Generation {seen!r}, wanted {want!r} "
                                       "10 s after the rewrite"), t0)


# --------------------------------------------------------------------------------------
# sampler


@dataclass
class Sampler:
    """RSS and descriptor count of both gateways, once a second."""

    env: Env
    t0: float
    stop: threading.Event = field(default_factory=threading.Event)
    series: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            now = time.monotonic() - self.t0
            for kind, gw in self.env.gateways.items():
                pid = gw.pid
                if pid is not None:
                    self.series.setdefault(kind, []).append((now, rss_kib(pid), fd_count(pid)))
            if self.stop.wait(1.0):
                return
