"""Recordings off the reactor thread (``gateway.ssh.recorder``): the reactor side only
queues; a disk slower than the session holds that session (not the process) and lets it
go once the thread has caught up; a disk that fails or stalls fails the recording once,
with the reason; files are 0600, never overwritten, and closed at stop.

The threaded cases run the real thread against a disk whose writes wait on an event; the
reactor is a Clock whose ``callFromThread`` queues to the test, which runs the calls."""

from __future__ import annotations

import errno
import os
import queue
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.ssh.recorder import (
    FLUSH_SECONDS,
    HIGH_WATER,
    STALL_SECONDS,
    OsDisk,
    Recorder,
    RecordFile,
)

WAIT = 10.0  # seconds any one wait for the thread may take


class ThreadReactor(Clock):
    """A Clock with ``callFromThread``: calls from the thread wait in a queue for
    ``run_calls`` on the test's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.from_thread: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = \
            queue.SimpleQueue()

    def callFromThread(self, call: Callable[..., Any], *args: Any) -> None:
        self.from_thread.put((call, args))

    def run_calls(self, until: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: not within {WAIT:g} s")
            try:
                call, args = self.from_thread.get(timeout=left)
            except queue.Empty:
                continue
            call(*args)


class GatedDisk(OsDisk):
    """Writes wait until ``gate`` is set; ``fail_with`` makes them fail instead."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.fail_with: OSError | None = None
        self.writes = 0

    def write(self, fd: int, data: bytes) -> None:
        if not self.gate.wait(WAIT):
            raise AssertionError("the test never opened the gate")
        if self.fail_with is not None:
            raise self.fail_with
        self.writes += 1
        super().write(fd, data)


def new_path(name: str = "c-0.cast") -> str:
    return os.path.join(tempfile.mkdtemp(prefix="ssh-recorder-"), "2026-01-01", name)


class Watch:
    """What a RecordFile told its session."""

    def __init__(self, file: RecordFile) -> None:
        self.holds: list[bool] = []
        self.failures: list[str] = []
        file.on_hold = self.holds.append
        file.on_failure = self.failures.append


class ThreadedTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = ThreadReactor()
        self.disk = GatedDisk()
        self.recorder = Recorder(self.reactor, self.disk)

    def tearDown(self) -> None:
        self.disk.gate.set()
        stopped = self.recorder.stop()
        self.reactor.run_calls(lambda: stopped.called, "the recorder stopped")

    def test_a_slow_disk_holds_the_session_and_never_the_reactor(self) -> None:
        path = new_path()
        file = self.recorder.open(path, lambda reason: None)
        watch = Watch(file)
        line = "x" * 1023 + "\n"
        started = time.monotonic()
        for _ in range(2 * HIGH_WATER // len(line)):  # twice what may wait
            file.write(line)
        # the reactor's side took no time waiting for the (blocked) disk
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertEqual(watch.holds, [True])
        self.assertEqual(file.pending, 2 * HIGH_WATER // len(line) * len(line))
        self.disk.gate.set()
        self.reactor.run_calls(lambda: watch.holds == [True, False], "released")
        file.close()
        self.reactor.run_calls(lambda: file.pending == 0, "all written")
        stopped = self.recorder.stop()
        self.reactor.run_calls(lambda: stopped.called, "the recorder stopped")
        self.assertEqual(os.path.getsize(path), file_size(2 * HIGH_WATER // len(line), line))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        self.assertEqual(watch.failures, [])
        # many queued events went down in few writes
        self.assertLess(self.disk.writes, 2 * HIGH_WATER // len(line) // 4)

    def test_a_stalled_disk_fails_the_recording_and_releases_the_session(self) -> None:
        file = self.recorder.open(new_path(), lambda reason: None)
        watch = Watch(file)
        self.reactor.run_calls(lambda: file.opened.called, "created")
        for _ in range(HIGH_WATER // 1024 + 1):
            file.write("y" * 1024)
        self.assertEqual(watch.holds, [True])
        self.reactor.advance(STALL_SECONDS - 1)
        self.assertEqual(watch.failures, [])
        self.reactor.advance(1)
        self.assertEqual(watch.holds, [True, False])
        self.assertEqual(len(watch.failures), 1)
        self.assertIn(f"completed in {STALL_SECONDS:g} s", watch.failures[0])
        file.write("more")  # nothing more is queued for a failed file
        self.assertEqual(file.failed, watch.failures[0])

    def test_a_full_disk_fails_the_recording_once_with_the_reason(self) -> None:
        file = self.recorder.open(new_path(), lambda reason: None)
        watch = Watch(file)
        self.disk.fail_with = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.disk.gate.set()
        file.write("first\n")
        file.write("second\n")
        self.reactor.advance(FLUSH_SECONDS)  # (handed to the thread together)
        self.reactor.run_calls(lambda: bool(watch.failures), "the failure")
        self.assertTrue(file.opened.called)  # (created; its writes failed)
        file.write("third\n")
        file.close()
        stopped = self.recorder.stop()
        self.reactor.run_calls(lambda: stopped.called, "the recorder stopped")
        self.assertEqual(len(watch.failures), 1)
        self.assertIn("No space left on device", watch.failures[0])


def file_size(count: int, line: str) -> int:
    return count * len(line.encode())


class UnthreadedTests(SynchronousTestCase):
    def test_a_directory_that_cannot_be_made_fails_the_open(self) -> None:
        base = tempfile.mkdtemp(prefix="ssh-recorder-")
        blocker = os.path.join(base, "not-a-directory")
        with open(blocker, "w"):
            pass
        rec = Recorder(Clock(), threaded=False)
        failures: list[str] = []
        file = rec.open(os.path.join(blocker, "day", "c-0.cast"), failures.append)
        rec.drain()
        self.assertIs(self.successResultOf(file.opened), False)
        self.assertEqual(len(failures), 1)
        self.assertIn("Not a directory", failures[0])
        self.assertIn(blocker, failures[0])

    def test_a_whole_file_is_named_once_complete(self) -> None:
        path = new_path("c-1.exec.json")
        rec = Recorder(Clock(), threaded=False)
        file = rec.open(path, lambda reason: None, whole=True)
        rec.drain()
        self.assertIs(self.successResultOf(file.opened), True)  # it exists, as .part
        self.assertEqual((file.path, os.path.exists(path)), (path, False))
        file.write('{"exit_status": 0}\n')
        file.close()
        rec.drain()
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), '{"exit_status": 0}\n')
        self.assertEqual(os.listdir(os.path.dirname(path)), ["c-1.exec.json"])
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)

    def test_events_are_handed_over_together_within_the_flush_time(self) -> None:
        path = new_path()
        clock = Clock()
        rec = Recorder(clock, threaded=False)
        file = rec.open(path, lambda reason: None)
        file.write("one\n")
        clock.advance(FLUSH_SECONDS / 2)
        file.write("two\n")
        rec.drain()
        self.assertEqual(os.path.getsize(path), 0)
        clock.advance(FLUSH_SECONDS / 2)
        rec.drain()
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "one\ntwo\n")
        self.assertEqual(file.pending, 0)

    def test_stop_writes_what_is_queued_and_refuses_more(self) -> None:
        path = new_path()
        rec = Recorder(Clock(), threaded=False)
        file = rec.open(path, lambda reason: None)
        file.write("queued\n")
        rec.stop()
        later = rec.open(new_path(), lambda reason: None)
        later.write("after the stop\n")
        rec.drain()
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "queued\n")
        self.assertFalse(later.opened.called)
