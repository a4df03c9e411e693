"""The per-process connection cap: its default from RLIMIT_NOFILE, refusing past it
(no protocol built, so Twisted closes the socket at once), and one log line when it is
reached and one when it clears, however many connections were refused."""

from __future__ import annotations

import resource

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.codecs.switch import HTTPFactory
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.limit import (
    MIN_AUTO,
    MIN_EPISODE,
    RESERVED_FDS,
    ConnectionLimit,
    auto_max_connections,
)
from gateway.dataplane.listeners.stack import LimitedFactory
from gateway.dataplane.routing.plan import build_plan

from .config.helpers import IDENTITY, base_config, load

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)


def messages(events: list[dict[str, object]]) -> list[str]:
    return [str(e["log_format"]).split(":")[0] for e in events
            if str(e.get("log_format", "")).startswith("connection limit")]


class AutoTests(SynchronousTestCase):
    def test_half_of_what_is_left(self) -> None:
        self.assertEqual(auto_max_connections(1024), (1024 - RESERVED_FDS) // 2)
        self.assertEqual(auto_max_connections(65536), (65536 - RESERVED_FDS) // 2)
        self.assertEqual(auto_max_connections(50), MIN_AUTO)
        self.assertEqual(auto_max_connections(resource.RLIM_INFINITY), (2**20 - 64) // 2)

    def test_default_follows_this_process(self) -> None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.assertEqual(auto_max_connections(), auto_max_connections(soft))


class LimitTests(SynchronousTestCase):
    def test_one_line_per_episode(self) -> None:
        live: set[int] = set(range(10))
        limit = ConnectionLimit(10, [live])
        with capturedLogs() as events:
            self.assertFalse(any(limit.admit(1.0 + i) for i in range(50)))
            limit.poll(2.0)
            live.clear()
            limit.poll(1.0 + MIN_EPISODE - 0.1)  # below the cap, but the episode is young
            self.assertEqual(messages(events), ["connection limit reached"])
            limit.poll(1.0 + MIN_EPISODE)
            self.assertTrue(limit.admit(7.0))
        self.assertEqual(messages(events), ["connection limit reached",
                                            "connection limit cleared"])
        self.assertEqual(events[-1]["refused"], 50)

    def test_cleared_only_below_low_water(self) -> None:
        live = set(range(100))
        limit = ConnectionLimit(100, [live])
        with capturedLogs() as events:
            limit.admit(0.0)
            live.discard(0)  # 99 open: admits again, but not "cleared" yet
            self.assertTrue(limit.admit(10.0))
            limit.poll(10.0)
            self.assertEqual(messages(events), ["connection limit reached"])
            live.difference_update(range(10))
            limit.poll(11.0)
        self.assertEqual(messages(events), ["connection limit reached",
                                            "connection limit cleared"])


class LimitedFactoryTests(SynchronousTestCase):
    def test_refused_past_the_cap(self) -> None:
        """Each built connection counts from its accept (the codec switch is in the
        core's set); past the cap no protocol is built; a closed one frees its slot."""
        reactor = MemoryReactorClock()
        snapshot = load(base_config(max_connections=3, **IDENTITY))
        core = ProxyCore(reactor, build_plan(snapshot), tls=False)
        self.assertEqual(core.limit.maximum, 3)
        factory = LimitedFactory(HTTPFactory(core, "auto", tls=False), core.limit, reactor)
        transports = []
        for _ in range(3):
            protocol = factory.buildProtocol(CLIENT)
            assert protocol is not None
            transport = StringTransport(peerAddress=CLIENT)
            protocol.makeConnection(transport)
            transports.append((protocol, transport))
        with capturedLogs() as events:
            self.assertIsNone(factory.buildProtocol(CLIENT))
            self.assertIsNone(factory.buildProtocol(CLIENT))
        self.assertEqual(messages(events), ["connection limit reached"])
        protocol, _ = transports[0]
        protocol.connectionLost(None)  # type: ignore[arg-type]
        self.assertIsNotNone(factory.buildProtocol(CLIENT))

    def test_start_up_line_names_the_listener(self) -> None:
        """Twisted's "<prefix> starting on <port>" names the wrapped factory, not the cap
        (operators and the packaging test read the port from it)."""
        core = ProxyCore(MemoryReactorClock(), build_plan(load(base_config(**IDENTITY))),
                         tls=False)
        factory = LimitedFactory(HTTPFactory(core, "auto", tls=False), core.limit,
                                 MemoryReactorClock())
        self.assertEqual(factory.logPrefix(), "HTTPFactory")

    def test_auto_when_zero(self) -> None:
        core = ProxyCore(MemoryReactorClock(), build_plan(load(base_config(**IDENTITY))),
                         tls=False)
        self.assertEqual(core.limit.maximum, auto_max_connections())
