"""The running configuration: watches its files, reloads, swaps snapshots atomically.

A reload happens when the config file or any file it references changes (polled by
stat, which also catches atomic renames and symlink swaps) or when ``reload()`` is
called (SIGHUP, wired in ``gateway.tree``). A snapshot that fails validation is logged
with every problem and the running one stays. Bootstrap-only settings keep their
first value. Subscribers are called with each new snapshot, in order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.config.errors import ConfigErrors
from gateway.config.snapshot import Snapshot, keep_bootstrap, load_snapshot

Subscriber = Callable[[Snapshot], None]
FileStates = tuple[tuple[str, tuple[int, int, int] | None], ...]


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """Values the metrics endpoint publishes (``gateway_config_*``)."""

    last_reload_success: bool
    last_reload_success_timestamp: float
    checksum: int


def file_states(paths: frozenset[str]) -> FileStates:
    """(mtime_ns, size, inode) of every path, ``None`` for a missing file."""
    out: list[tuple[str, tuple[int, int, int] | None]] = []
    for path in sorted(paths):
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, None))
        else:
            out.append((path, (st.st_mtime_ns, st.st_size, st.st_ino)))
    return tuple(out)


class ConfigSource(Service):
    """Owns the current ``Snapshot`` and replaces it when the configuration changes."""

    log = Logger()

    def __init__(
        self,
        path: str | None,
        initial: Snapshot,
        clock: IReactorTime,
        *,
        environ: Mapping[str, str] | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        self.path = path
        self.environ = dict(os.environ if environ is None else environ)
        self.clock = clock
        self.poll_interval = poll_interval
        self._current = initial
        self._file_states = file_states(initial.files)
        self._subscribers: list[Subscriber] = []
        self._loop: LoopingCall | None = None
        self.status = ReloadStatus(True, initial.loaded_at, initial.checksum)

    @property
    def current(self) -> Snapshot:
        return self._current

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` with every new snapshot; returns an unsubscribe function."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def startService(self) -> None:
        Service.startService(self)
        if self.poll_interval <= 0:  # not watching: reloads are asked for (a worker's)
            return
        loop = LoopingCall(self.check_files)
        loop.clock = self.clock
        loop.start(self.poll_interval, now=False).addErrback(
            lambda f: self.log.failure("config file watcher stopped", f)
        )
        self._loop = loop

    def stopService(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        Service.stopService(self)

    def check_files(self) -> None:
        """Reload if any watched file changed since the last look."""
        current = file_states(self._current.files)
        if current != self._file_states:
            self._file_states = current
            self.reload("file changed")

    def reload(self, reason: str, file_bytes: bytes | None = None) -> bool:
        """Build the next snapshot and swap it in; ``False`` keeps the running one.
        ``file_bytes``: the configuration file as a supervisor read it (workers)."""
        now = self.clock.seconds()
        try:
            new = load_snapshot(self.path, self.environ, now=now, file_bytes=file_bytes)
        except ConfigErrors as exc:
            self.status = dataclasses.replace(self.status, last_reload_success=False)
            self.log.error(
                "configuration reload ({reason}) failed; keeping the running configuration:"
                "\n{problems}",
                reason=reason,
                problems="\n".join(f"  {p}" for p in exc.problems),
                errors=[str(p) for p in exc.problems],
                source=exc.source,
            )
            return False
        except Exception:  # a bug must not take the running config down with it
            self.status = dataclasses.replace(self.status, last_reload_success=False)
            self.log.failure("configuration reload ({reason}) crashed", reason=reason)
            return False
        self._file_states = file_states(new.files)
        new, frozen = keep_bootstrap(self._current, new)
        for key in frozen:
            self.log.warn("{key} changed, but it is bootstrap-only: restart to apply it", key=key)
        for warning in new.warnings:
            self.log.warn("config: {warning}", warning=str(warning))
        self.status = ReloadStatus(True, now, new.checksum)
        if new.checksum == self._current.checksum and not frozen:
            # At info: an operator's `systemctl reload` must leave a trace in the journal.
            self.log.info("configuration reload ({reason}): nothing changed", reason=reason)
            return True
        self._current = new
        self.log.info(
            "configuration reloaded ({reason}): {routes} routes, checksum {checksum}",
            reason=reason, routes=len(new.routes), checksum=new.checksum,
        )
        for subscriber in list(self._subscribers):
            try:
                subscriber(new)
            except Exception:
                self.log.failure("a configuration subscriber failed", subscriber=repr(subscriber))
        return True
