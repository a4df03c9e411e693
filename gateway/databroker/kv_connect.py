"""Connections to the kvstore named by ``databroker_storage_connection_string``:
a pool to one server, the master a set of sentinels names, or a cluster client; each
publishes ``kvstore_conns``/``kvstore_idle_conns`` and counts waits for a connection."""

from __future__ import annotations

import time
from typing import Any

import txredisapi
from twisted.internet.defer import Deferred

from gateway.adapters.txredis import TLSFor, TLSSentinel, handler_factory
from gateway.config.kvstore_dsn import KVSettings
from gateway.databroker.kv_cluster import ClusterClient
from gateway.databroker.kv_reconnect import keep_reconnecting
from gateway.databroker.kv_tls import tls_for_hosts
from gateway.observability.metrics import (
    KVSTORE_WAIT_COUNT,
    KVSTORE_WAIT_DURATION_MS,
    watch_pool,
)

POOL_SIZE = 4


def connect(settings: KVSettings, reply_timeout: float, tls_for: TLSFor | None,
            service: str, reactor: Any = None) -> Any:
    """Something with txredisapi's ``execute_command`` and ``disconnect``."""
    tls = (tls_for or tls_for_hosts(None, None, skip_verify=False)) if settings.tls else None
    common = {"password": settings.password or None,
              "connectTimeout": reply_timeout, "replyTimeout": reply_timeout}
    if settings.mode == "cluster":
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
    keep_reconnecting(handler_factory(redis))
    _watched(handler_factory(redis), service)
    return redis


def _watched(factory: Any, service: str) -> None:
    watch_pool(PoolStats(factory, service), service)


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
