"""The twistd process with ``workers`` > 1: it starts the workers and keeps them going.

- Start: every listener is bound here, one socket per worker (``bind_shared``); worker
  ``i`` gets its sockets as descriptors 4, 5, ... and adopts them.
- Ready: once every worker has said so (then systemd is told, for ``Type=notify``).
- A worker that exits while the supervisor runs is restarted with its own sockets,
  half a second later after a long life, with a growing pause (up to 30 s) when it
  keeps dying young; its socket stays open meanwhile, so connections wait rather than
  fail.
- Reload: the supervisor's ``ConfigSource`` watches the files and takes SIGHUP as
  before; each snapshot it accepts is sent, with the file's bytes, to every worker,
  so all of them build the snapshot that was validated.
- Stop (SIGTERM, SIGINT): every worker gets SIGTERM and drains and stops as a single
  gateway does (``services.drain``); the supervisor closes its copies of the listening
  sockets at once, so new connections are refused rather than queued for nobody. One
  still running ``shutdown_drain_timeout`` + ``STOP_TIMEOUT`` later gets SIGKILL. A
  second SIGTERM or SIGINT is passed on: the workers cut what is left and stop at once.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.error import CannotListenError, ProcessDone, ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.config.running import ConfigSource
from gateway.config.snapshot import Snapshot
from gateway.config.values import parse_address
from gateway.dataplane.listeners.shared import bind_shared
from gateway.workers.control import FIRST_LISTEN_FD, REPLY_FD, ControlReceiver, Message

log = Logger(namespace="gateway.workers")

STOP_TIMEOUT = 30.0  # after the workers' drain: their services' stop
METRICS_TIMEOUT = 5.0
# A worker that lived at least this long is restarted after RESTART_MIN; one dying
# younger waits RESTART_MIN doubled at each such death in a row, up to RESTART_MAX.
YOUNG = 10.0
RESTART_MIN = 0.5
RESTART_MAX = 30.0


class _Pipe:
    """The transport a ``ControlReceiver`` writes to: the worker's standard input."""

    def __init__(self, process: WorkerProcess) -> None:
        self.process = process

    def write(self, data: bytes) -> None:
        transport = self.process.transport
        if transport is not None and self.process.alive:
            transport.writeToChild(0, data)

    def loseConnection(self) -> None:
        log.error("worker {index}: malformed control message; stopping it",
                  index=self.process.index)
        self.process.signal("KILL")


class WorkerProcess(ProcessProtocol):
    """One worker, as the supervisor sees it."""

    def __init__(self, supervisor: WorkerSupervisor, index: int) -> None:
        self.supervisor = supervisor
        self.index = index
        self.alive = False
        self.ready = False
        self.started_at = 0.0
        self.pid = 0
        self.control = ControlReceiver(self._message)
        self.control.makeConnection(_Pipe(self))  # type: ignore[no-untyped-call]
        self.pending: dict[int, defer.Deferred[str | None]] = {}

    def connectionMade(self) -> None:
        self.alive = True
        transport: Any = self.transport
        self.pid = int(transport.pid or 0)

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == REPLY_FD:
            self.control.dataReceived(data)  # type: ignore[no-untyped-call]

    def send(self, message: Message) -> None:
        self.control.send(message)

    def signal(self, name: str) -> None:
        if self.alive and self.transport is not None:
            with contextlib.suppress(ProcessExitedAlready, OSError):
                self.transport.signalProcess(name)

    def _message(self, message: Message) -> None:
        op = message["op"]
        if op == "ready":
            self.ready = True
            self.supervisor.worker_ready(self, message)
        elif op == "metrics":
            waiting = self.pending.pop(int(message.get("id", -1)), None)
            if waiting is not None:
                text = message.get("text")
                waiting.callback(text if isinstance(text, str) else None)
        elif op == "reloaded" and not message.get("ok"):
            log.warn("worker {index} (pid {pid}) could not reload the configuration the "
                     "supervisor validated: {error}", index=self.index, pid=self.pid,
                     error=message.get("error", ""))

    def processEnded(self, reason: Failure) -> None:
        self.alive = False
        self.ready = False
        for waiting in self.pending.values():
            waiting.callback(None)
        self.pending.clear()
        self.supervisor.worker_ended(self, reason)


class SharedListeners:
    """The listeners' sockets, per address one per worker, bound at start-up."""

    def __init__(self, addresses: list[str], count: int) -> None:
        self.addresses = addresses
        self.count = count
        self.sockets: dict[str, list[socket.socket]] = {}

    def bind(self) -> None:
        """Raises ``CannotListenError`` for a port in use, and ``ValueError`` naming
        two of ``addresses`` that are one port (each worker's sockets share their port
        with ``SO_REUSEPORT``, so the kernel would spread one port's connections over
        two listeners instead of refusing the second bind)."""
        clash = overlapping(self.addresses)
        if clash:
            raise ValueError(f"{clash[0]} and {clash[1]} are the same port")
        for address in self.addresses:
            if address not in self.sockets:
                self.sockets[address] = bind_shared(address, self.count)

    def close(self) -> None:
        for socks in self.sockets.values():
            for sock in socks:
                sock.close()
        self.sockets.clear()


WILDCARDS = ("", "0.0.0.0", "::")


def overlapping(addresses: list[str]) -> tuple[str, str] | None:
    """Two of ``addresses`` that would listen on one port (equal hosts, or one of
    them every interface), or None."""
    seen: list[tuple[str, str, int]] = []
    for address in addresses:
        host, port = parse_address(address)
        for other, other_host, other_port in seen:
            if port == other_port and port != 0 and (
                    host == other_host or host in WILDCARDS or other_host in WILDCARDS):
                return other, address
        seen.append((address, host, port))
    return None


class WorkerSupervisor(Service):
    """Starts ``count`` workers on the ``listeners``' sockets."""

    name = "workers"

    def __init__(self, source: ConfigSource, reactor: Any, count: int,
                 listeners: SharedListeners, *,
                 argv: list[str] | None = None, environ: Mapping[str, str] | None = None
                 ) -> None:
        self.source = source
        self.reactor = reactor
        self.count = count
        self.listeners = listeners
        self.argv = argv or [sys.executable, "-m", "gateway.worker"]
        env = dict(os.environ if environ is None else environ)
        env.pop("NOTIFY_SOCKET", None)  # systemd hears from the supervisor only
        self.environ = env
        self.workers: list[WorkerProcess | None] = [None] * count
        self._young_deaths = [0] * count
        self._restarts: dict[int, Any] = {}
        self._all_ready: defer.Deferred[None] | None = defer.Deferred()
        self._stopped: defer.Deferred[None] | None = None
        self._metrics_id = 0
        self._unsubscribe: Any = None
        self._kill_timeout = STOP_TIMEOUT
        self.signals = True  # False in unit tests: no process-wide handlers

    # -- life ------------------------------------------------------------------
    def privilegedStartService(self) -> None:
        Service.privilegedStartService(self)
        try:
            self.listeners.bind()
        except CannotListenError as exc:
            log.critical("cannot listen on {address}: {error}",
                         address=f"{exc.interface}:{exc.port}", error=str(exc.socketError))
            raise SystemExit(1) from None
        except ValueError as exc:
            log.critical("cannot listen: {error}", error=str(exc))
            raise SystemExit(1) from None

    def startService(self) -> None:
        Service.startService(self)
        self._unsubscribe = self.source.subscribe(self.apply)
        for index in range(self.count):
            self.spawn(index)

    def ready(self) -> defer.Deferred[None]:
        """Fires once every worker has been ready (at start-up)."""
        waiting: defer.Deferred[None] = defer.Deferred()
        if self._all_ready is None:
            waiting.callback(None)
        else:
            self._all_ready.addCallback(lambda _: waiting.callback(None))
        return waiting

    def spawn(self, index: int) -> None:
        self._restarts.pop(index, None)
        if not self.running:
            return
        worker = WorkerProcess(self, index)
        child_fds: dict[int, int | str] = {0: "w", 1: 1, 2: 2, REPLY_FD: "r"}
        argv = [*self.argv, "--index", str(index)]
        if self.source.path:  # (absolute: a worker's working directory is no concern)
            argv += ["--config", os.path.abspath(self.source.path)]
        fd = FIRST_LISTEN_FD
        for address, socks in self.listeners.sockets.items():
            child_fds[fd] = socks[index].fileno()
            argv += ["--listen", f"{address}={fd}"]
            fd += 1
        self.workers[index] = worker
        worker.started_at = self.reactor.seconds()
        self.reactor.spawnProcess(worker, argv[0], argv, env=self.environ, childFDs=child_fds)
        # first message: the snapshot to start with (the file may be invalid by now)
        worker.send(_reload_message(self.source.current, "start"))
        log.info("worker {index} started (pid {pid})", index=index, pid=worker.pid)

    def worker_ready(self, worker: WorkerProcess, message: Message) -> None:
        current = self.source.current
        if message.get("checksum") != current.checksum:
            # a reload while it started (or a referenced file changed): ours again
            worker.send(_reload_message(current, "supervisor"))
        if self._all_ready is not None and all(w is not None and w.ready
                                               for w in self.workers):
            all_ready, self._all_ready = self._all_ready, None
            all_ready.callback(None)

    def worker_ended(self, worker: WorkerProcess, reason: Failure) -> None:
        index = worker.index
        if self.workers[index] is worker:
            self.workers[index] = None
        if self._stopped is not None:
            if all(w is None for w in self.workers):
                stopped, self._stopped = self._stopped, None
                stopped.callback(None)
            return
        if not self.running:
            return
        lived = self.reactor.seconds() - worker.started_at
        status = _status(reason)
        if lived >= YOUNG:
            self._young_deaths[index] = 0
            # (not 0: a worker ending with the supervisor, on a Ctrl-C that reached
            # them all, is not restarted before the supervisor's own stop begins)
            delay = RESTART_MIN
        else:
            delay = min(RESTART_MAX, RESTART_MIN * 2 ** self._young_deaths[index])
            self._young_deaths[index] += 1
        log.error("worker {index} (pid {pid}) ended after {lived:.1f} s: {status}; "
                  "restarting it in {delay} s", index=index, pid=worker.pid, lived=lived,
                  status=status, delay=delay)
        self._restarts[index] = self.reactor.callLater(delay, self.spawn, index)

    def stopService(self) -> defer.Deferred[None]:
        Service.stopService(self)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for call in self._restarts.values():
            if call.active():
                call.cancel()
        self._restarts.clear()
        live = [w for w in self.workers if w is not None and w.alive]
        if not live:
            self.listeners.close()
            return defer.succeed(None)
        stopped: defer.Deferred[None] = defer.Deferred()
        self._stopped = stopped
        drain = self.source.current.options.shutdown_drain_timeout
        log.info("stopping {count} workers (each drains for up to {drain:g} s)",
                 count=len(live), drain=drain)
        for worker in live:
            worker.signal("TERM")
        # The workers stop listening as their drain begins; without this the sockets,
        # still open here, would take connections that no worker accepts.
        self.listeners.close()
        previous = {number: signal.signal(number, self._signalled_again)
                    for number in (signal.SIGTERM, signal.SIGINT)} if self.signals else {}
        self._kill_timeout = drain + STOP_TIMEOUT
        kill = self.reactor.callLater(self._kill_timeout, self._kill_all)

        def done(result: None) -> None:
            if kill.active():
                kill.cancel()
            for number, handler in previous.items():
                signal.signal(number, handler)
        stopped.addCallback(done)
        return stopped

    def _signalled_again(self, signum: int, frame: FrameType | None) -> None:
        self.reactor.callFromThread(self.stop_now)

    def stop_now(self) -> None:
        """A second SIGTERM or SIGINT while the workers drain: they stop at once."""
        log.info("second stop signal: the workers stop now")
        for worker in self.workers:
            if worker is not None and worker.alive:
                worker.signal("TERM")

    def _kill_all(self) -> None:
        for worker in self.workers:
            if worker is not None and worker.alive:
                log.warn("worker {index} (pid {pid}) still running {timeout:g} s after "
                         "SIGTERM: killing it", index=worker.index, pid=worker.pid,
                         timeout=self._kill_timeout)
                worker.signal("KILL")

    # -- what the workers are told ---------------------------------------------
    def apply(self, snapshot: Snapshot) -> None:
        """A new snapshot (file change or SIGHUP, validated here): every worker builds it."""
        message = _reload_message(snapshot, "supervisor")
        for worker in self.workers:
            if worker is not None and worker.alive:
                worker.send(message)

    def gather_metrics(self) -> defer.Deferred[list[str]]:
        """Every ready worker's exposition (those that do not answer within
        ``METRICS_TIMEOUT`` are left out, and logged)."""
        asked: list[defer.Deferred[str | None]] = []
        for worker in self.workers:
            if worker is None or not worker.ready:
                continue
            self._metrics_id += 1
            answer: defer.Deferred[str | None] = defer.Deferred()
            worker.pending[self._metrics_id] = answer
            worker.send({"op": "metrics", "id": self._metrics_id})
            answer.addTimeout(METRICS_TIMEOUT, self.reactor,
                              onTimeoutCancel=_late(worker, self._metrics_id))
            asked.append(answer)
        gathered = defer.gatherResults(asked, consumeErrors=True)
        return gathered.addCallback(lambda texts: [t for t in texts if t is not None])


def _late(worker: WorkerProcess, request: int) -> Any:
    def on_timeout(result: object, timeout: float) -> None:
        worker.pending.pop(request, None)
        log.warn("worker {index} (pid {pid}) did not send its metrics within {timeout} s",
                 index=worker.index, pid=worker.pid, timeout=timeout)
    return on_timeout


def _status(reason: Failure) -> str:
    if reason.check(ProcessDone):
        return "exit status 0"
    value: Any = reason.value
    if getattr(value, "signal", None):
        return f"killed by signal {value.signal}"
    return f"exit status {getattr(value, 'exitCode', '?')}"


def _reload_message(snapshot: Snapshot, reason: str) -> Message:
    return {"op": "reload", "reason": reason,
            "config": base64.b64encode(snapshot.file_bytes).decode("ascii")}

