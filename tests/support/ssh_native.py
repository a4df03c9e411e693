"""Peers for native SSH tests (issue 31): the gateway's SSH keys, a private OpenSSH
``sshd`` that trusts the gateway's user CA (``TrustedUserCAKeys``) and nothing else, and
the OpenSSH client aimed at the gateway's SSH listener.

The sshd runs as the current user on a free 127.0.0.1 port with ``LogLevel VERBOSE``
(it logs each certificate's key id, serial and validity), stopped by PID at the end.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .peers import MissingBinary, find_binary
from .processes import ManagedProcess
from .sshd import INSTALL_HINT, start_sshd


def keygen(path: Path, comment: str, kind: str = "ed25519") -> Path:
    binary = find_binary("ssh-keygen")
    if binary is None:
        raise MissingBinary("ssh-keygen", INSTALL_HINT)
    subprocess.run([binary, "-q", "-t", kind, "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


@dataclass(frozen=True)
class GatewayKeys:
    host_key: Path  # the gateway's SSH host key
    user_ca: Path  # the user CA's private key (its .pub is what servers trust)
    client_key: Path  # the person's key

    @property
    def ca_public(self) -> str:
        return Path(str(self.user_ca) + ".pub").read_text().strip()

    def settings(self, ssh_port: int) -> dict[str, Any]:
        """The gateway's SSH settings with these keys, listening on ``ssh_port``."""
        return {"ssh_address": f"127.0.0.1:{ssh_port}",
                "ssh_host_key_files": [str(self.host_key)],
                "ssh_user_ca_key_file": str(self.user_ca)}


def gateway_keys(tmp_path: Path) -> GatewayKeys:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    return GatewayKeys(keygen(keys / "gateway_host", "gateway host"),
                       keygen(keys / "user_ca", "gateway user CA"),
                       keygen(keys / "client", "alice's laptop"))


@dataclass(frozen=True)
class CertSshd:
    port: int
    user: str
    host_public: str  # "ssh-ed25519 AAAA..."
    process: ManagedProcess

    def log(self) -> str:
        return self.process.log_text()

    def route(self, name: str = "db", **fields: Any) -> dict[str, Any]:
        """A route ``ssh://name`` to this server, its host key pinned; ``fields`` add the
        policy and the rest."""
        return {"from": f"ssh://{name}", "to": f"ssh://127.0.0.1:{self.port}",
                "ssh_upstream_host_keys": [self.host_public], **fields}


def _config(run: Path, user: str, ca_public: Path) -> str:
    return "\n".join([
        "ListenAddress 127.0.0.1",
        f"HostKey {run / 'host_ed25519'}",
        "PidFile none",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthorizedKeysFile none",
        f"TrustedUserCAKeys {ca_public}",
        f"AllowUsers {user}",
        "AllowTcpForwarding yes",
        "Subsystem sftp internal-sftp",
        "ExposeAuthInfo yes",  # $SSH_USER_AUTH: the certificate a session logged in with
        "PrintMotd no",
        "PrintLastLog no",
        "LogLevel VERBOSE",
        "",
    ])


@contextlib.contextmanager
def cert_sshd(tmp_path: Path, ca_public: str, *, timeout: float = 15.0,
              login: str | None = None) -> Iterator[CertSshd]:
    """``login``: the one user it lets in (default: the current one)."""
    sshd = find_binary("sshd")
    if sshd is None:
        raise MissingBinary("sshd", INSTALL_HINT)
    sshd = os.path.abspath(sshd)  # sshd re-executes itself: absolute path
    run = tmp_path / "sshd"
    run.mkdir(parents=True)
    user = login or getpass.getuser()
    keygen(run / "host_ed25519", "server host")
    (run / "user_ca.pub").write_text(ca_public + "\n")
    (run / "sshd_config").write_text(_config(run, user, run / "user_ca.pub"))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    host_public = " ".join((run / "host_ed25519.pub").read_text().split()[:2])
    port, process = start_sshd(sshd, run, timeout)
    try:
        yield CertSshd(port, user, host_public, process)
    finally:
        process.stop()


def ssh_argv(key: Path, port: int, user: str, *command: str,
             options: Sequence[str] = (), binary: str = "ssh") -> list[str]:
    """The OpenSSH client with no user configuration, ``key`` only, no host-key prompts,
    aimed at the gateway's SSH listener on ``port``."""
    found = find_binary(binary)
    if found is None:
        raise MissingBinary(binary, INSTALL_HINT)
    argv = [found, "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=20"]
    for option in options:
        argv += ["-o", option]
    port_flag = "-P" if binary in ("scp", "sftp") else "-p"
    return [*argv, port_flag, str(port), *([f"{user}@127.0.0.1"] if binary == "ssh" else []),
            *command]


def read_until(stream: object, marker: bytes, timeout: float) -> bytes:
    """Bytes of a pipe up to and including the line holding ``marker`` (bounded)."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen or not seen[seen.index(marker):].count(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{marker!r} not seen in {timeout:g}s; got {seen!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise AssertionError(f"stream ended before {marker!r}; got {seen!r}")
        seen += chunk
    return seen


class PtyProcess:
    """A process (the ssh client) on a pseudo-terminal of its own: what it prints is
    read from the terminal's master side, its window resized as a terminal emulator
    does (TIOCSWINSZ, then SIGWINCH)."""

    def __init__(self, argv: Sequence[str], rows: int = 24, columns: int = 80) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        # a session of its own with the terminal as its controlling one (/dev/tty)
        self.proc = subprocess.Popen(
            list(argv), stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
            close_fds=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.seen = b""

    def read_until(self, marker: bytes, timeout: float = 30.0) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{marker!r} not seen in {timeout:g}s; got {self.seen!r}")
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the process closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"terminal closed before {marker!r}; got {self.seen!r}")
            self.seen += chunk
        return self.seen

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def resize(self, rows: int, columns: int) -> None:
        import fcntl
        import signal
        import struct
        import termios

        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.proc.send_signal(signal.SIGWINCH)

    def close(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            os.close(self.master)


SIGN_IN_LINE = re.compile(rb"Sign in at (\S+) to continue")


def sign_in_ssh(argv: Sequence[str], login: str) -> tuple[subprocess.Popen[bytes], bytes, Any]:
    """Start ``ssh`` (interactive: no BatchMode), read the sign-in line from its stderr,
    sign in as ``login`` with the test browser and confirm the connection; the ssh
    process goes on (returned, with the stderr read so far and the browser)."""
    from .browser import Browser

    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        seen = read_until(proc.stderr, b"to continue", 60)
        match = SIGN_IN_LINE.search(seen)
        assert match, seen
        url = match.group(1).decode()
        browser = Browser()
        page = browser.sign_in(url, login)
        assert page.status == 200, page
        assert b"Allow this SSH connection?" in page.body, page.body
        token = page.body.split(b'name="csrf" value="')[1].split(b'"')[0]
        done = browser.request("POST", url, b"csrf=" + token)
        assert done.status == 200 and b"SSH connection allowed" in done.body, done.body
        return proc, seen, browser
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
