"""Fuzz target: the downstream HTTP/1.1 codec (``gateway.dataplane.codecs.http1`` around
llhttp), driven through ``StringTransport`` with in-memory upstreams that answer every
request they receive.

Input: chunk sizes, then the bytes a client sends (see ``harness.split_input``); the
route ``app.example.com`` ``/api/`` is public and forwards to ``/backend/``.

Contract:

- nothing raises out of ``dataReceived`` (nor out of the upstream side, the watchdog or
  ``connectionLost``), and nothing is logged as a failure (a 500 from a traceback);
- what the client receives is HTTP/1.1 responses with a valid status line;
- what an upstream receives parses as HTTP/1.1 requests, each with one Host, never both
  Content-Length and Transfer-Encoding, a target under ``/backend/`` that is normalised
  (idempotent, and under ``/backend/`` to a parameter-dropping server too), and no
  ``X-Gateway-*`` header from the client (also spelt with ``_``);
- once the codec has refused a request or started closing, nothing more is forwarded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from tests.fuzz.harness import chunks, describe, fuzz, instrumented, split_input

with instrumented("gateway", "httptools"):
    import httptools
    import yaml
    from twisted.internet.address import IPv4Address
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import MemoryReactorClock, StringTransport
    from twisted.logger import ILogObserver, globalLogPublisher
    from twisted.python.failure import Failure
    from zope.interface import provider

    from gateway.config import load_snapshot
    from gateway.dataplane.codecs.http1 import Http1Connection
    from gateway.dataplane.core import ProxyCore
    from gateway.dataplane.routing.plan import Plan, build_plan
    from gateway.wire.normalize import BadTarget, normalise_target
    from tests.fuzz.fuzz_normalise import parameter_dropping_server
    from tests.support.memory_upstream import MemoryUpstream

CLIENT = IPv4Address("TCP", "192.0.2.7", 50000)
TUNNEL_PORT = 5432
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
HEAD_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
CONFIG = {
    "insecure_server": True,
    "timeout_read": "3s",
    "timeout_idle": "5s",
    "shared_secret": "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=",
    "cookie_secret": "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=",
    "authenticate_service_url": "https://authenticate.example.com",
    "idp_provider": "oidc",
    "idp_provider_url": "https://idp.example.com",
    "idp_client_id": "gateway",
    "idp_client_secret": "secret",
    "policy": [
        {"from": "http://app.example.com", "prefix": "/api/",
         "to": "http://127.0.0.1:9000/backend/", "allow_public_unauthenticated_access": True,
         "set_request_headers": {"X-Extra": "set"}, "remove_request_headers": ["X-Remove-Me"]},
        {"from": "http://old.example.com", "redirect": {"https_redirect": True}},
        {"from": "tcp+https://db.example.com:5432", "to": "tcp://127.0.0.1:5432",
         "allow_public_unauthenticated_access": True},
    ],
}


def load_plan(config: dict[str, Any]) -> Plan:
    with tempfile.TemporaryDirectory(prefix="gateway-fuzz-") as directory:
        path = os.path.join(directory, "config.yaml")
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle)
        return build_plan(load_snapshot(path, {}))


PLAN = load_plan(CONFIG)


@contextlib.contextmanager
def logged_failures() -> Iterator[list[str]]:
    """The failures (tracebacks, errors) logged inside the block."""
    failures: list[str] = []

    @provider(ILogObserver)
    def observe(event: dict[str, Any]) -> None:
        if event.get("log_failure") is not None or event.get("isError"):
            failures.append(str(event.get("log_failure") or event.get("log_format")))

    globalLogPublisher.addObserver(observe)
    try:
        yield failures
    finally:
        globalLogPublisher.removeObserver(observe)


class UpstreamRequests:
    """llhttp callbacks gathering what one upstream received."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.requests: list[dict[str, Any]] = []
        self.answered = 0

    def on_message_begin(self) -> None:
        self.requests.append({"url": b"", "headers": [], "complete": False})

    def on_url(self, url: bytes) -> None:
        self.requests[-1]["url"] += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.requests[-1]["headers"].append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.requests[-1]["method"] = self.parser.get_method()

    def on_message_complete(self) -> None:
        self.requests[-1]["complete"] = True


def check_request(request: dict[str, Any]) -> None:
    url: bytes = request["url"]
    headers: list[tuple[bytes, bytes]] = request["headers"]
    names = [name for name, _ in headers]
    assert names.count(b"host") == 1, describe(request)
    assert not (b"content-length" in names and b"transfer-encoding" in names), describe(request)
    assert names.count(b"content-length") <= 1, describe(request)
    for name in names:
        assert not name.replace(b"_", b"-").startswith(b"x-gateway-"), describe(request)
    if request.get("method") == b"CONNECT":
        return
    try:
        path, parameters, query = normalise_target(url)
    except BadTarget:
        raise AssertionError(f"an upstream got a target the gateway refuses: {url!r}") from None
    assert path + parameters + query == url, describe(url)
    assert path.startswith(b"/backend/") or path == b"/backend", describe(url)
    served = parameter_dropping_server(path + parameters)
    assert served == path, describe(url)


class Session:
    """One client connection of ``protocol`` (a codec class), and its upstreams."""

    def __init__(self, protocol: Any = None) -> None:
        self.reactor = MemoryReactorClock()
        self.core = ProxyCore(self.reactor, PLAN, tls=False)
        self.core.start()
        self.client = StringTransport(peerAddress=CLIENT)
        self.conn = (protocol or Http1Connection)(self.core)
        self.conn.makeConnection(self.client)
        self.upstreams: list[tuple[MemoryUpstream, UpstreamRequests]] = []
        self.attempts: list[int] = []
        # What upstreams had received when the codec began to close (refusal or
        # ``connection: close``): nothing may be forwarded after that moment.
        self.forwarded_at_close: int | None = None
        close_connection = self.conn.close_connection

        def closing() -> None:
            if self.forwarded_at_close is None:
                self.collect(connect=False)  # a pending connection forwards nothing yet
                self.forwarded_at_close = self.forwarded()
            close_connection()

        self.conn.close_connection = closing  # type: ignore[method-assign]

    def forwarded(self) -> int:
        return sum(len(requests.requests) for _, requests in self.upstreams)

    def collect(self, connect: bool = True) -> bool:
        """Connect new upstream connections and parse what upstreams received; True
        when there was anything new."""
        progress = False
        while connect and len(self.attempts) < len(self.reactor.tcpClients):
            index = len(self.attempts)
            self.attempts.append(index)
            if self.reactor.connectors[index].stoppedConnecting:
                continue  # cancelled before it connected: never reaches the upstream
            upstream = MemoryUpstream(self.reactor, index)
            if upstream.port == TUNNEL_PORT:
                continue  # a CONNECT tunnel's raw bytes are not HTTP
            self.upstreams.append((upstream, UpstreamRequests()))
            progress = True
        for upstream, requests in self.upstreams:
            received = upstream.received()
            if received:
                progress = True
                requests.parser.feed_data(received)
        return progress

    def pump(self) -> None:
        """Connect new upstream connections, read what they got, answer each request."""
        for _ in range(50):
            progress = self.collect()
            for upstream, requests in self.upstreams:
                while requests.answered < len(requests.requests) and \
                        requests.requests[requests.answered]["complete"]:
                    request = requests.requests[requests.answered]
                    requests.answered += 1
                    if request.get("method") == b"CONNECT":
                        continue
                    upstream.respond(HEAD_ANSWER if request.get("method") == b"HEAD"
                                     else ANSWER)
                    progress = True
            if not progress:
                return


def check_responses(output: bytes, payload: bytes) -> None:
    if not output:
        return
    assert output.startswith(b"HTTP/1.1 "), describe(output)
    status = output[9:12]
    assert status.isdigit() and 100 <= int(status) <= 599, describe(output)
    if b"HEAD" in payload or b"CONNECT" in payload or b"pgrade" in payload:
        return  # bodiless answers and tunnels: a response parser cannot frame these
    collector = UpstreamRequests()  # only for its shape; responses parse separately
    parser = httptools.HttpResponseParser(collector)
    parser.feed_data(output)


def TestOneInput(data: bytes) -> None:
    with logged_failures() as failures:
        run_session(data)
    assert not failures, describe((data, failures))


def run_session(data: bytes) -> None:
    sizes, payload = split_input(data)
    session = Session()
    for chunk in chunks(payload, sizes):
        session.conn.dataReceived(chunk)
        session.pump()
    session.reactor.advance(1)
    session.pump()
    for _, requests in session.upstreams:
        for request in requests.requests:
            check_request(request)
    if session.forwarded_at_close is not None:
        assert session.forwarded() == session.forwarded_at_close, describe(payload)
    check_responses(session.client.value(), payload)
    session.conn.connectionLost(Failure(ConnectionDone()))
    session.reactor.advance(30)
    session.core.stop()


if __name__ == "__main__":
    fuzz(TestOneInput)
