"""The soak's client scenarios. Each worker thread repeats one scenario: one unit of work
(usually one connection with a few requests) per round, until the gate closes (what
they are built from: ``soak_client``).

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
from dataclasses import dataclass

from soak_client import (
    FAULTS,
    MIB,
    Ask,
    Ctx,
    echo_204,
    echo_bytes,
    echo_post,
    exchange,
    fault,
    fault_ok,
    large_size,
    nginx_304,
    nginx_empty,
    nginx_file,
    nginx_head,
    nginx_small,
    open_h1,
    signed_in,
    small_mix,
)
from soak_env import FILES, SMALL_BODY, USER
from soak_h2 import H2, H2Req
from soak_http import (
    H1,
    ConnectFailed,
    Exact,
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
    Req,
)


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
