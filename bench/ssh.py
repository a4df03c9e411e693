#!/usr/bin/env python3
"""Native SSH throughput: ``scp`` of a large file straight to a loopback sshd and
through the gateway's SSH server (``ssh_address``, an ``ssh://`` route), each way.

    .venv/bin/python bench/ssh.py                 # 1 GiB, 3 runs per row, medians
    .venv/bin/python bench/ssh.py --size 256 --runs 1

The sshd is the test suite's (tests/support/ssh_native.py: trusts only a user CA, runs
as the current user on 127.0.0.1); the direct row logs in with a certificate that CA
signed, the gateway row signs in once through node-oidc-provider with the test browser
and then runs with BatchMode. Both use the same cipher (aes128-ctr, hmac-sha2-256: what
the gateway offers first that OpenSSH accepts) so the row differ only by the relay.
Reported: MB/s, the ratio to direct, and the gateway's CPU seconds per GB (utime + stime
of the twistd process, from /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.daemon import gateway_daemon  # noqa: E402
from tests.support.peers import oidc_provider  # noqa: E402
from tests.support.processes import cpu_seconds, free_port, wait_until  # noqa: E402
from tests.support.ssh_native import (  # noqa: E402
    cert_sshd,
    gateway_keys,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config  # noqa: E402

CIPHER = ("Ciphers=aes128-ctr", "MACs=hmac-sha2-256")


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {done.stderr.decode()}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024, help="MiB per transfer")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    size = args.size * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="gateway-bench-ssh-") as name:
        tmp = Path(name)
        keys = gateway_keys(tmp)
        subprocess.run(["ssh-keygen", "-q", "-s", str(keys.user_ca), "-I", "bench-direct",
                        "-n", _user(),
                        str(keys.client_key) + ".pub"], check=True, capture_output=True)
        source = tmp / "source.bin"
        with open(source, "wb") as handle:
            for _ in range(args.size):
                handle.write(os.urandom(1024 * 1024))
        port, ssh_port = free_port(), free_port()
        with cert_sshd(tmp, keys.ca_public) as sshd, \
                oidc_provider(tmp, [callback_uri(port)]) as op:
            route = sshd.route(allow_any_authenticated_user=True)
            config = {**signing_in_config(op, port, [route]), "log_level": "warn",
                      **keys.settings(ssh_port)}
            with gateway_daemon(tmp, config, port=port) as gateway:
                wait_until(lambda: port_open(ssh_port), 10, what="ssh listener")
                proc, _, _ = sign_in_ssh(ssh_argv(keys.client_key, ssh_port,
                                                  f"{sshd.user}@db", "true"),
                                         "alice@example.test")
                proc.communicate(timeout=60)
                pid = gateway.process.pid
                assert pid is not None
                scp = ["-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
                for option in CIPHER:
                    scp += ["-o", option]

                def direct(up: bool) -> list[str]:
                    argv = ssh_argv(keys.client_key, sshd.port, "", binary="scp")
                    remote = f"{sshd.user}@127.0.0.1:{tmp / 'remote.bin'}"
                    ends = [str(source), remote] if up else [remote, str(tmp / "back.bin")]
                    return [*argv[:1], *scp, *argv[1:], *ends]

                def through(up: bool) -> list[str]:
                    argv = ssh_argv(keys.client_key, ssh_port, "", binary="scp")
                    remote = f"{sshd.user}@db@127.0.0.1:{tmp / 'remote.bin'}"
                    ends = [str(source), remote] if up else [remote, str(tmp / "back.bin")]
                    return [*argv[:1], *scp, *argv[1:], *ends]

                rows: dict[str, list[tuple[float, float]]] = {}
                for _ in range(args.runs):
                    for up in (True, False):
                        way = "upload" if up else "download"
                        seconds = timed(direct(up))
                        rows.setdefault(f"direct {way}", []).append((seconds, 0.0))
                        before = cpu_seconds(pid)
                        seconds = timed(through(up))
                        rows.setdefault(f"gateway {way}", []).append(
                            (seconds, cpu_seconds(pid) - before))
    gb = size / 1e9
    results = {}
    print(f"scp of {args.size} MiB, median of {args.runs} (ciphers: {', '.join(CIPHER)})")
    print(f"{'row':<18} {'MB/s':>8} {'vs direct':>10} {'gateway CPU s/GB':>17}")
    for name, samples in rows.items():
        seconds = statistics.median(s for s, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        direct_seconds = statistics.median(s for s, _ in rows[
            "direct " + name.split()[1]])
        rate = size / seconds / 1e6
        ratio = direct_seconds / seconds
        results[name] = {"mb_per_s": round(rate, 1), "ratio": round(ratio, 3),
                         "gateway_cpu_s_per_gb": round(cpu / gb, 2) if cpu else None}
        print(f"{name:<18} {rate:>8.1f} {ratio:>10.2f} "
              f"{(f'{cpu / gb:.2f}' if cpu else '-'):>17}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def _user() -> str:
    import getpass

    return getpass.getuser()


def port_open(port: int) -> bool:
    from tests.support.processes import port_open as is_open

    return is_open("127.0.0.1", port)


if __name__ == "__main__":
    main()
