"""A private PostgreSQL server on loopback, for tunnel tests that run ``psql``.

:func:`postgres` creates a cluster in ``tmp_path`` with ``initdb`` (trust authentication,
user ``postgres``) and runs ``postgres`` in the foreground on a free 127.0.0.1 port, its
Unix socket in the same directory, stopped by PID at the end. PostgreSQL refuses to run
as root: as root, both run as the ``postgres`` system user through ``setpriv``, which
execs (the PID stays the server's).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .peers import MissingBinary
from .processes import ManagedProcess, ProcessError, free_port, port_open

__all__ = ["INSTALL_HINT", "Postgres", "postgres", "server_binary"]

INSTALL_HINT = "apt-get install -y postgresql"
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class Postgres:
    port: int
    user: str
    process: ManagedProcess


def server_binary(name: str) -> str | None:
    """``initdb``/``postgres`` of the newest installed major version (Debian keeps them
    off PATH, in /usr/lib/postgresql/<major>/bin)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    return candidates[-1] if candidates else None


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise MissingBinary("setpriv", "apt-get install -y util-linux")
    return [setpriv, "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]


@contextlib.contextmanager
def postgres(tmp_path: Path, *, timeout: float = 30.0) -> Iterator[Postgres]:
    binaries = {}
    for name in ("initdb", "postgres"):
        found = server_binary(name)
        if found is None:
            raise MissingBinary(name, INSTALL_HINT)
        binaries[name] = found
    # pytest's temporary directories are private to us: the cluster gets its own
    # directory under /tmp, owned by the server user, removed at the end
    run = Path(tempfile.mkdtemp(prefix="gateway-test-pg-"))
    try:
        with _cluster(run, binaries, tmp_path, timeout) as server:
            yield server
    finally:
        shutil.rmtree(run, ignore_errors=True)


@contextlib.contextmanager
def _cluster(run: Path, binaries: dict[str, str], log_dir: Path, timeout: float
             ) -> Iterator[Postgres]:
    data = run / "data"
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(run, account.pw_uid, account.pw_gid)
    subprocess.run(_as_server_user([binaries["initdb"], "-D", str(data), "-U", "postgres",
                                    "--auth=trust", "--no-sync", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        process = ManagedProcess(_as_server_user([
            binaries["postgres"], "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
            "-k", str(run), "-c", "fsync=off"]), log_dir=log_dir, name=f"postgres-{port}")
        process.start()
        try:
            process.wait_ready(lambda port=port: port_open("127.0.0.1", port), timeout)
        except ProcessError:
            process.stop()
            if attempt < PORT_ATTEMPTS and "already in use" in process.log_text():
                continue
            raise
        break
    try:
        yield Postgres(port=port, user="postgres", process=process)
    finally:
        process.stop()
