"""A worker process's end of the supervisor's control pipe, its log observer and its
arguments (the process itself is ``gateway.worker``).

A worker is a whole gateway (the tree ``gateway.tree.build_service_tree`` builds) except
that it
adopts the supervisor's listening sockets, reloads when the supervisor says so, with
the file bytes the supervisor validated, and answers the supervisor's requests for its
metrics. Its log lines carry ``worker: N``. When the supervisor goes away (the control
pipe closes) the worker stops: no worker outlives its supervisor.
"""

from __future__ import annotations

import argparse
import base64
import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import generate_latest
from twisted.logger import ILogObserver, LogEvent, Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.config.running import ConfigSource
from gateway.observability.metrics import REGISTRY
from gateway.workers.control import MAX_MESSAGE, ControlReceiver, Message, decode

log = Logger(namespace="gateway.workers")


@implementer(ILogObserver)
class WorkerLog:
    """Adds ``worker: N`` to every event before the gateway's own observer sees it."""

    def __init__(self, inner: ILogObserver, index: int) -> None:
        self.inner = inner
        self.index = index

    def __call__(self, event: LogEvent) -> None:
        event.setdefault("worker", self.index)
        self.inner(event)


class SupervisorLink(ControlReceiver):
    """The worker's end of the control pipe."""

    def __init__(self, reactor: Any) -> None:
        super().__init__(self._message)
        self.reactor = reactor
        self.source: ConfigSource | None = None
        self.stopping = False  # the worker's own shutdown closes the pipe too

    def _message(self, message: Message) -> None:
        op = message["op"]
        if op == "reload" and self.source is not None:
            try:
                config = base64.b64decode(message.get("config") or "", validate=True)
            except ValueError:
                config = None
            ok = self.source.reload(str(message.get("reason", "supervisor")),
                                    file_bytes=config if self.source.path else None)
            self.send({"op": "reloaded", "ok": ok, "checksum": self.source.current.checksum})
        elif op == "metrics":
            self.send({"op": "metrics", "id": message.get("id"),
                       "text": generate_latest(REGISTRY).decode()})

    def ready(self) -> None:
        checksum = self.source.current.checksum if self.source is not None else None
        self.send({"op": "ready", "checksum": checksum})

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        if self.stopping:
            return
        log.warn("supervisor gone: worker stopping")
        self.stopping = True
        if self.reactor.running:
            self.reactor.stop()


def read_first_message(fd: int) -> Message:
    """The supervisor's first message (the snapshot to start with), read before the
    reactor runs: byte by byte, so nothing after it is taken from the pipe."""
    length = b""
    while not length.endswith(b":"):
        byte = os.read(fd, 1)
        if not byte or len(length) > 10:
            raise ValueError("the control pipe closed or holds no netstring")
        length += byte
    size = int(length[:-1])
    if size > MAX_MESSAGE:
        raise ValueError("first control message too large")
    data = b""
    while len(data) < size + 1:
        chunk = os.read(fd, size + 1 - len(data))
        if not chunk:
            raise ValueError("the control pipe closed mid-message")
        data += chunk
    if data[-1:] != b",":
        raise ValueError("malformed netstring")
    return decode(data[:-1])


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gateway.worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--config")
    parser.add_argument("--listen", action="append", default=[],
                        help="ADDRESS=FD: a listening socket to adopt for ADDRESS")
    args = parser.parse_args(argv)
    inherited: dict[str, int] = {}
    for item in args.listen:
        address, _, fd = item.rpartition("=")
        inherited[address] = int(fd)
    args.inherited = inherited
    return args
