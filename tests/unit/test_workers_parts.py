"""The pure parts of ``workers``: merging expositions, the control pipe's framing, the
supervisor's first message, and sockets bound once per worker."""

from __future__ import annotations

import os
import socket

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.listeners.shared import bind_shared
from gateway.workers.child import read_first_message
from gateway.workers.control import decode, encode
from gateway.workers.merge import MergedCollector, merge_expositions


def exposition(requests: int, conns: int, revision: str = "abc") -> str:
    registry = CollectorRegistry()
    Counter("http_server_requests", "Requests.", ["route"], registry=registry) \
        .labels("a").inc(requests)
    histogram = Histogram("http_server_request_duration_ms", "Duration.", ["route"],
                          registry=registry, buckets=(1, 10))
    for value in range(requests):
        histogram.labels("a").observe(value)
    Gauge("kvstore_conns", "Pool.", registry=registry).set(conns)
    Gauge("gateway_build_info", "Build.", ["revision"], registry=registry) \
        .labels(revision).set(1)
    return generate_latest(registry).decode()


def series(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


class MergeTests(SynchronousTestCase):
    def test_counters_histograms_and_counting_gauges_add_up(self) -> None:
        merged = CollectorRegistry()
        merged.register(MergedCollector(merge_expositions([exposition(3, 4),
                                                           exposition(5, 2)])))
        got = series(generate_latest(merged).decode())
        self.assertEqual(got['http_server_requests_total{route="a"}'], 8)
        self.assertEqual(got['http_server_request_duration_ms_count{route="a"}'], 8)
        # 0..2 and 0..4 observed: values <= 1 are 2 + 2
        self.assertEqual(got['http_server_request_duration_ms_bucket{le="1.0",route="a"}'], 4)
        self.assertEqual(got['http_server_request_duration_ms_sum{route="a"}'], 3 + 10)
        self.assertEqual(got["kvstore_conns"], 6)
        # the same gauge in every process is shown once, not summed
        self.assertEqual(got['gateway_build_info{revision="abc"}'], 1)

    def test_series_only_one_process_has_are_kept(self) -> None:
        got = series(generate_latest(_registry(merge_expositions(
            [exposition(1, 1, "x"), exposition(1, 1, "y")]))).decode())
        self.assertEqual(got['gateway_build_info{revision="x"}'], 1)
        self.assertEqual(got['gateway_build_info{revision="y"}'], 1)


def _registry(families: list[object]) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(MergedCollector(families))  # type: ignore[arg-type]
    return registry


class ControlTests(SynchronousTestCase):
    def test_round_trip_and_refusals(self) -> None:
        message = {"op": "reload", "config": "eA=="}
        payload = b'{"op":"reload","config":"eA=="}'
        self.assertEqual(encode(message), b"%d:%s," % (len(payload), payload))
        self.assertEqual(decode(payload), message)
        for bad in (b"[]", b'{"id": 1}', b"{", b'{"op": 3}'):
            with self.assertRaises(ValueError):
                decode(bad)

    def test_first_message_is_read_exactly(self) -> None:
        read, write = os.pipe()
        try:
            os.write(write, encode({"op": "reload", "config": ""}) + b"5:more,")
            self.assertEqual(read_first_message(read), {"op": "reload", "config": ""})
            self.assertEqual(os.read(read, 100), b"5:more,")  # left for the reactor
            os.write(write, b"x")
            os.close(write)
            write = -1
            with self.assertRaises(ValueError):
                read_first_message(read)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)


class SharedSocketTests(SynchronousTestCase):
    def test_one_socket_per_worker_on_one_port(self) -> None:
        socks = bind_shared("127.0.0.1:0", 3)
        try:
            ports = {s.getsockname()[1] for s in socks}
            self.assertEqual(len(ports), 1)
            self.assertTrue(all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
                                for s in socks))
            self.assertTrue(all(s.get_inheritable() for s in socks))
        finally:
            for s in socks:
                s.close()

    def test_a_port_in_use_is_refused(self) -> None:
        from twisted.internet.error import CannotListenError

        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        try:
            with self.assertRaises(CannotListenError):
                bind_shared(f"127.0.0.1:{taken.getsockname()[1]}", 2)
        finally:
            taken.close()
