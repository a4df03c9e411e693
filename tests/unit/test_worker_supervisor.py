"""The supervisor's decisions, with a clock and fake processes: when a dead worker is
restarted, what a reload and a start send, when it is ready, how it stops, and a scrape
that one worker does not answer."""

from __future__ import annotations

import base64
import json
import tempfile
from typing import Any

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.running import ConfigSource
from gateway.workers import supervisor as sup
from gateway.workers.control import REPLY_FD, encode
from gateway.workers.supervisor import SharedListeners, WorkerProcess, WorkerSupervisor
from tests.unit.config.helpers import SECRET, base_config, load

KV = {"databroker_storage_type": "kvstore",
      "databroker_storage_connection_string": "kvstore://127.0.0.1:6379/0",
      "shared_secret": SECRET, "cookie_secret": SECRET, "workers": 2}


class FakeProcess:
    """What ``spawnProcess`` returns: records what the supervisor does to the child."""

    def __init__(self, protocol: WorkerProcess, pid: int) -> None:
        self.protocol = protocol
        self.pid = pid
        self.stdin = b""
        self.signals: list[str] = []

    def writeToChild(self, fd: int, data: bytes) -> None:
        assert fd == 0
        self.stdin += data

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)

    def messages(self) -> list[dict[str, Any]]:
        out, data = [], self.stdin
        while data:
            length, _, rest = data.partition(b":")
            size = int(length)
            out.append(json.loads(rest[:size]))
            data = rest[size + 1:]
        return out

    def reply(self, message: dict[str, Any]) -> None:
        self.protocol.childDataReceived(REPLY_FD, encode(message))

    def end(self, reason: Failure) -> None:
        self.protocol.processEnded(reason)


class ProcessReactor(MemoryReactorClock):
    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[FakeProcess, list[str], dict[int, Any]]] = []

    def spawnProcess(self, protocol: Any, executable: str, args: list[str], env: Any = None,
                     path: Any = None, uid: Any = None, gid: Any = None, usePTY: Any = False,
                     childFDs: Any = None) -> FakeProcess:
        process = FakeProcess(protocol, 1000 + len(self.spawned))
        protocol.makeConnection(process)
        self.spawned.append((process, args, dict(childFDs or {})))
        return process


def killed(signal: int = 9) -> Failure:
    return Failure(ProcessTerminated(signal=signal))


class SupervisorTests(SynchronousTestCase):
    def setUp(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-supervisor-")
        self.snapshot = load(base_config(**KV), directory=directory)
        self.reactor = ProcessReactor()
        self.source = ConfigSource(self.snapshot.source, self.snapshot, self.reactor,
                                   environ={}, poll_interval=0)
        self.listeners = SharedListeners(["127.0.0.1:0"], 2)
        self.supervisor = WorkerSupervisor(self.source, self.reactor, 2, self.listeners,
                                           argv=["worker"], environ={"NOTIFY_SOCKET": "@x"})
        self.supervisor.signals = False  # (no process-wide handlers in the test run)
        self.supervisor.privilegedStartService()
        self.supervisor.startService()
        self.addCleanup(self.listeners.close)

    def process(self, index: int) -> FakeProcess:
        worker = self.supervisor.workers[index]
        assert worker is not None
        transport: Any = worker.transport
        assert isinstance(transport, FakeProcess)
        return transport

    def test_start_hands_sockets_and_the_validated_snapshot(self) -> None:
        self.assertEqual(len(self.reactor.spawned), 2)
        for index, (process, args, fds) in enumerate(self.reactor.spawned):
            self.assertEqual(args[:3], ["worker", "--index", str(index)])
            self.assertIn("--listen", args)
            self.assertEqual(fds[4], self.listeners.sockets["127.0.0.1:0"][index].fileno())
            first = process.messages()[0]
            self.assertEqual(first["op"], "reload")
            self.assertEqual(base64.b64decode(first["config"]), self.snapshot.file_bytes)
        self.assertNotIn("NOTIFY_SOCKET", self.supervisor.environ)

    def test_ready_once_every_worker_is(self) -> None:
        ready = self.supervisor.ready()
        self.process(0).reply({"op": "ready", "checksum": self.snapshot.checksum})
        self.assertNoResult(ready)
        # a worker that built another snapshot is sent the supervisor's again
        self.process(1).reply({"op": "ready", "checksum": 12345})
        self.successResultOf(ready)
        self.assertEqual([m["op"] for m in self.process(1).messages()], ["reload", "reload"])
        self.assertEqual(len(self.process(0).messages()), 1)

    def test_restart_backs_off_while_young_and_not_after_a_long_life(self) -> None:
        delays = []
        for _ in range(4):
            self.process(0).end(killed())
            before = len(self.reactor.spawned)
            pending = [c for c in self.reactor.getDelayedCalls() if c.active()]
            delays.append(pending[0].getTime() - self.reactor.seconds())
            self.reactor.advance(delays[-1])
            self.assertEqual(len(self.reactor.spawned), before + 1)
        self.assertEqual(delays, [0.5, 1.0, 2.0, 4.0])
        self.reactor.advance(sup.YOUNG)  # it lived long: the pause is short again
        self.process(0).end(Failure(ProcessDone(0)))
        pending = [c for c in self.reactor.getDelayedCalls() if c.active()]
        self.assertEqual(pending[0].getTime() - self.reactor.seconds(), sup.RESTART_MIN)

    def test_reload_sends_the_new_file_to_every_live_worker(self) -> None:
        newer = load(base_config(**KV, log_level="warn"))
        self.process(1).end(killed())  # a dead worker is not written to
        self.supervisor.apply(newer)
        message = self.process(0).messages()[-1]
        self.assertEqual(message["op"], "reload")
        self.assertEqual(base64.b64decode(message["config"]), newer.file_bytes)

    def test_stop_terms_then_kills_and_waits_for_all(self) -> None:
        """The SIGKILL comes only after the workers' drain (shutdown_drain_timeout, 8 s
        by default) and their services' stop; the listening sockets close at once."""
        self.process(1).end(killed())  # its restart is pending: stopping cancels it
        stopped = self.supervisor.stopService()
        self.assertEqual(self.listeners.sockets, {})
        kill_at = self.snapshot.options.shutdown_drain_timeout + sup.STOP_TIMEOUT
        self.assertFalse([c for c in self.reactor.getDelayedCalls()
                          if c.active() and c.getTime() < kill_at])
        first = self.process(0)
        self.assertEqual(first.signals, ["TERM"])
        self.assertNoResult(stopped)
        self.reactor.advance(kill_at - 0.1)
        self.assertEqual(first.signals, ["TERM"])
        self.supervisor.stop_now()  # a second SIGTERM: passed on
        self.assertEqual(first.signals, ["TERM", "TERM"])
        self.reactor.advance(0.1)
        self.assertEqual(first.signals, ["TERM", "TERM", "KILL"])
        first.end(killed())
        self.successResultOf(stopped)
        self.assertEqual(len(self.reactor.spawned), 2)  # nothing restarted
        self.assertEqual(self.listeners.sockets, {})

    def test_metrics_left_out_for_a_worker_that_does_not_answer(self) -> None:
        for index in (0, 1):
            self.process(index).reply({"op": "ready", "checksum": self.snapshot.checksum})
        gathered = self.supervisor.gather_metrics()
        asked = self.process(0).messages()[-1]
        self.assertEqual(asked["op"], "metrics")
        self.process(0).reply({"op": "metrics", "id": asked["id"], "text": "a 1\n"})
        self.assertNoResult(gathered)
        self.reactor.advance(sup.METRICS_TIMEOUT)
        self.assertEqual(self.successResultOf(gathered), ["a 1\n"])

    def test_a_malformed_message_kills_the_worker(self) -> None:
        self.process(0).protocol.childDataReceived(REPLY_FD, b"5:[1,2],")
        self.assertEqual(self.process(0).signals, ["KILL"])
