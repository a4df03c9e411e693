"""Reconnecting txredisapi pools through every outage (used by single-server,
sentinel and cluster connections alike)."""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

log = Logger()

MAX_RECONNECT_DELAY = 2.0


def keep_reconnecting(factory: Any, label: str = "kvstore") -> None:
    """Make a txredisapi pool reconnect through every outage, quickly.

    txredisapi gives up on the whole pool for good when AUTH or SELECT fails on a fresh
    connection, even when the cause is a timeout (a Redis that stalled, or is still
    loading its data): the gateway would answer 503 until restarted. Here such a
    connection is just dropped and tried again with the usual backoff (a wrong password
    is logged at every attempt, so an operator who fixes the ACL needs no restart), and
    the backoff stops at ``MAX_RECONNECT_DELAY`` instead of txredisapi's 10 s.
    ``disconnect`` (shutdown) still stops everything: it does not use ``stopTrying``.
    """
    factory.maxDelay = MAX_RECONNECT_DELAY
    factory.stopTrying = lambda: None
    if factory.deferred is not None:
        # txredisapi fails this with the first connection error and nobody else waits
        # on it; the error is logged (here and by txredisapi), not left "unhandled"
        factory.deferred.addErrback(lambda f: log.warn(
            "{label}: connection not ready yet, retrying: {error}", label=label,
            error=f.getErrorMessage()))
