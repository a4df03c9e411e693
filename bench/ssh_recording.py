#!/usr/bin/env python3
"""Native SSH recordings: what recording a terminal session costs. A pty session prints
``--size`` MiB of text (base64 of random bytes) through the gateway, on a route that
records it (asciicast, ``ssh_recording_dir``) and on one that does not
(``ssh_recording: false``), alternating, ``--runs`` times each.

    .venv/bin/python bench/ssh_recording.py               # 256 MiB, 3 runs, medians
    .venv/bin/python bench/ssh_recording.py --size 64 --runs 1

Reported per row: MB/s of terminal output, the gateway's CPU seconds per GB (utime +
stime of the twistd process, its recorder thread included) and, while the recorded
session prints, the worst and median round trip of a second, idle pty session on the
same gateway (a keystroke echoed), which is what a recording stalling the reactor would
show. The sshd, sign-in and cipher are bench/ssh.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.daemon import gateway_daemon  # noqa: E402
from tests.support.peers import oidc_provider  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, port_open, wait_until  # noqa: E402
from tests.support.ssh_native import (  # noqa: E402
    PtyProcess,
    cert_sshd,
    gateway_keys,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config  # noqa: E402

CIPHER = ("Ciphers=aes128-ctr", "MACs=hmac-sha2-256", "BatchMode=yes", "LogLevel=ERROR")


class Prober:
    """An idle pty session whose echo of one keystroke is timed, again and again."""

    def __init__(self, argv: list[str]) -> None:
        self.shell = PtyProcess(argv)
        self.shell.write(b"stty -echo; echo probe-ready\n")
        self.shell.read_until(b"probe-ready")
        self.samples: list[float] = []
        self.running = False
        self._thread: threading.Thread | None = None

    def _probe(self) -> None:
        count = 0
        while self.running:
            count += 1
            marker = f"p{count}q".encode()
            started = time.perf_counter()
            self.shell.write(b"echo " + marker + b"\n")
            seen = b""
            deadline = started + 30
            while marker not in seen and time.perf_counter() < deadline:
                ready, _, _ = select.select([self.shell.master], [], [], 1)
                if ready:
                    seen += os.read(self.shell.master, 65536)
            self.samples.append(time.perf_counter() - started)
            time.sleep(0.02)

    def start(self) -> None:
        self.samples = []
        self.running = True
        self._thread = threading.Thread(target=self._probe, daemon=True)
        self._thread.start()

    def stop(self) -> list[float]:
        self.running = False
        if self._thread is not None:
            self._thread.join(60)
        return self.samples

    def close(self) -> None:
        self.shell.write(b"exit\n")
        self.shell.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="MiB of terminal output")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    size = args.size * 1024 * 1024
    rows: dict[str, list[tuple[float, float, list[float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="gateway-bench-ssh-rec-") as name:
        tmp = Path(name)
        keys = gateway_keys(tmp)
        port, ssh_port = free_port(), free_port()
        with cert_sshd(tmp, keys.ca_public) as sshd, \
                oidc_provider(tmp, [callback_uri(port)]) as op:
            def route(name: str, **extra: object) -> dict[str, object]:
                return sshd.route(name, allow_any_authenticated_user=True, **extra)
            config = {**signing_in_config(op, port, [route("recorded"),
                                                     route("plain", ssh_recording=False)]),
                      "log_level": "warn", **keys.settings(ssh_port),
                      "ssh_recording_dir": str(tmp / "recordings")}
            with gateway_daemon(tmp, config, port=port) as gateway:
                wait_until(lambda: port_open("127.0.0.1", ssh_port), 10, what="listener")
                proc, _, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                  f"{sshd.user}@plain", "true"),
                                         "alice@example.test")
                proc.communicate(timeout=60)
                pid = gateway.process.pid
                assert pid is not None
                prober = Prober(ssh_argv(keys.client_key, ssh_port, f"{sshd.user}@plain",
                                         options=(*CIPHER, "RequestTTY=force")))
                command = f"head -c {size * 3 // 4} /dev/urandom | base64 -w 100"
                for _ in range(args.runs):
                    for name in ("plain", "recorded"):
                        argv = ssh_argv(keys.client_key, ssh_port, f"{sshd.user}@{name}",
                                        command, options=CIPHER)
                        argv.insert(1, "-tt")
                        before = cpu_seconds(pid)
                        prober.start()
                        started = time.perf_counter()
                        done = subprocess.run(argv, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, timeout=1800,
                                              stdin=subprocess.DEVNULL)
                        seconds = time.perf_counter() - started
                        probes = prober.stop()
                        if done.returncode != 0:
                            raise SystemExit(f"ssh failed: {done.stderr.decode()}")
                        rows.setdefault(name, []).append(
                            (seconds, cpu_seconds(pid) - before, probes))
                prober.close()
            casts = list((tmp / "recordings").rglob("*.cast"))
            cast_bytes = sum(p.stat().st_size for p in casts)
    gb = size / 1e9
    results = {}
    print(f"pty output of {args.size} MiB, median of {args.runs}; recordings: "
          f"{len(casts)} casts, {cast_bytes / 1e6:.0f} MB")
    print(f"{'row':<10} {'MB/s':>8} {'CPU s/GB':>9} {'echo p50 ms':>12} {'echo max ms':>12}")
    for name, samples in rows.items():
        seconds = statistics.median(s for s, _, _ in samples)
        cpu = statistics.median(c for _, c, _ in samples)
        probes = [p for _, _, ps in samples for p in ps]
        p50 = statistics.median(probes) * 1000 if probes else 0.0
        worst = max(probes) * 1000 if probes else 0.0
        results[name] = {"mb_per_s": round(size / seconds / 1e6, 1),
                         "gateway_cpu_s_per_gb": round(cpu / gb, 2),
                         "echo_p50_ms": round(p50, 1), "echo_max_ms": round(worst, 1),
                         "echo_samples": len(probes)}
        print(f"{name:<10} {size / seconds / 1e6:>8.1f} {cpu / gb:>9.2f} {p50:>12.1f} "
              f"{worst:>12.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
