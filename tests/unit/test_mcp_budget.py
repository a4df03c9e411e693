"""The budgets of MCP request bodies being read (``exchange.mcp_request``), over HTTP/2
with raw frames: DATA is acknowledged as it comes and up to 128 streams run at once, so
without a bound one client sending bodies it never ends had the gateway hold 128 x
``mcp.max_request_bytes`` on one connection (security review). The bodies being read
on a connection, and in the process, are bounded together; a stream ended any way
(read whole, reset) gives its share back."""

from __future__ import annotations

import gc
from typing import Any

import hpack
from hyperframe.frame import DataFrame, Frame, HeadersFrame
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange import mcp_request
from gateway.dataplane.http2.connection import H2Connection
from gateway.dataplane.routing.plan import build_plan
from gateway.mcp.errors import INVALID_REQUEST
from tests.support import h2frames as f

from .config.helpers import base_config, load

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
HOST = b"mcp.example.com"
LIMIT = 16384
PIECE = 16000  # one DATA frame (the default SETTINGS_MAX_FRAME_SIZE is 16384)
SNAPSHOT = load(base_config(policy=[{
    "from": "https://mcp.example.com", "to": "http://127.0.0.1:9000/",
    "allow_public_unauthenticated_access": True, "mcp": {"max_request_bytes": LIMIT}}]))


class Client:
    """One HTTP/2 connection to the codec over an in-memory transport."""

    def __init__(self, core: ProxyCore, reactor: MemoryReactorClock) -> None:
        self.reactor = reactor
        self.transport = StringTransport(peerAddress=CLIENT)
        self.server = H2Connection(core)
        self.server.makeConnection(self.transport)
        self.frames = f.Frames()
        self.decoder = hpack.Decoder()
        self.inbox = bytearray()
        self.received: list[Frame] = []
        self.send(f.hello())

    def send(self, data: bytes) -> None:
        f.deliver(self.server, self.reactor, data)

    def upload(self, stream_id: int, size: int = PIECE) -> None:
        """A POST whose body's first ``size`` bytes come, and never its end."""
        headers = [*f.request_headers(b"/mcp", HOST, b"POST"),
                   (b"content-type", b"application/json")]
        self.send(self.frames.headers(stream_id, headers, end_stream=False)
                  + f.data(stream_id, b" " * size))

    def answers(self) -> dict[int, tuple[int, Any]]:
        """The status and JSON-RPC error code of each stream answered so far."""
        self.inbox += self.transport.value()
        self.transport.clear()
        self.received += f.parse(self.inbox)
        found: dict[int, tuple[int, Any]] = {}
        for frame in self.received:
            if isinstance(frame, HeadersFrame):
                fields = dict(self.decoder.decode(frame.data, raw=True))
                found[frame.stream_id] = (int(fields[b":status"]), None)
            elif isinstance(frame, DataFrame) and frame.data:
                status, _ = found[frame.stream_id]
                found[frame.stream_id] = (status, frame.data)
        return found


class BudgetTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False)
        self.core.start()
        self.addCleanup(self.core.stop)
        gc.collect()  # another test's connections, never closed, are cycles of objects
        # (what another test's exchanges still alive hold, counted from)
        self.before = mcp_request._Process.held
        # what an exchange ends with comes back at once, not when the collector runs
        gc.disable()
        self.addCleanup(gc.enable)
        self.clients: list[Client] = []
        self.addCleanup(self.close_all)

    def client(self) -> Client:
        client = Client(self.core, self.reactor)
        self.clients.append(client)
        return client

    def close_all(self) -> None:
        for client in self.clients:
            client.server.connectionLost(Failure(ConnectionLost()))
        self.reactor.advance(0)
        self.assertEqual(mcp_request._Process.held, self.before)

    def test_the_connection_budget_refuses_the_body_past_it(self) -> None:
        """Four bodies of the route's limit fit on a connection at once (its budget,
        4 x ``max_request_bytes``); the fifth stream's is refused with 413 and a
        JSON-RPC error, the four go on; a reset stream gives its share back."""
        self.assertEqual(mcp_request.connection_budget(LIMIT), 4 * LIMIT)
        client = self.client()
        for stream_id in (1, 3, 5, 7):
            client.upload(stream_id)
        self.assertEqual(client.answers(), {})
        self.assertEqual(client.server.facts.mcp_buffered, 4 * PIECE)
        client.upload(9)
        answers = client.answers()
        self.assertEqual(list(answers), [9])
        status, body = answers[9]
        self.assertEqual(status, 413)
        self.assertIn(b'"code":%d' % INVALID_REQUEST, body)
        self.assertIn(b"on this connection", body)
        self.assertEqual(client.server.facts.mcp_buffered, 4 * PIECE)
        client.send(f.rst(1))
        self.assertEqual(client.server.facts.mcp_buffered, 3 * PIECE)
        client.upload(11)
        self.assertEqual(list(client.answers()), [9])
        self.assertEqual(client.server.facts.mcp_buffered, 4 * PIECE)

    def test_a_body_read_whole_gives_its_share_back(self) -> None:
        """An honest client's bodies, one after another on one connection, are each
        read whole: the budget holds only what is being read."""
        client = self.client()
        for stream_id in range(1, 21, 2):
            client.upload(stream_id, 10)
            client.send(f.data(stream_id, b'{"jsonrpc":"2.0","method":"ping","id":1}',
                               end_stream=True))
            self.assertEqual(client.server.facts.mcp_buffered, 0)
        self.assertNotIn(413, [status for status, _ in client.answers().values()])

    def test_the_process_budget_refuses_past_it_with_503(self) -> None:
        """Bodies being read on many connections are bounded together too (the
        process's budget, here made small): past it, 503."""
        self.patch(mcp_request, "PROCESS_BUDGET", self.before + 3 * LIMIT)
        first = self.client()
        second = self.client()
        first.upload(1)
        first.upload(3)
        second.upload(1)
        self.assertEqual(first.answers(), {})
        self.assertEqual(second.answers(), {})
        second.upload(3)
        status, body = second.answers()[3]
        self.assertEqual(status, 503)
        self.assertIn(b"in this gateway process", body)
        first.send(f.rst(3))
        second.upload(5)
        self.assertNotIn(5, second.answers())
        self.assertEqual(mcp_request._Process.held, self.before + 3 * PIECE)
        first.server.connectionLost(Failure(ConnectionLost()))  # its body comes back
        self.assertEqual(mcp_request._Process.held, self.before + 2 * PIECE)
