"""Recordings written off the reactor thread, so that a slow or stalled disk never stalls
the connections the process serves.

One thread per process (``Recorder``) does every recording's file I/O, in order: it
creates the file (0600, directories 0700, never overwriting), writes what the reactor
queued (several events of a file in one ``write``) and closes it. The reactor side
(``RecordFile``) only encodes and gathers (handing the thread up to ``FLUSH_BYTES`` at
once, at most ``FLUSH_SECONDS`` late), and bounds what waits: over ``HIGH_WATER``
bytes not yet written, the session is held (``on_hold(True)``: its channels' windows are
not reopened, so the server's output and the person's input wait, as for a slow
terminal) until the thread is under ``LOW_WATER`` again. A recording is complete or
visibly failed, never silently thinned.

A file that cannot be created or written (disk full, directory gone, permissions), or
whose writes make no progress for ``STALL_SECONDS``, fails: ``on_failure(reason)`` once,
on the reactor thread, and nothing more is queued for it. What a failure does to the
session is the service's decision (``ssh_recording_required``).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet.defer import Deferred

from gateway.private_dirs import make_private_dirs
from gateway.ssh.asciicast import Cast

HIGH_WATER = 1024 * 1024  # bytes queued for one file before its session is held
LOW_WATER = 256 * 1024  # ... and released
STALL_SECONDS = 10.0  # a held file whose writes make no progress this long has failed
# a file's events are handed to the thread together: this many bytes, or this long after
# the first (a queue operation and a thread wake-up per event cost more than the write)
FLUSH_BYTES = 256 * 1024
FLUSH_SECONDS = 0.05
STOP_SECONDS = 5.0  # at shutdown, how long the thread may take to write what is queued


class Disk(Protocol):
    """The file operations the thread performs (a test gives slow or failing ones)."""

    def create(self, path: str) -> int: ...

    def write(self, fd: int, data: bytes) -> None: ...

    def close(self, fd: int) -> None: ...

    def publish(self, path: str, final: str) -> None: ...


class OsDisk:
    def create(self, path: str) -> int:
        make_private_dirs(os.path.dirname(path))
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    def write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def close(self, fd: int) -> None:
        os.close(fd)

    def publish(self, path: str, final: str) -> None:
        os.link(path, final)  # (not rename: never over an existing file)
        os.unlink(path)


@dataclass(eq=False)
class _Job:
    file: RecordFile
    data: bytes | None  # None: close


class RecordFile:
    """One file the thread writes, as the reactor sees it."""

    def __init__(self, recorder: Recorder, path: str,
                 on_failure: Callable[[str], None], final: str = "") -> None:
        self.recorder = recorder
        self.path = final or path  # where readers find it
        self.writing = path  # where the thread writes it until it is closed
        self.final = final
        self.on_failure = on_failure
        self.on_hold: Callable[[bool], None] = lambda holding: None
        # True once the file exists; False when it cannot be made or written first
        self.opened: Deferred[bool] = Deferred()
        self.pending = 0  # bytes queued, not yet written
        self.holding = False
        self.failed = ""
        self.closed = False
        self._progress = 0.0  # when a write last completed (reactor time)
        self._watch: Any = None
        self._buffer: list[bytes] = []  # not yet handed to the thread
        self._buffered = 0
        self._flush_call: Any = None

    def write(self, text: str) -> None:
        if self.failed or self.closed or not text:
            return
        data = text.encode("utf-8")
        self.pending += len(data)
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= FLUSH_BYTES:
            self._flush()
        elif self._flush_call is None:
            self._flush_call = self.recorder.reactor.callLater(FLUSH_SECONDS, self._flush)
        if not self.holding and self.pending > HIGH_WATER:
            self.holding = True
            self._progress = self.recorder.reactor.seconds()
            self._watch = self.recorder.reactor.callLater(STALL_SECONDS, self._check)
            self.on_hold(True)

    def close(self) -> None:
        if not self.closed:
            self._flush()
            self.closed = True
            self.recorder.files.discard(self)
            self.recorder.submit(_Job(self, None))

    def _flush(self) -> None:
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        if self._buffer and not self.failed:
            self.recorder.submit(_Job(self, b"".join(self._buffer)))
        self._buffer = []
        self._buffered = 0

    # -- from the thread, on the reactor thread

    def _opened(self) -> None:
        if not self.opened.called:
            self.opened.callback(True)

    def _written(self, count: int) -> None:
        self.pending -= count
        self._progress = self.recorder.reactor.seconds()
        if self.holding and self.pending < LOW_WATER:
            self._release()

    def _failed(self, reason: str) -> None:
        if self.failed:
            return
        self.failed = reason
        self._flush()  # (drops what is buffered: nothing more is written)
        if self.holding:
            self._release()
        # the session first: a connection closed for it says why before the request
        # that waited for the file is refused
        self.on_failure(reason)
        if not self.opened.called:
            self.opened.callback(False)

    def _release(self) -> None:
        self.holding = False
        if self._watch is not None and self._watch.active():
            self._watch.cancel()
        self._watch = None
        self.on_hold(False)

    def _check(self) -> None:
        self._watch = None
        if not self.holding or self.failed:
            return
        waited = self.recorder.reactor.seconds() - self._progress
        if waited >= STALL_SECONDS:
            self._failed(f"no write to {self.path} completed in {STALL_SECONDS:g} s")
        else:
            self._watch = self.recorder.reactor.callLater(STALL_SECONDS - waited,
                                                          self._check)


class Recording:
    """A session's cast: its events encoded here, written by the thread."""

    def __init__(self, file: RecordFile, cast: Cast) -> None:
        self.file = file
        self.cast = cast
        self.path = file.path
        file.write(cast.first)

    def output(self, data: bytes, now: float) -> None:
        self.file.write(self.cast.output(data, now))

    def input(self, data: bytes, now: float) -> None:
        self.file.write(self.cast.input(data, now))

    def resize(self, width: int, height: int, now: float) -> None:
        self.file.write(self.cast.resize(width, height, now))

    def close(self) -> None:
        self.file.close()


class Recorder:
    """The thread and its queue. ``threaded=False`` (tests): nothing runs until
    ``drain()``, which does the thread's work on the caller's thread."""

    def __init__(self, reactor: Any, disk: Disk | None = None, *,
                 threaded: bool = True) -> None:
        self.reactor = reactor
        self.disk: Disk = disk or OsDisk()
        self.threaded = threaded
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._fds: dict[RecordFile, int] = {}
        self._dead: set[RecordFile] = set()  # failed in the thread: skipped
        self._stopping = False
        self.files: set[RecordFile] = set()  # open, as the reactor sees them
        # bytes written per file since the reactor last heard: one report at a time
        self._lock = threading.Lock()
        self._written: dict[RecordFile, int] = {}
        self._reporting = False

    def open(self, path: str, on_failure: Callable[[str], None], *,
             whole: bool = False) -> RecordFile:
        """A new file at ``path`` (created by the thread before its first write).
        ``whole``: written under ``path.part`` and named ``path`` once closed, so
        readers only ever see it complete."""
        file = RecordFile(self, path + ".part" if whole else path, on_failure,
                          path if whole else "")
        if not self._stopping:
            self.files.add(file)
        self.submit(_Job(file, b""))
        return file

    def submit(self, job: _Job) -> None:
        if self._stopping:
            return
        self._queue.put(job)
        if self.threaded and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gateway-ssh-recorder",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> Deferred[None]:
        """Write what is queued, close every file and end the thread (bounded)."""
        for file in list(self.files):
            file._flush()
        self.files.clear()
        self._stopping = True
        done: Deferred[None] = Deferred()
        thread = self._thread
        if thread is None:
            if not self.threaded:
                self.drain()
            done.callback(None)
            return done
        self._queue.put(None)

        def wait() -> None:
            thread.join(STOP_SECONDS)
            self.reactor.callFromThread(done.callback, None)
        threading.Thread(target=wait, name="gateway-ssh-recorder-stop", daemon=True).start()
        return done

    def drain(self) -> None:
        """(``threaded=False``) Do all queued work now."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is None:
                self._close_all()
                return
            self._work([job])

    # -- the thread

    def _tell(self, call: Callable[..., None], *args: Any) -> None:
        if self.threaded:
            self.reactor.callFromThread(call, *args)
        else:
            call(*args)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            stop = job is None
            batch = [] if job is None else [job]
            while not stop and len(batch) < 1024:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                else:
                    batch.append(job)
            self._work(batch)
            if stop:
                self._close_all()
                return

    def _work(self, batch: list[_Job]) -> None:
        """The batch in order, consecutive writes to one file joined into one."""
        index = 0
        while index < len(batch):
            job = batch[index]
            if job.data is None:
                self._close(job.file)
                self._dead.discard(job.file)
                index += 1
                continue
            data = [job.data]
            index += 1
            while index < len(batch) and batch[index].file is job.file \
                    and batch[index].data is not None:
                data.append(batch[index].data or b"")
                index += 1
            self._write(job.file, b"".join(data))

    def _write(self, file: RecordFile, data: bytes) -> None:
        if file in self._dead:
            return
        fd = self._fds.get(file)
        try:
            if fd is None:
                fd = self._fds[file] = self.disk.create(file.writing)
                self._tell(file._opened)
            if data:
                self.disk.write(fd, data)
        except OSError as exc:
            self._dead.add(file)
            self._close(file)
            self._tell(file._failed, f"cannot write {file.writing}: {exc.strerror or exc}")
            return
        if data:
            if not self.threaded:
                file._written(len(data))
                return
            with self._lock:
                self._written[file] = self._written.get(file, 0) + len(data)
                report, self._reporting = not self._reporting, True
            if report:
                self.reactor.callFromThread(self._report)

    def _report(self) -> None:
        """(reactor thread) What the thread wrote since the last report."""
        with self._lock:
            written, self._written = self._written, {}
            self._reporting = False
        for file, count in written.items():
            file._written(count)

    def _close(self, file: RecordFile) -> None:
        fd = self._fds.pop(file, None)
        if fd is None:
            return
        try:
            self.disk.close(fd)
            if file.final and file not in self._dead:
                self.disk.publish(file.writing, file.final)
        except OSError as exc:
            self._dead.add(file)
            self._tell(file._failed, f"cannot write {file.path}: {exc.strerror or exc}")

    def _close_all(self) -> None:
        for file in list(self._fds):
            self._close(file)
