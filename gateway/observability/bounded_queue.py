"""Items the reactor hands off go to a bounded queue; one background thread sends them in
batches.

The reactor thread only appends to a deque (or, when it is full, counts a drop): a dead,
slow or refusing collector costs the proxy nothing but those drops, and the memory held
is at most ``max_queue`` items. The worker wakes every ``delay`` seconds or when a batch
is full, sends batches of at most ``max_batch``, and counts what was sent and what
failed; a failed batch is not retried (the queue behind it matters more). Spans
(``tracing.export_queue``) and audit events over OTLP (``audit_otlp``) use it; the counts
are published as ``gateway_telemetry_*`` metrics (``metrics.watch_telemetry``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class BoundedQueue(Generic[T]):
    """Subclasses say how a batch is sent (``send``: True when accepted) and what is
    closed when the worker ends (``close``)."""

    thread_name = "gateway-export"

    def __init__(self, max_queue: int = 2048, max_batch: int = 256,
                 delay: float = 1.0) -> None:
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.delay = delay
        self.queue: deque[T] = deque()
        self.dropped = 0  # reactor thread only
        self.exported = 0  # worker thread only
        self.failed = 0  # worker thread only
        self.last_error = ""
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def send(self, batch: Sequence[T]) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- the reactor thread

    def put(self, item: T) -> None:
        queue = self.queue
        if self._stopping or len(queue) >= self.max_queue:
            self.dropped += 1
            return
        queue.append(item)
        if len(queue) >= self.max_batch:
            self._wake.set()

    def stop(self, timeout: float) -> None:
        """Let the worker send what is queued (each request bounded by the exporter's
        own timeout); wait at most ``timeout`` for it (0: not at all)."""
        self._stopping = True
        self._wake.set()
        if timeout > 0:
            self._thread.join(timeout)

    @property
    def idle(self) -> bool:
        return not self._thread.is_alive()

    def counts(self) -> tuple[int, int, int]:
        """(exported, failed, dropped) so far."""
        return self.exported, self.failed, self.dropped

    # -- the worker

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            stopping = self._stopping
            self._drain()
            if stopping:
                with suppress(Exception):  # the process is stopping: nobody to tell
                    self.close()
                return

    def _drain(self) -> None:
        queue = self.queue
        while queue:
            batch: list[T] = []
            while queue and len(batch) < self.max_batch:
                batch.append(queue.popleft())
            self._send(batch)

    def _send(self, batch: Sequence[T]) -> None:
        try:
            ok = self.send(batch)
        except Exception as exc:  # any failure of a collector is counted
            self.failed += len(batch)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        if ok:
            self.exported += len(batch)
        else:
            self.failed += len(batch)


Counts = tuple[int, int, int]  # exported, failed, dropped


class Tally:
    """The counts of a queue that reloads replace: what the replaced ones counted is
    carried, so the published totals never go down."""

    def __init__(self) -> None:
        self.carried: Counts = (0, 0, 0)

    def retire(self, old: BoundedQueue[Any] | None) -> None:
        """Stop ``old``, a queue being replaced (if any), and keep its final counts."""
        if old is None:
            return
        counts = old.counts()
        self.carried = (self.carried[0] + counts[0], self.carried[1] + counts[1],
                        self.carried[2] + counts[2])
        old.stop(0.0)

    def total(self, current: BoundedQueue[Any] | None) -> Counts:
        """The carried counts plus those of ``current``, the running queue (if any)."""
        if current is None:
            return self.carried
        now = current.counts()
        return (self.carried[0] + now[0], self.carried[1] + now[1], self.carried[2] + now[2])
