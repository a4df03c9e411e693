"""The soak's client scenarios. Each worker thread repeats one scenario: one unit of work
(usually one connection with a few requests) per round, until the gate closes.

Every request is recorded with what it asked for (``Req``: the status, the components
it depends on, the fault it provokes) and how it ended (``Outcome``).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from soak_env import FILES, SMALL_BODY, USER, Env
from soak_http import (
    H1,
    H2,
    Body,
    ConnectFailed,
    EchoJson,
    Empty,
    Exact,
    FileBody,
    H2Req,
    Pattern,
    Upload,
    WebSocket,
    WsError,
    failed_connect,
    request_bytes,
)
from soak_record import (
    BAD_BYTES,
    CLOSED,
    LOST_WITH_CONNECTION,
    NOT_CLOSED,
    RESET,
    SIGNIN,
    TIMEOUT,
    TRUNCATED,
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


def sc_small(ctx: Ctx, rng: random.Random) -> None:
    """Keep-alive: many small answers (2 KiB, 204, HEAD of big files, 304) in a row."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "h1 small/HEAD/204/304", kind, "nginx.test")
    if conn is None:
        return
    try:
        for _ in range(rng.randint(1, 40)):
            if ctx.gate.closing or not conn.usable:
                break
            exchange(ctx, conn, "h1 small/HEAD/204/304", small_mix(ctx, rng), kind)
            time.sleep(rng.random() * 0.01)
    finally:
        conn.close()


def sc_large(ctx: Ctx, rng: random.Random) -> None:
    """1-64 MiB answers from nginx (sendfile) and the echo upstream (64 KiB writes),
    then a small one on the same connection."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "h1 large 1-64MiB", kind, "nginx.test")
    if conn is None:
        return
    try:
        for _ in range(rng.randint(1, 3)):
            if ctx.gate.closing or not conn.usable:
                break
            if rng.random() < 0.5:
                ask = nginx_file(ctx, rng.choice(("/1m", "/1m", "/16m", "/16m", "/64m")))
            else:
                ask = echo_bytes(large_size(rng))
            exchange(ctx, conn, "h1 large 1-64MiB", ask, kind)
            if conn.usable:
                exchange(ctx, conn, "h1 large 1-64MiB", nginx_small(), kind)
    finally:
        conn.close()


def sc_bodies(ctx: Ctx, rng: random.Random) -> None:
    """Request bodies, sized and chunked, 0 bytes to 4 MiB, echoed back as their sha256."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "h1 request bodies", kind, "echo.test")
    if conn is None:
        return
    try:
        for _ in range(rng.randint(1, 10)):
            if ctx.gate.closing or not conn.usable:
                break
            size = rng.choice((0, 1, 1000, 65536, 65537, 1 * MIB, rng.randrange(0, 4 * MIB)))
            chunked = rng.random() < 0.5
            piece = rng.choice((0, 0, 1000, 16384, 100000)) if chunked else 0
            exchange(ctx, conn, "h1 request bodies", echo_post(rng, size, chunked, piece), kind)
    finally:
        conn.close()


def sc_slow_reader(ctx: Ctx, rng: random.Random) -> None:
    """A client with a 16 KiB receive buffer reading in bursts with pauses: the gateway's
    send buffer fills and it must pause the upstream, then resume; then reuse."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "h1 slow reader", kind, "nginx.test", rcvbuf=16384)
    if conn is None:
        return
    try:
        if rng.random() < 0.5:
            path = rng.choice(("/1m", "/16m"))
            ask, size = nginx_file(ctx, path), FILES[path]
        else:
            size = rng.choice((2, 4, 8)) * MIB - rng.randrange(0, 4096)
            ask = echo_bytes(size)
        burst = rng.choice((16384, 65536, 131072))
        # pauses of 2-20 ms after each burst, but at most about 3 s of pauses in all
        slow = (burst, min(rng.uniform(0.002, 0.02), 3.0 * burst / size))
        exchange(ctx, conn, "h1 slow reader", ask, kind, slow=slow)
        if conn.usable:
            exchange(ctx, conn, "h1 slow reader", rng.choice((nginx_small(), nginx_empty(),
                                                               nginx_head())), kind)
    finally:
        conn.close()


def sc_slow_writer(ctx: Ctx, rng: random.Random) -> None:
    """A client that sends its request body in small pieces with pauses (sized and
    chunked), then a small request on the same connection."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "h1 slow writer", kind, "echo.test")
    if conn is None:
        return
    try:
        size = rng.randrange(1, 512 * 1024)
        piece = rng.choice((512, 4096, 16384))
        pause = min(rng.uniform(0.005, 0.05), 3.0 / max(size // piece, 1))
        exchange(ctx, conn, "h1 slow writer",
                 echo_post(rng, size, rng.random() < 0.5, piece, pause), kind)
        if conn.usable:
            exchange(ctx, conn, "h1 slow writer", echo_204(), kind)
    finally:
        conn.close()


TLS_BATCH_LIMIT = 256 * 1024  # bytes of one pipelined TLS batch (see sc_pipelined)


def sc_pipelined(ctx: Ctx, rng: random.Random) -> None:
    """Several requests written at once (HTTP/1.1 pipelining), answers read in order."""
    scenario = "h1 pipelined"
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, scenario, kind, "nginx.test")
    if conn is None:
        return
    sender: threading.Thread | None = None
    try:
        choices: list[Callable[[], Ask]] = [
            nginx_small, nginx_empty, nginx_head, lambda: nginx_304(ctx),
            lambda: nginx_file(ctx, "/1m"), echo_204, lambda: echo_bytes(rng.randrange(1, MIB)),
            lambda: echo_post(rng, rng.randrange(0, 100000), rng.random() < 0.5)]
        asks = [rng.choice(choices)() for _ in range(rng.randint(2, 8))]
        t0 = time.monotonic()
        data = b"".join(_request_with_body(ctx, a, kind) for a in asks)
        if kind == "tls":
            # One TLS connection must not be written by one thread while another reads
            # it (OpenSSL objects are not for concurrent use: the soak lost batches that
            # way, the gateway never saw them). The batch is kept small enough for the
            # loopback socket buffers and sent before the answers are read.
            while len(data) > TLS_BATCH_LIMIT and len(asks) > 1:
                asks.pop()
                data = b"".join(_request_with_body(ctx, a, kind) for a in asks)
            _send_quietly(conn, data)
        else:
            # written from another thread: the gateway rightly stops reading requests
            # while the answers to the earlier ones wait for us to read them
            sender = threading.Thread(target=_send_quietly, args=(conn, data), daemon=True)
            sender.start()
        # An answer cut off, or the connection closed, may come from any request of the
        # batch (the gateway may work on several at once): such an outcome depends on
        # everything the batch depends on.
        batch_deps = tuple(sorted({d for a in asks for d in a.deps}))
        cut = False
        for i, ask in enumerate(asks):
            position = f"request {i + 1} of {len(asks)} pipelined"
            if cut:  # the connection ended with an earlier answer: this one is lost
                ctx.rec.record(ask.req(scenario, kind, batch_deps), Outcome(
                    error=LOST_WITH_CONNECTION, elapsed=time.monotonic() - t0,
                    note=position), t0)
                continue
            read = conn.read_response(ask.method, ask.body(), t0, status=ask.status,
                                      head_length=ask.head_length)
            o = read.outcome
            o = Outcome(o.status, o.error, o.received, o.wait, o.elapsed,
                        f"{position}; {o.note}" if o.note else position)
            cut_off = o.error in (CLOSED, RESET, TRUNCATED)
            ctx.rec.record(ask.req(scenario, kind, batch_deps if cut_off else None), o, t0)
            if o.error is not None or (read.head and read.head.will_close):
                cut = True
    finally:
        conn.close()
        if sender is not None:
            sender.join(ctx.timeout)


def _send_quietly(conn: H1, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the answers tell what happened
        conn.send(data)


def _request_with_body(ctx: Ctx, ask: Ask, kind: str) -> bytes:
    data = request_bytes(ask.method, ctx.authority(ask.host, kind), ask.path, ask.headers,
                         ask.upload)
    if ask.upload is not None:
        data += b"".join(ask.upload.pieces())
    return data


def sc_connection_close(ctx: Ctx, rng: random.Random) -> None:
    """``Connection: close``: a complete answer, then the gateway closes the connection."""
    scenario = "h1 Connection: close"
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, scenario, kind, "nginx.test")
    if conn is None:
        return
    try:
        if rng.random() < 0.3:  # one keep-alive request first
            exchange(ctx, conn, scenario, nginx_small(), kind)
            if not conn.usable:
                return
        base = rng.choice((nginx_small(), nginx_file(ctx, "/1m"), echo_bytes(100000),
                           nginx_empty()))
        base.headers = [*base.headers, ("Connection", "close")]
        outcome = exchange(ctx, conn, scenario, base, kind)
        if outcome.error is None:
            t0 = time.monotonic()
            closed = conn.closed_by_peer(3.0)
            ctx.rec.record(Req(scenario, f"close after Connection: close [{kind}]", 0),
                           Outcome(0, None if closed else NOT_CLOSED,
                                   elapsed=time.monotonic() - t0), t0)
    finally:
        conn.close()


def sc_client_abort(ctx: Ctx, rng: random.Random) -> None:
    """A client that disappears mid-response (FIN or RST) after part of a large body."""
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, "client disappears", kind, "nginx.test")
    if conn is None:
        return
    reset = rng.random() < 0.5
    try:
        ask = nginx_file(ctx, rng.choice(("/16m", "/64m"))) if rng.random() < 0.5 \
            else echo_bytes(rng.choice((16, 32, 64)) * MIB)
        exchange(ctx, conn, "client disappears", ask, kind,
                 stop_after=rng.randrange(1, 8 * MIB))
    finally:
        conn.close(reset=reset)


def sc_faults(ctx: Ctx, rng: random.Random) -> None:
    """Faults the upstream causes per request (cut bodies, resets, a hang), each followed
    by a normal request to the same upstream."""
    scenario = "upstream faults"
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, scenario, kind, "fault.test")
    if conn is None:
        return
    try:
        exchange(ctx, conn, scenario, fault(rng.choice(FAULTS), rng.randrange(1, 8 * MIB)),
                 kind)
        if not conn.usable:
            conn.close()
            conn = open_h1(ctx, scenario, kind, "fault.test")
            if conn is None:
                return
        exchange(ctx, conn, scenario, fault_ok(rng.randrange(0, 2 * MIB)), kind)
    finally:
        if conn is not None:
            conn.close()


def sc_signed_in(ctx: Ctx, rng: random.Random) -> None:
    """Signed-in route (session in Redis) over HTTP/1.1, plain and TLS."""
    scenario = "signed-in h1"
    cookie = ctx.sessions.pick(rng)
    if cookie is None:
        ctx.gate.sleep(0.5)
        return
    kind, _ = ctx.h1_target(rng)
    conn = open_h1(ctx, scenario, kind, "app.test")
    if conn is None:
        return
    try:
        for _ in range(rng.randint(1, 20)):
            if ctx.gate.closing or not conn.usable:
                break
            path = "/1m" if rng.random() < 0.1 else "/"
            exchange(ctx, conn, scenario, signed_in(ctx, cookie, path), kind)
            time.sleep(rng.random() * 0.02)
    finally:
        conn.close()


def sc_health(ctx: Ctx, rng: random.Random) -> None:
    """The gateway's own /healthz, on both listeners, twice a second."""
    for kind in ("plain", "tls"):
        conn = open_h1(ctx, "health probe", kind, "nginx.test")
        if conn is None:
            continue
        try:
            exchange(ctx, conn, "health probe",
                     Ask("GET", "nginx.test", "/healthz", 200, lambda: Exact(b"OK\n"), ()), kind)
        finally:
            conn.close()
    ctx.gate.sleep(0.5)


# --------------------------------------------------------------------------------------
# websockets


def sc_websocket(ctx: Ctx, rng: random.Random) -> None:
    """A websocket through the gateway: frames of 0-64 KiB echoed byte-exact, then close."""
    scenario = "websocket"
    kind, port = ctx.h1_target(rng)
    t0 = time.monotonic()
    req = Req(scenario, f"websocket ws.test/chat [{kind}]", 101, ("ws",))
    try:
        ws = WebSocket(port, ctx.authority("ws.test", kind), ctx.timeout,
                       ctx.env.tls.h1 if kind == "tls" else None)
    except ConnectFailed as exc:
        ctx.rec.record(req, failed_connect(exc, t0), t0)
        return
    except (WsError, OSError) as exc:
        ctx.rec.record(req, Outcome(error=_ws_error(exc), elapsed=time.monotonic() - t0,
                                    note=str(exc)), t0)
        return
    wait = time.monotonic() - t0
    try:
        if ws.status != 101:
            ctx.rec.record(req, Outcome(ws.status, elapsed=wait, wait=wait), t0)
            return
        error, note = None, ""
        try:
            for _ in range(rng.randint(1, 20)):
                size = rng.choice((0, 1, 125, 126, 1000, 65535, 65536))
                opcode = rng.choice((1, 2))  # text frames carry ASCII (valid UTF-8)
                payload = rng.randbytes(size) if opcode == 2 else bytes(
                    rng.choices(b"abcdefghijklmnopqrstuvwxyz ", k=size))
                ws.send(opcode, payload)
                got_op, got = ws.receive()
                if (got_op, got) != (opcode, payload):
                    error, note = BAD_BYTES, f"frame of {len(payload)} bytes came back wrong"
                    break
            if error is None:
                ws.send(8, b"\x03\xe8")
                got_op, _ = ws.receive()
                if got_op != 8:
                    error, note = BAD_BYTES, "no close frame back"
        except TimeoutError as exc:
            error, note = TIMEOUT, str(exc)
        except (WsError, OSError) as exc:
            error, note = TRUNCATED, f"{type(exc).__name__}: {exc}"
        ctx.rec.record(req, Outcome(101, error, wait=wait, elapsed=time.monotonic() - t0,
                                    note=note), t0)
    finally:
        ws.close()


def _ws_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    return CLOSED


# --------------------------------------------------------------------------------------
# HTTP/2


def h2_mix(ctx: Ctx, rng: random.Random) -> Ask:
    pick = rng.random()
    if pick < 0.25:
        return nginx_small()
    if pick < 0.30:
        return nginx_empty()
    if pick < 0.35:
        return nginx_head(rng.choice(tuple(FILES)))
    if pick < 0.40:
        return nginx_304(ctx, rng.choice(tuple(FILES)))
    if pick < 0.55:
        return nginx_file(ctx, "/1m")
    if pick < 0.58:
        return nginx_file(ctx, "/16m")
    if pick < 0.70:
        return echo_bytes(rng.randrange(0, 4 * MIB))
    if pick < 0.85:
        return echo_post(rng, rng.randrange(0, 512 * 1024), False)
    if pick < 0.92:
        return echo_204()
    if pick < 0.96:
        return fault(rng.choice(FAULTS[:3]), rng.randrange(1, 2 * MIB))
    return fault_ok(rng.randrange(0, MIB))


def sc_h2(ctx: Ctx, rng: random.Random, scenario: str = "h2 many streams",
          cookie: str | None = None) -> None:
    """HTTP/2 (h2c prior knowledge, or TLS + ALPN): up to 32 concurrent streams per round
    (small, large, HEAD, 204, 304, uploads, a few upstream faults, cancelled streams)."""
    kind = rng.choice(("plain", "tls"))
    port = ctx.env.gateways[kind].port
    t0 = time.monotonic()
    try:
        conn = H2(port, ctx.timeout, ctx.env.tls.h2 if kind == "tls" else None, "nginx.test")
    except ConnectFailed as exc:
        ctx.rec.record(Req(scenario, f"connect [{kind} h2]", 0), failed_connect(exc, t0), t0)
        ctx.gate.sleep(0.5)
        return
    try:
        for _ in range(rng.randint(1, 4)):
            if ctx.gate.closing or not conn.usable:
                break
            n = rng.randint(1, max(1, min(32, conn.max_streams())))
            asks: list[Ask] = []
            reqs: list[H2Req] = []
            for _ in range(n):
                ask = signed_in(ctx, cookie, "/1m" if rng.random() < 0.1 else "/") \
                    if cookie else h2_mix(ctx, rng)
                cancel = None
                if ask.fault is None and ask.method == "GET" and ask.status == 200 and \
                        rng.random() < 0.05:
                    cancel = rng.randrange(1, 512 * 1024)
                asks.append(ask)
                reqs.append(H2Req(ask.method, ctx.authority(ask.host, kind), ask.path,
                                  ask.body(), ask.status,
                                  [(k.lower(), v) for k, v in ask.headers],
                                  ask.upload.data if ask.upload else None, ask.head_length,
                                  cancel))
            t_round = time.monotonic()
            slow = 0.002 if rng.random() < 0.1 else 0.0
            for ask, outcome in zip(asks, conn.run(reqs, slow), strict=True):
                ctx.rec.record(ask.req(scenario, f"{kind} h2"), outcome, t_round)
    finally:
        conn.close()


def sc_signed_in_h2(ctx: Ctx, rng: random.Random) -> None:
    cookie = ctx.sessions.pick(rng)
    if cookie is None:
        ctx.gate.sleep(0.5)
        return
    sc_h2(ctx, rng, "signed-in h2", cookie)
    time.sleep(rng.random() * 0.05)


# --------------------------------------------------------------------------------------
# sign-in


def sign_in(ctx: Ctx) -> tuple[Outcome, str | None]:
    """One sign-in through the plain gateway as USER (a new browser, a new session)."""
    from tests.support.browser import Browser

    port = ctx.env.gateways["plain"].port
    browser = Browser()
    t0 = time.monotonic()
    try:
        reply = browser.sign_in(f"http://app.test:{port}/", USER)
    except TimeoutError as exc:
        return Outcome(error=TIMEOUT, elapsed=time.monotonic() - t0, note=str(exc)), None
    except (OSError, AssertionError, ValueError) as exc:
        return Outcome(error=SIGNIN, elapsed=time.monotonic() - t0,
                       note=f"{type(exc).__name__}: {exc}"[:200]), None
    elapsed = time.monotonic() - t0
    jar = browser.cookies.get("app.test", {})
    if reply.status != 200 or "_gateway" not in jar or reply.body != SMALL_BODY:
        return Outcome(reply.status, SIGNIN, elapsed=elapsed,
                       note=f"ended at {reply.url} with {reply.status}, cookies {sorted(jar)}"
                       ), None
    cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
    return Outcome(200, elapsed=elapsed), cookie


def sc_sign_in(ctx: Ctx, rng: random.Random) -> None:
    """A new sign-in every few seconds; its session joins the pool the signed-in
    scenarios use."""
    t0 = time.monotonic()
    outcome, cookie = sign_in(ctx)
    ctx.rec.record(Req("sign-in (new session)", "sign-in app.test", 200,
                       ("idp", "redis", "nginx")), outcome, t0)
    if cookie is not None:
        ctx.sessions.add(cookie)
    ctx.gate.sleep(rng.uniform(2.0, 4.0))


# --------------------------------------------------------------------------------------
# the pool


@dataclass(frozen=True)
class Scenario:
    fn: Callable[[Ctx, random.Random], None]
    threads: int
    in_flight: int = 1  # requests one thread may have in flight at once

    @property
    def name(self) -> str:
        return self.fn.__name__.removeprefix("sc_")


SCENARIOS = [
    Scenario(sc_small, 2),
    Scenario(sc_large, 2),
    Scenario(sc_bodies, 1),
    Scenario(sc_slow_reader, 1),
    Scenario(sc_slow_writer, 1),
    Scenario(sc_pipelined, 1, 8),
    Scenario(sc_connection_close, 1),
    Scenario(sc_client_abort, 1),
    Scenario(sc_faults, 1),
    Scenario(sc_websocket, 1),
    Scenario(sc_h2, 2, 32),
    Scenario(sc_signed_in, 2),
    Scenario(sc_signed_in_h2, 1, 32),
    Scenario(sc_sign_in, 1),
    Scenario(sc_health, 1),
]
ALWAYS = ("sign_in", "health")


def scenario_names() -> list[str]:
    return [sc.name for sc in SCENARIOS]


def choose(only: set[str], skip: set[str]) -> set[str] | None:
    """The names of the scenarios to run (None: all): ``only`` those (all when empty),
    without ``skip``; sign-in and health always run."""
    if not only and not skip:
        return None
    return (only or set(scenario_names())) - skip | set(ALWAYS)


def selected(names: set[str] | None) -> list[Scenario]:
    return [sc for sc in SCENARIOS if names is None or sc.name in names]


def run_worker(ctx: Ctx, fn: Callable[[Ctx, random.Random], None], seed: int) -> None:
    rng = random.Random(seed)
    while ctx.gate.enter():
        try:
            fn(ctx, rng)
        except Exception:
            ctx.harness_errors.append(f"{fn.__name__}: {traceback.format_exc()}")
            time.sleep(0.5)
        finally:
            ctx.gate.leave()


def start_workers(ctx: Ctx, seed: int, names: set[str] | None = None
                  ) -> list[threading.Thread]:
    threads = []
    n = 0
    for sc in selected(names):
        for i in range(sc.threads):
            n += 1
            t = threading.Thread(target=run_worker, args=(ctx, sc.fn, seed * 1000 + n),
                                 name=f"{sc.name}-{i}", daemon=True)
            t.start()
            threads.append(t)
    return threads


def worker_count(names: set[str] | None = None) -> int:
    return sum(sc.threads for sc in selected(names))


def max_in_flight(names: set[str] | None = None) -> int:
    """How many requests the clients may have in flight at once: a bound for the
    upstream connections a gateway may pool."""
    return sum(sc.threads * sc.in_flight for sc in selected(names))
