"""What makes a process a worker rather than a whole gateway (``gateway.tree`` reads it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WorkerRole:
    """Worker ``index`` of a supervisor: it adopts the listening descriptors in
    ``inherited`` (by address), watches no file and takes no signal for reloads (the
    supervisor sends them), serves no metrics listener (the supervisor gathers its
    registry) and says it is ready through ``announce`` rather than to systemd."""

    index: int
    inherited: Mapping[str, int] = field(default_factory=dict)
    announce: Callable[[], None] = lambda: None
