"""The cap on open downstream connections of the process (``max_connections``).

Past the cap a new connection is accepted and closed at once: the backlog keeps draining
(a full backlog would stall every client, the good ones included), the descriptor is
free again immediately, and no TLS or HTTP work is spent on it. The cap sits below the
descriptor limit, so accepting never meets EMFILE and upstream connections, log files
and the like still find descriptors.

Two log lines per episode, not one per refused connection: ``connection limit reached``
when the first connection is refused, ``connection limit cleared`` (with how many were
refused, and for how long) once the open count has fallen to the low-water mark and
at least ``MIN_EPISODE`` seconds have passed, so an attacker hovering at the cap
cannot make the log flap.
"""

from __future__ import annotations

import resource
from collections.abc import Sized

from twisted.logger import Logger

log = Logger()

RESERVED_FDS = 64  # listeners, logs, epoll, config watches, gRPC, Redis, health checks
MIN_AUTO = 16
MIN_EPISODE = 5.0  # seconds a "reached" episode lasts at least before "cleared"
LOW_WATER = 0.9  # cleared once the open count is at most this fraction of the cap


def auto_max_connections(soft_limit: int | None = None) -> int:
    """The cap when ``max_connections`` is 0: half of the descriptors left after
    ``RESERVED_FDS``, since each downstream connection may hold an upstream one."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        soft_limit = 1 << 20
    return max(MIN_AUTO, (soft_limit - RESERVED_FDS) // 2)


class ConnectionLimit:
    """Counts the open connections of ``sources`` (sets of live connections) against
    ``maximum``. ``admit`` is asked once per accepted connection; ``poll`` (from the
    listener's watchdog) notices that a saturated episode is over."""

    def __init__(self, maximum: int, sources: list[Sized] | None = None) -> None:
        self.maximum = maximum
        self.sources: list[Sized] = sources if sources is not None else []
        self.refused = 0
        self.saturated_since: float | None = None

    def open_count(self) -> int:
        return sum(len(source) for source in self.sources)

    def admit(self, now: float) -> bool:
        count = self.open_count()
        if count < self.maximum:
            return True
        self.refused += 1
        if self.saturated_since is None:
            self.saturated_since = now
            log.warn("connection limit reached: {open} connections open, max_connections "
                     "is {limit}; new connections are closed until some end",
                     open=count, limit=self.maximum)
        return False

    def poll(self, now: float) -> None:
        since = self.saturated_since
        if since is None or now - since < MIN_EPISODE:
            return
        count = self.open_count()
        if count > self.maximum * LOW_WATER:
            return
        log.info("connection limit cleared: {open} connections open (max_connections "
                 "{limit}); {refused} refused in {seconds:.0f} s", open=count,
                 limit=self.maximum, refused=self.refused, seconds=now - since)
        self.saturated_since = None
        self.refused = 0
