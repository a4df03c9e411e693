"""Connections to the kvstore named by ``databroker_storage_connection_string``:
a pool to one server, the master a set of sentinels names, or a cluster client; each
publishes ``kvstore_conns``/``kvstore_idle_conns`` and counts waits for a connection."""

from __future__ import annotations

import time
from typing import Any

import txredisapi
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.config.kvstore_dsn import KVSettings
from gateway.databroker.kv_tls import TLSFor, TLSSentinel, tls_for_hosts
from gateway.observability.metrics import (
    KVSTORE_WAIT_COUNT,
    KVSTORE_WAIT_DURATION_MS,
    watch_pool,
)

log = Logger()

POOL_SIZE = 4
MAX_RECONNECT_DELAY = 2.0


def connect(settings: KVSettings, reply_timeout: float, tls_for: TLSFor | None,
            service: str, reactor: Any = None) -> Any:
    """Something with txredisapi's ``execute_command`` and ``disconnect``."""
    tls = (tls_for or tls_for_hosts(None, None, skip_verify=False)) if settings.tls else None
    common = {"password": settings.password or None,
              "connectTimeout": reply_timeout, "replyTimeout": reply_timeout}
    if settings.mode == "cluster":
        from gateway.databroker.kv_cluster import ClusterClient

        if reactor is None:
            from twisted.internet import reactor
        return ClusterClient(
            reactor, list(settings.addresses), username=settings.username or None,
            password=settings.password or None, tls_for=tls, reply_timeout=reply_timeout,
            poolsize=POOL_SIZE, on_new_pool=lambda factory: _watched(factory, service))
    if settings.mode == "sentinel":
        # The sentinels name the current master and follow failovers.
        sentinel = (TLSSentinel(list(settings.addresses), tls, **common) if tls
                    else txredisapi.Sentinel(list(settings.addresses), **common))
        # txredisapi waits this long for a sentinel to name a healthy master before it
        # retries; its 10 s default kept us on a dead master long after a failover.
        sentinel.discovery_timeout = 1.0
        redis = sentinel.master_for(
            settings.master_name, dbid=settings.db, poolsize=POOL_SIZE,
            username=settings.username or None, password=settings.password or None,
            replyTimeout=reply_timeout)
    else:
        host, port = settings.addresses[0]
        redis = txredisapi.lazyConnectionPool(
            host=host, port=port, dbid=settings.db, poolsize=POOL_SIZE, reconnect=True,
            username=settings.username or None,
            ssl_context_factory=tls(host) if tls else False, **common)
    keep_reconnecting(redis._factory)
    _watched(redis._factory, service)
    return redis


def _watched(factory: Any, service: str) -> None:
    watch_pool(PoolStats(factory, service), service)


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


class PoolStats:
    """Connection counts of a txredisapi pool, and the time commands wait for one.

    txredisapi hands a command the next idle connection from ``connectionQueue``; when
    none is idle the command waits, which ``kvstore_wait_*`` count.
    """

    def __init__(self, factory: Any, service: str) -> None:
        self.factory = factory
        acquire = factory.getConnection
        waits = KVSTORE_WAIT_COUNT.labels(service)
        waited_ms = KVSTORE_WAIT_DURATION_MS.labels(service)

        def get_connection(peek: bool = False) -> Deferred[Any]:
            if factory.connectionQueue.pending:
                return acquire(peek)  # type: ignore[no-any-return]
            started = time.monotonic()
            d: Deferred[Any] = acquire(peek)

            def waited(result: object) -> object:
                waits.inc()
                waited_ms.inc((time.monotonic() - started) * 1000)
                return result
            return d.addBoth(waited)
        factory.getConnection = get_connection
        factory._gateway_pool_stats = self  # keep alive with the factory

    def connections(self) -> int:
        return int(self.factory.size)

    def idle_connections(self) -> int:
        return len(self.factory.connectionQueue.pending)
