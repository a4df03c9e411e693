#!/usr/bin/env python3
"""TCP tunnel throughput: a large transfer direct on loopback, through socat, and
through the gateway's CONNECT tunnel on a plain and on a TLS listener.

    .venv/bin/python bench/tcp.py                # 2 GiB, 3 runs each, medians
    .venv/bin/python bench/tcp.py --size 512 --runs 1

A source sends ``--size`` MiB and half-closes; a sink counts until EOF and answers
how many bytes arrived; the time is from connect to that answer. With two or more
CPUs the relay (gateway or socat) is pinned to the first, source and sink to the
second. Reported: MB/s, the ratio to the direct transfer, and the relay's CPU time
per GB (utime + stime from /proc). Everything runs on 127.0.0.1 in a temp dir.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1 << 20


# -- the two ends (run as subprocesses: `tcp.py --sink PORT` / `--source ...`)

def sink(port: int, expected: int = 0) -> None:
    """Count until EOF, or until ``expected`` bytes when the tunnel cannot pass a
    half-close (TLS), then answer ``OK <count>``."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(16)
    print("READY", flush=True)
    buffer = bytearray(CHUNK)
    while True:
        conn, _ = server.accept()
        with conn:
            total = 0
            while (not expected or total < expected) and (n := conn.recv_into(buffer)):
                total += n
            conn.sendall(f"OK {total}\n".encode())


def source(port: int, size: int, authority: str, tls: bool) -> float:
    """Seconds to send ``size`` bytes and hear the sink's count back."""
    started = time.perf_counter()
    sock: socket.socket = socket.create_connection(("127.0.0.1", port))
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
        sock = context.wrap_socket(sock, server_hostname=authority.split(":")[0])
    with sock:
        if authority:
            sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"CONNECT refused: {head[:60]!r}")
        block = memoryview(bytes(range(256)) * (CHUNK // 256))
        sent = 0
        while sent < size:
            piece = block[:min(CHUNK, size - sent)]
            sock.sendall(piece)
            sent += len(piece)
        if not tls:  # through TLS the sink counts to the size instead of waiting for EOF
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while b"\n" not in answer:
            chunk = sock.recv(64)
            if not chunk:
                break
            answer += chunk
    elapsed = time.perf_counter() - started
    if not tls and answer.strip() != f"OK {size}".encode():
        raise RuntimeError(f"the sink saw {answer!r}, expected {size} bytes")
    return elapsed


# -- harness

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pinned(argv: list[str], cpu: str | None) -> list[str]:
    return ["taskset", "-c", cpu, *argv] if cpu is not None else argv


@contextlib.contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO)
    try:
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def gateway_config(tmp: Path, port: int, sink_port: int, tls: bool) -> Path:
    lines = [f"address: 127.0.0.1:{port}", "log_level: warn", "proxy_log_level: error",
             "codec_type: http1"]
    if tls:
        key, cert = tmp / "key.pem", tmp / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "2", "-subj", "/CN=sink.test", "-addext",
                        "subjectAltName=DNS:sink.test"], check=True, capture_output=True)
        lines += [f"certificate_file: {cert}", f"certificate_key_file: {key}"]
    else:
        lines.append("insecure_server: true")
    lines += ["policy:", "  - from: tcp+https://sink.test:9",
              f"    to: tcp://127.0.0.1:{sink_port}",
              "    allow_public_unauthenticated_access: true"]
    path = tmp / f"gateway-{'tls' if tls else 'plain'}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(run: Callable[[], float], relay_pid: int | None, runs: int, size: int
            ) -> tuple[float, float | None]:
    """(median MB/s, relay CPU seconds per GB)."""
    rates, cpu = [], []
    for _ in range(runs):
        before = cpu_seconds(relay_pid) if relay_pid else 0.0
        elapsed = run()
        if relay_pid:
            cpu.append((cpu_seconds(relay_pid) - before) / (size / 1e9))
        rates.append(size / elapsed / 1e6)
    return statistics.median(rates), (statistics.median(cpu) if cpu else None)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048, help="MiB per transfer")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--twistd", default=str(REPO / ".venv" / "bin" / "twistd"))
    parser.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sized-sink", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--source", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sink:
        sink(args.sink)
        return 0
    if args.sized_sink:
        sink(args.sized_sink, int(os.environ["BENCH_SIZE"]))
        return 0
    if args.source:
        port, size, authority, tls = args.source
        print(source(int(port), int(size), authority if authority != "-" else "", tls == "1"))
        return 0

    size = args.size << 20
    cpus = sorted(os.sched_getaffinity(0))
    relay_cpu = str(cpus[0]) if len(cpus) >= 2 and shutil.which("taskset") else None
    ends_cpu = str(cpus[1]) if relay_cpu is not None else None
    me = [sys.executable, str(Path(__file__).resolve())]
    rows: list[tuple[str, float, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="gateway-bench-tcp-") as tmpdir, \
            contextlib.ExitStack() as stack:
        tmp = Path(tmpdir)
        sink_port, sized_port = free_port(), free_port()
        stack.enter_context(process(pinned([*me, "--sink", str(sink_port)], ends_cpu),
                                    tmp / "sink.log"))
        stack.enter_context(process(pinned([*me, "--sized-sink", str(sized_port)], ends_cpu),
                                    tmp / "sized-sink.log", env={**os.environ,
                                                                  "BENCH_SIZE": str(size)}))
        wait_port(sink_port)
        wait_port(sized_port)

        def run_source(port: int, authority: str = "-", tls: bool = False) -> float:
            out = subprocess.run(pinned([*me, "--source", str(port), str(size), authority,
                                         "1" if tls else "0"], ends_cpu),
                                 capture_output=True, text=True, check=True, timeout=600)
            return float(out.stdout.strip())

        rows.append(("direct loopback", *measure(lambda: run_source(sink_port), None,
                                                  args.runs, size)))
        if shutil.which("socat"):
            socat_port = free_port()
            socat = stack.enter_context(process(pinned(
                ["socat", "-b", str(CHUNK),
                 f"TCP-LISTEN:{socat_port},bind=127.0.0.1,reuseaddr,fork",
                 f"TCP:127.0.0.1:{sink_port}"], relay_cpu), tmp / "socat.log"))
            wait_port(socat_port)
            rows.append(("socat (1 MiB buffer)", *measure(
                lambda: run_source(socat_port), None, args.runs, size)))
            del socat
        else:
            print("socat: skipped (apt-get install -y socat)", file=sys.stderr)
        haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                              if Path("/usr/sbin/haproxy").exists() else None)
        if haproxy:
            hap_port = free_port()
            (tmp / "haproxy.cfg").write_text(
                "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 5s\n"
                "  timeout client 60s\n  timeout server 60s\n  option splice-auto\n"
                f"listen relay\n  bind 127.0.0.1:{hap_port}\n"
                f"  server sink 127.0.0.1:{sink_port}\n")
            hap_pid = stack.enter_context(process(pinned(
                [haproxy, "-db", "-f", str(tmp / "haproxy.cfg")], relay_cpu),
                tmp / "haproxy.log"))
            wait_port(hap_port)
            rows.append(("haproxy (splice)", *measure(
                lambda: run_source(hap_port), hap_pid, args.runs, size)))
        else:
            print("haproxy: skipped (apt-get install -y haproxy)", file=sys.stderr)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
        for tls in (False, True):
            port = free_port()
            config = gateway_config(tmp, port, sized_port if tls else sink_port, tls)
            pid = stack.enter_context(process(pinned(
                [args.twistd, "-n", "--pidfile=", "gateway", "--config", str(config)],
                relay_cpu), tmp / f"gateway-{'tls' if tls else 'plain'}.log", env=env))
            wait_port(port)
            label = "gateway, TLS listener" if tls else "gateway, plain listener"
            rows.append((label, *measure(
                lambda port=port, tls=tls: run_source(port, "sink.test:9", tls),  # type: ignore[misc]
                pid, args.runs, size)))
    direct = rows[0][1]
    print(f"\nTCP tunnel throughput: {args.size} MiB per transfer, median of {args.runs}"
          f"{'' if relay_cpu is None else f', relay on CPU{relay_cpu}, ends on CPU{ends_cpu}'}")
    print(f"{'path':<26}{'MB/s':>10}{'x direct':>10}{'relay CPU s/GB':>16}")
    for name, rate, cpu in rows:
        cpu_text = f"{cpu:.2f}" if cpu is not None else "-"
        print(f"{name:<26}{rate:>10.0f}{rate / direct:>10.2f}{cpu_text:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
