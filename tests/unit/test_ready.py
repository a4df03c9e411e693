"""Readiness: reported once the reactor runs (signal handlers installed), not when the
services start; systemd is told through NOTIFY_SOCKET."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.services.ready import ReadyService, notify_systemd


class ReadyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events: list[dict[str, object]] = []
        globalLogPublisher.addObserver(self.events.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def ready_lines(self) -> list[object]:
        return [e for e in self.events if "gateway ready" in str(e.get("log_format"))]

    def test_ready_only_when_running(self) -> None:
        """Starting the service says nothing; the reactor running does."""
        reactor = MemoryReactorClock()
        service = ReadyService(reactor, "all")
        service.startService()
        self.assertFalse(service.ready)
        self.assertEqual(self.ready_lines(), [])
        reactor.run()  # MemoryReactor fires its when-running hooks
        self.assertTrue(service.ready)
        self.assertEqual(len(self.ready_lines()), 1)

    def test_ready_moves_the_startup_heap_out_of_the_collector(self) -> None:
        """(a full collection walking every startup object paused all connections)"""
        import gc
        gc.unfreeze()
        self.addCleanup(gc.unfreeze)
        reactor = MemoryReactorClock()
        service = ReadyService(reactor, "all")
        service.startService()
        self.assertEqual(gc.get_freeze_count(), 0)
        reactor.run()
        self.assertGreater(gc.get_freeze_count(), 1000)

    def test_stopped_before_running_is_never_ready(self) -> None:
        reactor = MemoryReactorClock()
        service = ReadyService(reactor, "all")
        service.startService()
        service.stopService()
        reactor.run()
        self.assertFalse(service.ready)


class NotifyTests(SynchronousTestCase):
    def test_sends_to_notify_socket(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "notify")
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
                server.bind(path)
                self.assertTrue(notify_systemd(b"READY=1", {"NOTIFY_SOCKET": path}))
                self.assertEqual(server.recv(64), b"READY=1")

    def test_abstract_socket(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
            server.bind("\0gateway-ready-test")
            self.assertTrue(notify_systemd(b"READY=1",
                                           {"NOTIFY_SOCKET": "@gateway-ready-test"}))
            self.assertEqual(server.recv(64), b"READY=1")

    def test_no_manager(self) -> None:
        self.assertFalse(notify_systemd(b"READY=1", {}))
        self.assertFalse(notify_systemd(b"READY=1", {"NOTIFY_SOCKET": "/nonexistent/x"}))
