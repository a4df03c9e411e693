"""The databroker of this process: the record store, the change stream, sessions, and
directory data, started and stopped with the gateway.

The backend is chosen once, at start (``databroker_storage_*`` are read then: a change
needs a restart and is logged as such); the directory provider follows reloads of
``idp_service_account`` and ``idp_refresh_directory_*``.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.config.material import Reader
from gateway.config.providers import directory_provider
from gateway.config.snapshot import Snapshot
from gateway.databroker.directory_records import DirectorySync, DirectoryView
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION, Record, RecordStore
from gateway.databroker.session_ends import SessionEnds
from gateway.databroker.session_records import RecordSessionStore
from gateway.sessions.live import LiveConnections

log = Logger()

SWEEP_SECONDS = 60.0
DRAIN_SECONDS = 5.0
STORAGE_SETTINGS = ("databroker_storage_type", "databroker_storage_connection_string",
                    "databroker_storage_cert_file", "databroker_storage_key_file",
                    "databroker_storage_ca_file", "databroker_storage_tls_skip_verify")


def record_store(reactor: Any, snapshot: Snapshot, service: str = "gateway") -> RecordStore:
    """Memory by default; kvstore (Redis) with ``databroker_storage_type: kvstore``."""
    o = snapshot.options
    if o.databroker_storage_type != "kvstore":
        return MemoryRecordStore(reactor.seconds)
    from gateway.config.kvstore_dsn import parse_dsn
    from gateway.databroker.cipher import RecordCipher
    from gateway.databroker.kv_connect import connect
    from gateway.databroker.kv_records import KVRecordStore
    from gateway.databroker.kv_tls import tls_for_hosts

    m = snapshot.material
    tls_for = tls_for_hosts(m.storage_ca, m.storage_client_certificate,
                            o.databroker_storage_tls_skip_verify)
    reply_timeout = 3.0
    redis = connect(parse_dsn(o.databroker_storage_connection_string), reply_timeout,
                    tls_for, service, reactor)
    return KVRecordStore(reactor, redis, RecordCipher(m.shared_secret),
                         reply_timeout=reply_timeout, service=service)


class Databroker(Service):
    def __init__(self, reactor: Any, snapshot: Snapshot,
                 store: RecordStore | None = None) -> None:
        self.reactor = reactor
        self.snapshot = snapshot
        # (an empty memory store is falsy: it has a length)
        self.store = store if store is not None else record_store(reactor, snapshot)
        self.follower = ChangeFollower(reactor, self.store)
        self.sessions = RecordSessionStore(self.store, self.follower,
                                           complete=self.store.backend == "memory")
        # this process's tunnels, upgraded and SSH connections by session: a session's
        # tombstone in the change stream closes them (after ``sessions`` dropped its
        # copy: subscribers are called in order)
        self.live = LiveConnections()
        self.follower.subscribe(SESSION, self._session_changed)
        self.ends = SessionEnds(self.sessions, self.follower)
        self.directory: DirectoryView | None = None
        self._view: DirectoryView | None = None
        self.holder = os.urandom(8).hex()  # this process, in leases
        self.sync: DirectorySync | None = None
        self._sweep: Any = None
        self._configure_directory(snapshot)

    def _session_changed(self, record: Record) -> None:
        if record.deleted:
            closed = self.live.end(record.id)
            if closed:
                log.info("databroker: session {id} ended: {n} open connection(s) closed",
                         id=record.id, n=closed)

    # -- configuration

    def apply(self, snapshot: Snapshot) -> None:
        old, new = self.snapshot.options, snapshot.options
        changed = [k for k in STORAGE_SETTINGS if getattr(old, k) != getattr(new, k)]
        if changed:
            log.warn("{settings} changed: the databroker keeps its storage until the "
                     "gateway restarts", settings=", ".join(changed))
        self.snapshot = snapshot
        self._configure_directory(snapshot)

    def _configure_directory(self, snapshot: Snapshot) -> None:
        """Every new snapshot rebuilds the provider (files it names, such as
        ``password_file``, may be what changed) and runs a sync at once."""
        o = snapshot.options
        if self.sync is not None:
            self.sync.stop()
            self.sync = None
        provider = None
        if o.idp_service_account:
            from gateway.directory.provider import provider_for

            try:
                base = os.path.dirname(os.path.abspath(snapshot.source)) \
                    if snapshot.source != "environment" else os.getcwd()
                provider = provider_for(o.idp_service_account, self.reactor,
                                        Reader(base).read)
            except ValueError as exc:  # validated at load; kept for safety
                log.error("idp_service_account: {error}", error=str(exc))
        if provider is None:
            self.directory = None  # groups come from the IdP's groups claim
            return
        owner = directory_provider(o.identity_providers)
        if self.directory is None:
            if self._view is None:  # made once: it subscribes to the change stream
                self._view = DirectoryView(self.follower, self.store)
            self.directory = self._view
            if self.running:
                self.directory.reload()
        if self.directory.provider != owner:
            self.directory.provider = owner
            self.directory.version += 1  # decisions cached for the old owner are stale
        self.sync = DirectorySync(self.reactor, self.store, provider,
                                  float(o.idp_refresh_directory_interval),
                                  float(o.idp_refresh_directory_timeout),
                                  written=self.follower.kick, holder=self.holder,
                                  removed=partial(self._directory_removed, owner))
        if self.running:
            self.sync.start()

    def _directory_removed(self, owner: str, users: list[tuple[str, str]]) -> Deferred[None]:
        """Users the directory no longer lists (deleted, or disabled: out of its user
        filter) lose every session, in the sync run that saw it (a failure fails the run,
        so the next one tries again). Only sessions of the directory's provider
        (``owner``): the same id or address at another provider is someone else."""
        def ended(ids: list[str]) -> None:
            if ids:
                log.info("directory: {n} session(s) of {users} user(s) no longer in the "
                         "directory ended", n=len(ids), users=len(users))
        return self.ends.by_directory(owner, users).addCallback(ended)

    # -- service

    def startService(self) -> None:
        Service.startService(self)
        self.follower.start()
        watch = getattr(self.store, "watch", None)
        if watch is not None:  # a remote store's change stream, the memory store's writes
            watch(self.follower.kick)
        if self.directory is not None:
            self.directory.reload()
        if self.sync is not None:
            self.sync.start()
        self._sweep = self.reactor.callLater(SWEEP_SECONDS, self._do_sweep)
        log.info("databroker: {backend} storage", backend=self.store.backend)

    def _do_sweep(self) -> None:
        d = self.store.sweep(self.reactor.seconds())
        d.addErrback(lambda f: log.warn("databroker: sweep failed: {error}",
                                        error=f.getErrorMessage()))
        self._sweep = self.reactor.callLater(SWEEP_SECONDS, self._do_sweep)

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        if self._sweep is not None and self._sweep.active():
            self._sweep.cancel()
        releasing = self.sync.stop(release=True) if self.sync is not None else None
        polling = self.follower.stop()

        async def finish() -> None:
            if polling is not None:  # its end may retry writes: drain after it
                await polling
            if releasing is not None:
                await releasing
            await self.sessions.drain(DRAIN_SECONDS, self.reactor)
            await self.store.close()
        return defer.ensureDeferred(finish())

