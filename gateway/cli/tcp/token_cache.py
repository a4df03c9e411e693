"""Tokens from the programmatic sign-in, kept per gateway and destination so the next
``gateway tcp`` run needs no browser.

Files live in ``$XDG_CACHE_HOME/gateway/`` (``~/.cache/gateway/`` when unset): the
directory is 0700, each token file 0600. A write goes to a private temporary file that
``os.replace`` puts in place, so a reader sees the old token or the new one, never a
mix, and concurrent clients cannot corrupt a file. Forgetting a refused token happens
under an exclusive lock and only if the file still holds that token: a token another
client has just stored survives.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from gateway.private_dirs import make_private_dirs

MAX_TOKEN = 16 * 1024


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):  # the XDG spec: relative values are ignored
        base = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "gateway"


def cache_key(gateway_origin: str, destination: str) -> str:
    digest = hashlib.sha256(f"{gateway_origin}|{destination}".encode()).hexdigest()
    return f"tcp-{digest[:40]}.token"


class TokenCache:
    """One token file (for one gateway origin and destination)."""

    def __init__(self, directory: Path, gateway_origin: str, destination: str) -> None:
        self.directory = directory
        self.path = directory / cache_key(gateway_origin, destination)

    def load(self) -> str | None:
        """The cached token; None when missing, unreadable or not a token."""
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_TOKEN + 1)
        except OSError:
            return None
        token = data.decode("ascii", "replace").strip()
        if not token or len(data) > MAX_TOKEN or not token.isprintable() or " " in token:
            return None
        return token

    def store(self, token: str) -> None:
        """Replace the cached token atomically. Raises OSError (the caller warns)."""
        self._ensure_directory()
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(token.encode("ascii") + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            with self._locked():
                os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def forget(self, token: str) -> bool:
        """Delete the file if it still holds ``token`` (expired or refused); True if so."""
        try:
            with self._locked():
                if self.load() != token:
                    return False
                self.path.unlink()
                return True
        except OSError:
            return False

    def _ensure_directory(self) -> None:
        make_private_dirs(self.directory)
        # (the cache's own directory, found with another mode, is made private again:
        # it holds bearer tokens; the cache home above it is left as it is)
        info = self.directory.stat()
        if stat.S_IMODE(info.st_mode) != 0o700 and info.st_uid == os.getuid():
            os.chmod(self.directory, 0o700)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on the cache directory's lock file (held for microseconds)."""
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
