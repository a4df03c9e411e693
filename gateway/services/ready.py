"""Saying that the daemon is up: one log line, and ``READY=1`` to systemd.

twistd binds listening ports and starts the services *before* it runs the reactor,
and only the running reactor has its SIGTERM/SIGINT handlers installed. So an open
port does not mean the daemon is ready: a signal in that window ends the process
without an orderly stop. ``callWhenRunning`` fires after the handlers are in place;
that is when the gateway says it is ready (for ``Type=notify`` units through
``NOTIFY_SOCKET``, and for anyone reading the log).
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

log = Logger()


def notify_systemd(state: bytes, environ: dict[str, str] | None = None) -> bool:
    """Send ``state`` to the service manager (sd_notify); False when there is none."""
    address = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(state, address)
        except OSError as exc:
            log.warn("could not notify the service manager at NOTIFY_SOCKET: {error}",
                     error=str(exc))
            return False
    return True


def settle_heap() -> None:
    """What startup built (modules, the first snapshot, the listeners) lives as long
    as the process: move it out of the cyclic collector's reach (``gc.freeze``), so that
    a full collection walks only what requests allocate. Without it every full
    collection walked the whole heap, a pause of tens of milliseconds for every
    connection at once, now and then."""
    gc.collect()
    gc.freeze()


class ReadyService(Service):
    """The last service of the tree: reports readiness once the reactor runs (and, for
    a supervisor, once ``wait`` fires: its workers are ready). A worker ``announce``s
    it to its supervisor instead of telling systemd."""

    def __init__(self, reactor: Any, services: str, *,
                 wait: Callable[[], Deferred[None]] | None = None,
                 announce: Callable[[], None] | None = None) -> None:
        self.reactor = reactor
        self.services = services
        self.wait = wait
        self.announce = announce
        self.ready = False

    def startService(self) -> None:
        Service.startService(self)
        self.reactor.callWhenRunning(self._start)

    def _start(self) -> None:
        if self.wait is None:
            self._ready()
        else:
            self.wait().addCallback(lambda _: self._ready())

    def _ready(self) -> None:
        if not self.running:
            return
        self.ready = True
        settle_heap()
        if self.announce is not None:
            self.announce()
            log.info("worker ready: services={services} pid={pid}", services=self.services,
                     pid=os.getpid())
            return
        notified = notify_systemd(b"READY=1\nSTATUS=serving")
        log.info("gateway ready: services={services} pid={pid}", services=self.services,
                 pid=os.getpid(), systemd=notified)

    def stopping(self) -> None:
        """The stop begins (a drain first, ``services.drain``): no longer ready."""
        if self.ready and self.announce is None:
            notify_systemd(b"STOPPING=1\nSTATUS=draining")
        self.ready = False

    def stopService(self) -> None:
        if self.ready and self.announce is None:
            notify_systemd(b"STOPPING=1")
        Service.stopService(self)
