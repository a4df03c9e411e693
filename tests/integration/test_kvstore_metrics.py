"""``storage_operation_duration_ms`` and ``kvstore_*`` carry real values: a store talking
to a real redis-server, on the real reactor (trial's TestCase spins it)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
from twisted.internet import defer, reactor
from twisted.trial.unittest import TestCase

from gateway.config.kvstore_dsn import parse_dsn
from gateway.databroker.cipher import RecordCipher
from gateway.databroker.kv_sessions import KVSessionStore
from gateway.observability.metrics import REGISTRY
from gateway.sessions.model import Session
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
        store = KVSessionStore(reactor, parse_dsn(f"kvstore://127.0.0.1:{self.redis.port}/0"),
                               RecordCipher(b"k" * 32), service=service)
        self.addCleanup(store.redis.disconnect)
        kv = {"backend": "kvstore", "service": service}
        session = Session(id="s1", user_id="u", email="a@x", issued_at=1.0,
                          expires_at=2.0e9, claims={}, groups=())
        store.put(session)
        store.forget("s1")
        self.assertEqual(await store.fetch("s1"), session)
        self.assertEqual(await store.fetch("gone"), None)
        store.delete("s1")
        # ten reads at once on a pool of four: some wait for a connection
        await defer.gatherResults([store.fetch(f"x{i}") for i in range(10)])
        self.assertEqual(sample("storage_operation_duration_ms_count", operation="put",
                                result="ok", **kv), 1)
        self.assertEqual(sample("storage_operation_duration_ms_count", operation="get",
                                result="ok", **kv), 12)
        self.assertGreater(sample("storage_operation_duration_ms_sum", operation="get",
                                  result="ok", **kv), 0)
        self.assertEqual(sample("kvstore_conns", service=service), 4)
        self.assertEqual(sample("kvstore_idle_conns", service=service), 4)
        self.assertGreaterEqual(sample("kvstore_wait_count_total", service=service), 1)
        self.assertGreater(sample("kvstore_wait_duration_ms_total", service=service), 0)
