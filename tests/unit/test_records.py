"""The record store's memory backend, the change stream follower, sessions as records,
and directory data (sync and view), on a fake clock."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.databroker.directory_records import DirectorySync, DirectoryView
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import (
    DIRECTORY_GROUP,
    DIRECTORY_USER,
    SESSION,
    TOMBSTONE_SECONDS,
    USER,
    Changes,
    Record,
    StorageUnavailable,
)
from gateway.databroker.session_records import RecordSessionStore, from_json
from gateway.directory.model import Directory, DirectoryGroup, DirectoryUser
from gateway.observability.metrics import REGISTRY
from gateway.sessions.model import Session

NOW = 1_800_000_000.0


def result(d: Deferred[Any]) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if hasattr(out[0], "raiseException"):
        out[0].raiseException()
    return out[0]


def run(sync: DirectorySync) -> bool:
    return bool(result(ensureDeferred(sync.run_once())))


def session(sid: str, expires_at: float = NOW + 3600, **kw: Any) -> Session:
    return Session(id=sid, user_id="u-" + sid, email=f"{sid}@example.com",
                   issued_at=NOW - 10, expires_at=expires_at, **kw)


class MemoryStoreTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.store = MemoryRecordStore(self.clock.seconds)

    def test_versions_and_queries(self) -> None:
        """Every change takes the next version; query sees live records of one type."""
        one = result(self.store.put(SESSION, "a", b"1"))
        two = result(self.store.put(USER, "u", b"2"))
        self.assertEqual((one.version, two.version), (1, 2))
        self.assertEqual(result(self.store.get(SESSION, "a")), one)
        self.assertEqual([r.id for r in result(self.store.query(SESSION))], ["a"])
        result(self.store.delete(SESSION, "a"))
        self.assertIsNone(result(self.store.get(SESSION, "a")))
        self.assertEqual(result(self.store.query(SESSION)), [])
        result(self.store.delete(SESSION, "never"))  # nothing to delete: no new version
        changes = result(self.store.sync(0))
        self.assertEqual([(r.type, r.id, r.version, r.deleted) for r in changes.records],
                         [(USER, "u", 2, False), (SESSION, "a", 3, True)])
        self.assertEqual(changes.version, 3)
        self.assertEqual(result(self.store.sync(3)).records, ())

    def test_sync_batches_and_latest_only(self) -> None:
        """A record changed twice appears once, at its newest version; big change sets
        come in batches with ``more``."""
        for i in range(1500):
            self.store.put(SESSION, f"s{i}", b"x")
        self.store.put(SESSION, "s0", b"y")
        first = result(self.store.sync(0))
        self.assertTrue(first.more)
        self.assertEqual(len(first.records), 1000)
        rest = result(self.store.sync(first.version))
        self.assertFalse(rest.more)
        ids = [r.id for r in first.records + rest.records]
        self.assertEqual(len(ids), 1500)
        self.assertEqual(ids[-1], "s0")
        self.assertEqual(rest.records[-1].data, b"y")

    def test_reset_when_behind_tombstones(self) -> None:
        """A reader older than the tombstones swept away (or from the future: a store
        that was emptied) is told to start over."""
        self.store.put(SESSION, "a", b"1")
        self.store.delete(SESSION, "a")
        self.assertFalse(result(self.store.sync(1)).reset)
        self.clock.advance(TOMBSTONE_SECONDS + 1)
        self.assertEqual(result(self.store.sweep(self.clock.seconds())), 1)
        self.assertTrue(result(self.store.sync(1)).reset)
        self.assertFalse(result(self.store.sync(2)).reset)
        self.assertTrue(result(self.store.sync(99)).reset)

    def test_sweep_expires(self) -> None:
        """Expired records become tombstones (readers hear of it), others stay."""
        self.store.put(SESSION, "old", b"1", expires_at=NOW + 5)
        self.store.put(SESSION, "new", b"1", expires_at=NOW + 50)
        self.store.put(USER, "u", b"1")
        self.clock.advance(10)
        self.assertEqual(result(self.store.sweep(self.clock.seconds())), 1)
        self.assertIsNone(result(self.store.get(SESSION, "old")))
        self.assertIsNotNone(result(self.store.get(SESSION, "new")))
        self.assertTrue(result(self.store.sync(3)).records[0].deleted)

    def test_lease(self) -> None:
        """One holder at a time; it may renew; another gets it once it lapses."""
        self.assertTrue(result(self.store.lease("sync", "a", 10)))
        self.assertFalse(result(self.store.lease("sync", "b", 10)))
        self.assertTrue(result(self.store.lease("sync", "a", 10)))
        self.clock.advance(11)
        self.assertTrue(result(self.store.lease("sync", "b", 10)))

    def test_sweep_forgets_leases_past_their_time(self) -> None:
        """One lease per back-channel logout's jti: the memory store would otherwise
        hold every one it ever saw."""
        for i in range(3):
            self.assertTrue(result(self.store.lease(f"once:{i}", "x", 10 + i)))
        self.clock.advance(10.5)
        result(self.store.sweep(self.clock.seconds()))
        self.assertEqual(sorted(self.store._leases), ["once:1", "once:2"])
        self.assertFalse(result(self.store.lease("once:2", "y", 10)))  # still held


class FlakyStore(MemoryRecordStore):
    """A memory store that can be switched off like a Redis that went away."""

    down = False

    def put(self, *args: Any, **kw: Any) -> Deferred[Record]:
        if self.down:
            return defer.fail(StorageUnavailable("kvstore unavailable (test)"))
        return super().put(*args, **kw)

    def delete(self, type: str, id: str) -> Deferred[None]:
        if self.down:
            return defer.fail(StorageUnavailable("kvstore unavailable (test)"))
        return super().delete(type, id)

    def sync(self, since: int) -> Deferred[Changes]:
        if self.down:
            return defer.fail(StorageUnavailable("kvstore unavailable (test)"))
        return super().sync(since)


class SharedSessionsTests(SynchronousTestCase):
    """Two processes sharing one store, as with kvstore (``complete=False``)."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.store = FlakyStore(self.clock.seconds)
        self.a, self.fa = self.process()
        self.b, self.fb = self.process()

    def process(self) -> tuple[RecordSessionStore, ChangeFollower]:
        follower = ChangeFollower(self.clock, self.store, interval=0.5, stale_after=2.0)
        sessions = RecordSessionStore(self.store, follower, complete=False)
        follower.start()
        return sessions, follower

    def test_confirmed_put(self) -> None:
        """A sign-in's session: stored and confirmed, and then every process finds it."""
        self.clock.advance(0)
        one = session("one")
        self.assertIsNone(result(self.a.put_confirmed(one)))
        self.assertEqual(self.a.get("one"), one)
        self.assertEqual(result(self.b.fetch("one")), one)

    def test_confirmed_put_fails_while_the_store_is_down(self) -> None:
        """The store is down at sign-in: the write fails (the sign-in answers 503 and
        hands out no cookie) and the session is neither kept nor queued for a retry,
        so no process can meet a cookie for a session it cannot find (the soak saw
        302s for sessions made during a Redis outage)."""
        self.clock.advance(0)
        self.store.down = True
        one = session("one")
        self.failureResultOf(self.a.put_confirmed(one), StorageUnavailable)
        self.assertIsNone(self.a.get("one"))
        self.store.down = False
        self.clock.advance(1.0)  # the stream recovers: nothing was queued for later
        self.assertIsNone(result(self.b.fetch("one")))
        self.assertIsNone(result(self.a.fetch("one")))

    def test_revocation_reaches_the_other_process(self) -> None:
        """B reads A's session, A deletes it: B drops its copy at the next poll."""
        self.clock.advance(0)
        one = session("one")
        self.a.put(one)
        self.assertIsNone(self.b.get("one"))  # never read here
        self.assertEqual(result(self.b.fetch("one")), one)
        self.assertEqual(self.b.get("one"), one)
        self.a.delete("one")
        self.assertEqual(self.b.get("one"), one)  # not polled yet
        self.clock.advance(0.5)
        self.assertIsNone(self.b.get("one"))
        self.assertIsNone(result(self.b.fetch("one")))

    def test_refresh_replaces_copy_and_old_changes_are_ignored(self) -> None:
        """A refreshed session replaces the other process's copy; an older change never
        overwrites a newer copy."""
        self.clock.advance(0)
        self.a.put(session("one"))
        result(self.b.fetch("one"))
        newer = session("one", access_token="t2")
        self.a.put(newer)
        self.clock.advance(0.5)
        self.assertEqual(self.b.get("one"), newer)
        self.assertIsNotNone(self.a.get("one"))
        self.assertEqual(self.a.get("one"), newer)

    def test_stale_copies_are_not_trusted(self) -> None:
        """While the change stream fails, copies expire after ``stale_after`` (the
        caller then reads the store and gets its error: a 503, not a stale allow)."""
        self.clock.advance(0)
        self.a.put(session("one"))
        self.clock.advance(0.5)
        self.assertIsNotNone(self.a.get("one"))
        self.store.down = True
        self.clock.advance(1.0)
        self.assertIsNotNone(self.a.get("one"))
        self.clock.advance(1.5)
        self.assertIsNone(self.a.get("one"))

    def test_writes_kept_and_retried_when_the_store_is_back(self) -> None:
        """Writes refused while the store is down are retried after the next good sync;
        the newest intent per session wins."""
        self.clock.advance(0)
        self.store.down = True
        self.a.put(session("one"))
        self.a.put(session("two"))
        self.a.delete("two")
        self.store.down = False
        self.assertIsNone(result(self.store.get(SESSION, "one")))
        self.clock.advance(0.5)
        stored = result(self.store.get(SESSION, "one"))
        self.assertEqual(from_json(stored.data), session("one"))
        self.assertIsNone(result(self.store.get(SESSION, "two")))
        self.assertIsNotNone(result(self.store.get(USER, "u-one")))

    def test_equal_put_then_revocation(self) -> None:
        """Putting an equal session again keeps the copy current: a later deletion
        elsewhere still ends it here."""
        self.clock.advance(0)
        self.a.put(session("one"))
        self.a.put(session("one"))
        self.clock.advance(0.5)
        self.assertIsNotNone(self.a.get("one"))
        self.b.delete("one")
        self.clock.advance(0.5)
        self.assertIsNone(self.a.get("one"))

    def test_no_resurrection(self) -> None:
        """A write of a session deleted elsewhere (a refresh finishing after a sign-out)
        does not bring it back, in the store or here."""
        self.clock.advance(0)
        self.a.put(session("one"))
        self.b.delete("one")
        self.a.put(session("one", access_token="refreshed"))
        self.assertIsNone(result(self.store.get(SESSION, "one")))
        self.assertIsNone(self.a.get("one"))
        self.clock.advance(0.5)
        self.assertIsNone(self.a.get("one"))

    def test_fetch_racing_a_revocation(self) -> None:
        """A read answered with the record as it was before a deletion this process has
        already heard of is not trusted."""
        self.clock.advance(0)
        self.a.put(session("one"))
        before = result(self.store.get(SESSION, "one"))
        reading: Deferred[Record | None] = Deferred()
        self.store.get = lambda *a: reading  # type: ignore[method-assign,assignment]
        fetched = self.b.fetch("one")
        del self.store.get
        self.a.delete("one")
        self.clock.advance(0.5)  # b hears of the deletion while its read is under way
        reading.callback(before)
        self.assertIsNone(self.successResultOf(fetched))
        self.assertIsNone(self.b.get("one"))

    def test_drain_waits_for_writes(self) -> None:
        """``drain`` answers once writes in flight are done (or after its timeout)."""
        pending: Deferred[Record] = Deferred()
        self.store.put = lambda *a, **k: pending  # type: ignore[method-assign]
        self.a.put(session("one"))
        drained = self.a.drain(5.0, self.clock)
        self.assertNoResult(drained)
        pending.callback(Record(SESSION, "one", b"", 7, NOW))
        self.assertIsNone(self.successResultOf(drained))
        stuck: Deferred[Record] = Deferred()
        self.store.put = lambda *a, **k: stuck  # type: ignore[method-assign]
        self.a.put(session("two"))
        drained = self.a.drain(5.0, self.clock)
        self.clock.advance(5.0)
        self.successResultOf(drained)

    def test_memory_backend_is_complete(self) -> None:
        """With the memory backend the copies are the store: no fetch, and expired
        sessions are dropped by the sweep through the change stream."""
        follower = ChangeFollower(self.clock, self.store)
        sessions = RecordSessionStore(self.store, follower, complete=True)
        follower.start()
        self.assertFalse(sessions.needs_fetch)
        sessions.put(session("short", expires_at=NOW + 5))
        self.clock.advance(60)
        self.assertIsNotNone(sessions.get("short"))  # a stalled poll does not matter
        self.store.sweep(self.clock.seconds())
        self.clock.advance(0.5)
        self.assertIsNone(sessions.get("short"))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class FakeProvider:
    name = "fake"

    def __init__(self) -> None:
        self.answer: Directory | Exception | None = None

    def fetch(self) -> Deferred[Directory]:
        if isinstance(self.answer, Exception):
            return defer.fail(self.answer)
        if self.answer is None:
            return Deferred()  # never answers
        return defer.succeed(self.answer)


STAFF = DirectoryGroup("cn=staff,dc=t", "staff")
ENG = DirectoryGroup("cn=eng,dc=t", "eng")
ALICE = DirectoryUser("alice", "Alice@Example.test", "Alice", (ENG.id, STAFF.id))


class DirectoryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.store = MemoryRecordStore(self.clock.seconds)
        self.follower = ChangeFollower(self.clock, self.store)
        self.view = DirectoryView(self.follower, self.store)
        self.follower.start()
        self.provider = FakeProvider()
        self.sync = DirectorySync(self.clock, self.store, self.provider, interval=600,
                                  timeout=60)

    def test_sync_writes_changes_only_and_view_follows(self) -> None:
        """The view answers ids and names of the user's groups, by id or e-mail; a second
        identical run writes nothing; a removed user is deleted."""
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        self.assertTrue(run(self.sync))
        self.clock.advance(0.5)
        self.assertEqual(set(self.view.groups_for("alice", "")),
                         {ENG.id, STAFF.id, "eng", "staff"})
        self.assertEqual(set(self.view.groups_for("sub-123", "alice@example.TEST")),
                         {ENG.id, STAFF.id, "eng", "staff"})
        self.assertEqual(self.view.groups_for("bob", "bob@example.test"), ())
        version = self.store._version
        self.assertTrue(run(self.sync))
        self.assertEqual(self.store._version, version)
        self.provider.answer = Directory((), (STAFF,))
        self.assertTrue(run(self.sync))
        self.clock.advance(0.5)
        self.assertEqual(self.view.groups_for("alice", ""), ())
        self.assertEqual(len(self.view), 1)
        data = json.loads(result(self.store.get(DIRECTORY_GROUP, STAFF.id)).data)
        self.assertEqual(data["name"], "staff")

    def test_failure_keeps_last_good_data_and_is_counted(self) -> None:
        """An error or a run past the timeout changes nothing and counts a failure."""
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        run(self.sync)
        before = sample("directory_sync_failures_total", provider="fake")
        self.provider.answer = RuntimeError("ldap://127.0.0.1:1: connection refused")
        self.assertFalse(run(self.sync))
        self.provider.answer = None
        d = ensureDeferred(self.sync.run_once())
        self.clock.advance(60)
        self.assertFalse(self.successResultOf(d))
        self.assertEqual(sample("directory_sync_failures_total", provider="fake"),
                         before + 2)
        self.assertIsNotNone(result(self.store.get(DIRECTORY_USER, "alice")))

    def test_lease_lets_one_process_sync(self) -> None:
        """A second syncer on the same store waits while the first holds the lease."""
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        other = DirectorySync(self.clock, self.store, self.provider, interval=600,
                              timeout=60)
        self.assertTrue(run(self.sync))
        self.assertFalse(run(other))
        self.clock.advance(661)
        self.assertTrue(run(other))

    def test_stop_releases_the_lease_and_is_not_a_failure(self) -> None:
        """Stopping cuts a run off without counting it; with ``release`` another process
        may sync at once."""
        before = sample("directory_sync_failures_total", provider="fake")
        self.provider.answer = None  # the run hangs
        self.sync.start()
        self.clock.advance(0)
        self.successResultOf(self.sync.stop(release=True))
        self.assertEqual(sample("directory_sync_failures_total", provider="fake"), before)
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        other = DirectorySync(self.clock, self.store, self.provider, interval=600,
                              timeout=60)
        self.assertTrue(run(other))

    def test_reload_does_not_undo_newer_changes(self) -> None:
        """Changes heard while a reload's queries run are kept, and a record deleted
        meanwhile is not brought back by the older query result."""
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        run(self.sync)
        self.clock.advance(0.5)
        answers: list[Deferred[list[Record]]] = []
        real_query = self.store.query

        def slow_query(kind: str) -> Deferred[list[Record]]:
            d: Deferred[list[Record]] = Deferred()
            answers.append(d)
            real_query(kind).addCallback(lambda rows: answers.append(rows))  # type: ignore[arg-type]
            return d
        self.store.query = slow_query  # type: ignore[method-assign]
        self.view.reload()
        self.assertEqual(len(answers), 2)  # the user query, its (old) rows
        self.provider.answer = Directory((), (STAFF, ENG))  # alice leaves
        self.store.query = real_query  # type: ignore[method-assign]
        run(self.sync)
        self.clock.advance(0.5)
        self.assertEqual(self.view.groups_for("alice", ""), ())
        old_users = answers[1]
        answers[0].callback(old_users)  # type: ignore[union-attr,arg-type]
        self.assertEqual(self.view.groups_for("alice", ""), ())

    def test_scheduled_runs(self) -> None:
        """``start`` runs at once and then every interval."""
        self.provider.answer = Directory((ALICE,), (STAFF, ENG))
        self.sync.start()
        self.clock.advance(0)
        self.assertEqual(self.sync.runs, 1)
        self.clock.advance(600)
        self.assertEqual(self.sync.runs, 2)
        self.sync.stop()
        self.clock.advance(600)
        self.assertEqual(self.sync.runs, 2)
