"""A private OpenSSH ``sshd`` on loopback, for tunnel tests.

:func:`sshd` generates a host key and a client key in ``tmp_path``, writes an
``sshd_config`` that admits only that client key for the current user (no PAM, no
passwords, no strict modes for the temp files) and runs ``sshd -D -e`` in the
foreground on a free 127.0.0.1 port, stopped by PID at the end::

    with sshd(tmp_path) as server:
        subprocess.run(server.ssh_argv("127.0.0.1", "echo hi", port=server.port))

Run as root, sshd needs its privilege-separation directory ``/run/sshd``; it is created
when missing (as Debian's unit does).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .peers import MissingBinary, find_binary, start_on_free_port
from .processes import ManagedProcess, port_open

__all__ = ["INSTALL_HINT", "Sshd", "sshd"]

INSTALL_HINT = "apt-get install -y openssh-server openssh-client"


@dataclass(frozen=True)
class Sshd:
    """A running private sshd and the client key it accepts."""

    port: int
    user: str
    client_key: Path
    process: ManagedProcess
    ssh: str

    def ssh_argv(self, host: str, command: str, *, port: int | None = None,
                 options: Sequence[str] = ()) -> list[str]:
        """``ssh`` with no user configuration, this server's client key, no host-key
        prompts and no password prompts, running ``command`` as :attr:`user`."""
        argv = [self.ssh, "-F", "/dev/null", "-i", str(self.client_key),
                "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=30"]
        for option in options:
            argv += ["-o", option]
        argv += ["-p", str(port or self.port), f"{self.user}@{host}", command]
        return argv


def _config(run: Path, user: str) -> str:
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
        f"AuthorizedKeysFile {run / 'authorized_keys'}",
        f"AllowUsers {user}",
        "PrintMotd no",
        "PrintLastLog no",
        "LogLevel VERBOSE",
        "",
    ])


def _keygen(keygen: str, path: Path, comment: str) -> None:
    subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


def start_sshd(binary: str, run: Path, timeout: float) -> tuple[int, ManagedProcess]:
    """``binary`` (an absolute path: sshd re-executes itself) with ``run/sshd_config`` on
    a free 127.0.0.1 port, its log in ``run``."""
    process, port = start_on_free_port(
        lambda port: ManagedProcess([binary, "-D", "-e", "-f", str(run / "sshd_config"),
                                     "-p", str(port)], log_dir=run, name=f"sshd-{port}"),
        lambda process, port: process.wait_ready(lambda: port_open("127.0.0.1", port),
                                                 timeout),
        "127.0.0.1")
    return port, process


@contextlib.contextmanager
def sshd(tmp_path: Path, *, timeout: float = 15.0) -> Iterator[Sshd]:
    binaries = {}
    for name in ("sshd", "ssh", "ssh-keygen"):
        found = find_binary(name)
        if found is None:
            raise MissingBinary(name, INSTALL_HINT)
        binaries[name] = os.path.abspath(found)  # sshd re-executes itself: absolute path
    run = Path(tmp_path) / "sshd"
    run.mkdir(parents=True)
    user = getpass.getuser()
    _keygen(binaries["ssh-keygen"], run / "host_ed25519", "host")
    _keygen(binaries["ssh-keygen"], run / "client_ed25519", "client")
    (run / "authorized_keys").write_text((run / "client_ed25519.pub").read_text())
    (run / "sshd_config").write_text(_config(run, user))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    port, process = start_sshd(binaries["sshd"], run, timeout)
    try:
        yield Sshd(port=port, user=user, client_key=run / "client_ed25519", process=process,
                   ssh=binaries["ssh"])
    finally:
        process.stop()
