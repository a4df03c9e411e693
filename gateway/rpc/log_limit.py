"""One log line per key per ``SECONDS``: a misconfiguration between split processes
(another policy, another signing key) shows on every request or every periodic check,
and one line a while says it."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

SECONDS = 10.0
KEYS = 1_000  # keys remembered; past that the memory starts over


class MismatchLog:
    """``due(*key)``: whether the line for ``key`` is due now (and then it is counted)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: dict[tuple[Hashable, ...], float] = {}

    def due(self, *key: Hashable) -> bool:
        now = self.clock()
        if now - self._last.get(key, float("-inf")) < SECONDS:
            return False
        if len(self._last) >= KEYS:
            self._last.clear()
        self._last[key] = now
        return True
