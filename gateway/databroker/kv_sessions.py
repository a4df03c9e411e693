"""Sessions in kvstore (Redis), shared by every gateway process that uses it.

Each process keeps the sessions it has read for ``CACHE_SECONDS`` and reads them again
after that (``fetch``), so a sign-out or refresh in one process reaches the others within
that time; its own writes and deletes take effect at once. Records are encrypted at
rest (``RecordCipher``). The databroker issue replaces the time bound with the change
stream (sync from a version).

Standalone servers (``kvstore://``, ``kvstores://``) and sentinel (``kvstore+sentinel://``,
``kvstores+sentinel://``); cluster mode comes with the rest of the databroker.
"""

from __future__ import annotations

import base64
import json
import time
from types import MappingProxyType
from typing import Any

import txredisapi
from twisted.internet import defer
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.config.kvstore_dsn import KVSettings
from gateway.databroker.cipher import RecordCipher
from gateway.databroker.kv_tls import TLSFor, TLSSentinel, tls_for_hosts
from gateway.observability.metrics import (
    KVSTORE_WAIT_COUNT,
    KVSTORE_WAIT_DURATION_MS,
    STORAGE_OPERATION_DURATION_MS,
    watch_pool,
)
from gateway.sessions.model import Session

HASH = "gateway:session"
CACHE_SECONDS = 2.0
log = Logger()


class StorageUnavailable(Exception):
    """The kvstore could not answer in time; the request gets a 503."""


def to_json(session: Session) -> bytes:
    data = {f: getattr(session, f) for f in Session.__slots__}
    data["claims"] = {k: list(v) for k, v in session.claims.items()}
    data["groups"] = list(session.groups)
    return json.dumps(data, separators=(",", ":")).encode()


def from_json(raw: bytes) -> Session:
    data = json.loads(raw)
    data["claims"] = MappingProxyType({k: tuple(v) for k, v in data["claims"].items()})
    data["groups"] = tuple(data["groups"])
    return Session(**data)


class KVSessionStore:
    def __init__(self, reactor: Any, settings: KVSettings, cipher: RecordCipher,
                 reply_timeout: float = 3.0, tls_for: TLSFor | None = None,
                 service: str = "gateway") -> None:
        self.clock = reactor
        self.reply_timeout = reply_timeout
        if settings.mode == "cluster":
            raise ValueError("kvstore cluster mode is not available yet")
        self.cipher = cipher
        self._cache: dict[str, tuple[Session, float]] = {}
        host, port = settings.addresses[0]
        tls = (tls_for or tls_for_hosts(None, None, skip_verify=False)) if settings.tls else None
        common = {"password": settings.password or None,
                  "connectTimeout": reply_timeout, "replyTimeout": reply_timeout}
        if settings.mode == "sentinel":
            # The sentinels name the current master and follow failovers.
            self.sentinel = (TLSSentinel(list(settings.addresses), tls, **common) if tls
                             else txredisapi.Sentinel(list(settings.addresses), **common))
            # txredisapi waits this long for a sentinel to name a healthy master before it
            # retries; its 10 s default kept us on a dead master long after a failover.
            self.sentinel.discovery_timeout = 1.0
            self.redis = self.sentinel.master_for(
                settings.master_name, dbid=settings.db, poolsize=4,
                password=settings.password or None, replyTimeout=reply_timeout)
        else:
            self.redis = txredisapi.lazyConnectionPool(
                host=host, port=port, dbid=settings.db, poolsize=4, reconnect=True,
                username=settings.username or None,
                ssl_context_factory=tls(host) if tls else False, **common)
        self.service = service
        self._pool = _PoolStats(self.redis._factory, service)
        watch_pool(self._pool, service)

    def _timed(self, operation: str, d: Deferred[Any]) -> Deferred[Any]:
        started = time.monotonic()

        def observe(result: object) -> object:
            STORAGE_OPERATION_DURATION_MS.labels(
                operation, "error" if isinstance(result, Failure) else "ok", "kvstore",
                self.service).observe((time.monotonic() - started) * 1000)
            return result
        return d.addBoth(observe)

    def forget(self, session_id: str) -> None:
        self._cache.pop(session_id, None)

    # SessionStore (synchronous, from this process's copy)
    def get(self, session_id: str) -> Session | None:
        hit = self._cache.get(session_id)
        if hit is None or hit[1] <= self.clock.seconds():
            return None  # unknown or stale here: the caller fetches
        return hit[0]

    def put(self, session: Session) -> None:
        self._cache[session.id] = (session, self.clock.seconds() + CACHE_SECONDS)
        # Stored as base64 text: txredisapi's sentinel connections only work with its
        # default text replies.
        blob = base64.b64encode(self.cipher.seal("session", session.id, to_json(session)))
        d = self._timed("put", self.redis.hset(HASH, session.id, blob.decode("ascii")))
        d.addErrback(lambda f: log.error("kvstore: session not saved: {error}",
                                         error=f.getErrorMessage()))

    def delete(self, session_id: str) -> None:
        self._cache.pop(session_id, None)
        d = self._timed("delete", self.redis.hdel(HASH, session_id))
        d.addErrback(lambda f: log.error("kvstore: session not deleted: {error}",
                                         error=f.getErrorMessage()))

    def fetch(self, session_id: str) -> Deferred[Session | None]:
        """Read a session this process has not seen (errors: storage unavailable)."""
        async def run() -> Session | None:
            blob = await self._timed("get", self.redis.hget(HASH, session_id))
            if blob is None:
                self._cache.pop(session_id, None)
                return None
            raw = base64.b64decode(blob if isinstance(blob, bytes) else str(blob))
            session = from_json(self.cipher.open("session", session_id, raw))
            cached = self._cache.get(session_id)
            if cached is not None and cached[0] == session:
                session = cached[0]  # same record: keep the object (decision caches key on it)
            self._cache[session_id] = (session, self.clock.seconds() + CACHE_SECONDS)
            return session
        d = ensureDeferred(run())
        # A lazy pool queues commands while Redis is away; a request must not wait.
        d.addTimeout(self.reply_timeout, self.clock)

        def explain(failure: Failure) -> Failure:
            failure.trap(defer.TimeoutError, txredisapi.ConnectionError)
            reason = (f"no answer within {self.reply_timeout:g}s"
                      if failure.check(defer.TimeoutError) else failure.getErrorMessage())
            raise StorageUnavailable(
                f"kvstore unavailable ({reason}): is it up, and are the credentials in "
                "databroker_storage_connection_string and the databroker_storage_* TLS "
                "settings right? Connection errors are logged above")
        d.addErrback(explain)
        return d


class _PoolStats:
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

    def connections(self) -> int:
        return int(self.factory.size)

    def idle_connections(self) -> int:
        return len(self.factory.connectionQueue.pending)
