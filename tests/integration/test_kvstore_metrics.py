"""``storage_operation_duration_ms`` and ``kvstore_*`` carry real values: a store talking
to a real redis-server, on the real reactor (trial's TestCase spins it)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import pytest
from twisted.internet import defer, reactor, task
from twisted.trial.unittest import TestCase

from gateway.config.kvstore_dsn import parse_dsn
from gateway.databroker.cipher import RecordCipher
from gateway.databroker.kv_connect import connect
from gateway.databroker.kv_records import KVRecordStore
from gateway.databroker.records import SESSION
from gateway.observability.metrics import REGISTRY
from tests.support.peers import redis_server

pytestmark = pytest.mark.integration


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class KVStoreMetricsTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        self.redis = stack.enter_context(redis_server(Path(tempfile.mkdtemp())))

    async def test_operations_and_pool(self) -> None:
        service = "metrics-test"
        redis = connect(parse_dsn(f"kvstore://127.0.0.1:{self.redis.port}/0"), 3.0, None,
                        service)
        store = KVRecordStore(reactor, redis, RecordCipher(b"k" * 32), service=service)
        self.addCleanup(store.close)
        kv = {"backend": "kvstore", "service": service}
        record = await store.put(SESSION, "s1", b'{"email": "a@x"}')
        self.assertEqual((await store.get(SESSION, "s1")), record)
        self.assertIsNone(await store.get(SESSION, "gone"))
        await store.delete(SESSION, "s1")
        # ten reads at once on a pool of four: some wait for a connection
        await defer.gatherResults([store.get(SESSION, f"x{i}") for i in range(10)])
        self.assertEqual(sample("storage_operation_duration_ms_count", operation="put",
                                result="ok", **kv), 1)
        self.assertEqual(sample("storage_operation_duration_ms_count", operation="get",
                                result="ok", **kv), 12)
        self.assertGreater(sample("storage_operation_duration_ms_sum", operation="get",
                                  result="ok", **kv), 0)
        # The pool opens its four connections in the background (the first command
        # waited for one, counted below); on a loaded machine the last may still be
        # connecting now, so the gauges are read once the pool is complete.
        deadline = time.monotonic() + 10
        while sample("kvstore_conns", service=service) < 4 and time.monotonic() < deadline:
            await task.deferLater(reactor, 0.02, lambda: None)
        self.assertEqual(sample("kvstore_conns", service=service), 4)
        self.assertEqual(sample("kvstore_idle_conns", service=service), 4)
        self.assertGreaterEqual(sample("kvstore_wait_count_total", service=service), 1)
        self.assertGreater(sample("kvstore_wait_duration_ms_total", service=service), 0)
