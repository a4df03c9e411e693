"""The kvstore record store against a real redis-server, on the real reactor: the change
stream between two processes' stores, a reset when the store is emptied, sweeping,
leases, encryption at rest, and sessions kept while Redis is away."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from pathlib import Path

import pytest
from twisted.internet import defer, reactor, task
from twisted.trial.unittest import TestCase

from gateway.config.kvstore_dsn import parse_dsn
from gateway.databroker.cipher import RecordCipher, RecordKeyError
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.kv_connect import connect
from gateway.databroker.kv_records import KVRecordStore
from gateway.databroker.records import SESSION, USER, StorageUnavailable
from gateway.databroker.session_records import RecordSessionStore
from gateway.sessions.model import Session
from tests.support.peers import redis_server

pytestmark = pytest.mark.integration


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


class KVRecordsTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        self.redis = stack.enter_context(redis_server(Path(tempfile.mkdtemp())))

    def store(self, secret: bytes = b"k" * 32, reply_timeout: float = 3.0) -> KVRecordStore:
        redis = connect(parse_dsn(f"kvstore://127.0.0.1:{self.redis.port}/0"),
                        reply_timeout, None, "records-test")
        store = KVRecordStore(reactor, redis, RecordCipher(secret),
                              reply_timeout=reply_timeout)
        self.addCleanup(store.close)
        return store

    async def test_change_stream_between_two_stores(self) -> None:
        """What one store writes, another reads from its version on, in order, newest
        version per record; a store that was emptied makes readers start over."""
        a, b = self.store(), self.store()
        start = await b.sync(-1)
        self.assertTrue(start.reset)
        one = await a.put(SESSION, "s1", b"one", expires_at=2e9)
        await a.put(USER, "u1", b"user")
        await a.put(SESSION, "s1", b"one again")
        await a.delete(USER, "u1")
        changes = await b.sync(start.version)
        self.assertEqual([(r.type, r.id, r.data, r.deleted) for r in changes.records],
                         [(SESSION, "s1", b"one again", False), (USER, "u1", b"", True)])
        self.assertEqual(changes.version, one.version + 3)
        self.assertEqual((await b.sync(changes.version)).records, ())
        self.assertEqual([r.data for r in await b.query(SESSION)], [b"one again"])
        with self.redis.client() as raw:
            raw.command("FLUSHALL")
        await a.put(SESSION, "s2", b"two")  # version 1 again, under a new epoch
        again = await b.sync(changes.version)
        self.assertTrue(again.reset or again.epoch != changes.epoch)

    async def test_unreadable_records_do_not_stop_the_stream(self) -> None:
        """A record written with another shared_secret reads as deleted in the change
        stream and in queries (logged), and the records after it still arrive; a
        deleted session is never brought back by a write that does not revive."""
        good, stranger = self.store(), self.store(b"x" * 32)
        start = (await good.sync(-1)).version
        await stranger.put(SESSION, "theirs", b"?")
        await good.put(SESSION, "ours", b"!")
        changes = await good.sync(start)
        self.assertEqual([(r.id, r.deleted) for r in changes.records],
                         [("theirs", True), ("ours", False)])
        self.assertEqual([r.id for r in await good.query(SESSION)], ["ours"])
        await good.delete(SESSION, "ours")
        self.assertIsNone(await good.put(SESSION, "ours", b"again", revive=False))
        self.assertIsNone(await good.get(SESSION, "ours"))
        self.assertIsNotNone(await good.put(SESSION, "ours", b"again"))

    async def test_sweep_in_rounds(self) -> None:
        """More expired records than one round handles are all swept."""
        store = self.store()
        past = reactor.seconds() - 1
        await defer.gatherResults([store.put(SESSION, f"s{i}", b"x", expires_at=past)
                                   for i in range(2500)])
        self.assertEqual(await store.sweep(reactor.seconds()), 2500)
        self.assertEqual(await store.query(SESSION), [])

    async def test_encrypted_at_rest_and_wrong_secret(self) -> None:
        """Redis holds no plain data; another shared_secret gets a clear error."""
        await self.store().put(SESSION, "s1", b"alice@example.test")
        with self.redis.client() as raw:
            value = bytes(raw.command("HGET", "{gateway}:records:session", "s1"))
        self.assertNotIn(b"alice", value)
        with self.assertRaises(RecordKeyError) as caught:
            await self.store(b"x" * 32).get(SESSION, "s1")
        self.assertIn("different shared_secret", str(caught.exception))

    async def test_sweep_and_lease(self) -> None:
        """Expired records become tombstones; the lease has one holder at a time."""
        store = self.store()
        await store.put(SESSION, "old", b"1", expires_at=reactor.seconds() - 1)
        await store.put(SESSION, "new", b"1", expires_at=reactor.seconds() + 600)
        self.assertEqual(await store.sweep(reactor.seconds()), 1)
        self.assertIsNone(await store.get(SESSION, "old"))
        self.assertIsNotNone(await store.get(SESSION, "new"))
        self.assertTrue(await store.lease("sync", "a", 5))
        self.assertFalse(await store.lease("sync", "b", 5))
        self.assertTrue(await store.lease("sync", "a", 5))

    async def test_sessions_survive_a_stalled_redis(self) -> None:
        """Redis stops answering: reads fail promptly with StorageUnavailable, writes
        are kept, and once Redis answers again they are saved."""
        store = self.store(reply_timeout=0.5)
        follower = ChangeFollower(reactor, store, interval=0.1, stale_after=1.0)
        sessions = RecordSessionStore(store, follower, complete=False)
        follower.start()
        self.addCleanup(follower.stop)
        pid = self.redis.process.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            started = reactor.seconds()
            with self.assertRaises(StorageUnavailable):
                await sessions.fetch("nobody")
            self.assertLess(reactor.seconds() - started, 1.5)
            alice = Session(id="s1", user_id="alice", email="alice@example.test",
                            issued_at=1.0, expires_at=2e9)
            sessions.put(alice)
            await sleep(1.2)
            self.assertIsNone(sessions.get("s1"))  # stream behind: not trusted
        finally:
            os.kill(pid, signal.SIGCONT)
        for _ in range(100):  # reconnecting takes a moment
            await sleep(0.1)
            with contextlib.suppress(StorageUnavailable):
                if await store.get(SESSION, "s1") is not None:
                    break
        self.assertEqual(await sessions.fetch("s1"), alice)
        self.assertIsNotNone(await store.get(USER, "alice"))
