"""CPU per request of the data plane alone, in process: a client connection on a
``StringTransport``, a kept-alive upstream on another, no sockets and no event loop.

wrk against the daemon measures the whole path and swings by several percent from run
to run on a shared machine; this loop repeats the same requests and reports the fastest
of several rounds, so an A/B of two commits (run it in each tree) shows a change of
1-2 % in the codec, the exchange or the router. The access log is off, as in
``bench/run.py``. ``--profile`` prints where the time goes (cProfile, by own time).

    .venv/bin/python bench/inproc.py [--protocol h1|h2|auth|bearer|both|all|signed]
        [--requests N] [--rounds R]

It imports the gateway of the tree it is in (for an A/B, run each tree's copy).
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import h2.config
import h2.connection
import hpack
import yaml
from hyperframe.frame import HeadersFrame
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree's gateway

from gateway.config import load_snapshot
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import build_plan
from gateway.observability.logging import LEVELS

try:
    from gateway.dataplane.http2.connection import H2Connection
except ImportError:  # a tree from before the http2 package (A/B against older commits)
    from gateway.dataplane.codecs.http2 import H2Connection  # type: ignore[no-redef]

CONFIG = {
    "insecure_server": True,
    "policy": [{"from": "http://app.bench.test", "to": "http://127.0.0.1:9000",
                "allow_public_unauthenticated_access": True}],
}
# The signed-in route as bench/run.py's (allowed_users, identity headers), with a
# session made in process: the identity layer is the daemon's, the provider is not asked.
AUTH_USER = "user@bench.test"
AUTH_CONFIG = {
    "insecure_server": True,
    "authenticate_service_url": "http://auth.bench.test",
    "idp_provider": "oidc", "idp_provider_url": "https://idp.bench.test",
    "idp_client_id": "gateway", "idp_client_secret": "secret",
    "shared_secret": base64.b64encode(b"s" * 32).decode(),
    "cookie_secret": base64.b64encode(b"c" * 32).decode(),
    "policy": [{"from": "http://app.bench.test", "to": "http://127.0.0.1:9000",
                "allowed_users": [AUTH_USER], "pass_identity_headers": True}],
}
CLIENT = IPv4Address("TCP", "127.0.0.1", 50000)
REQUEST = b"GET /index.html HTTP/1.1\r\nHost: app.bench.test\r\nUser-Agent: bench\r\n\r\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
            b"\r\nok")


def _snapshot(config: dict[str, Any]) -> Any:
    directory = tempfile.mkdtemp(prefix="gateway-inproc-")
    path = os.path.join(directory, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return load_snapshot(path)


def _core(snapshot: Any = None, authorizer: Any = None) -> tuple[MemoryReactorClock, ProxyCore]:
    reactor = MemoryReactorClock()
    if authorizer is not None:
        core = ProxyCore(reactor, build_plan(snapshot), tls=False, authorizer=authorizer)
    else:
        core = ProxyCore(reactor, build_plan(snapshot or _snapshot(CONFIG)), tls=False)
    core.start()
    LEVELS.set_levels("warn", "error")  # no access log
    return reactor, core


def _signed_in() -> tuple[MemoryReactorClock, ProxyCore, bytes]:
    """A core with the daemon's identity layer and a session cookie for AUTH_USER."""
    from gateway.authenticate.holder import IdentityHolder
    from gateway.databroker.follower import ChangeFollower
    from gateway.databroker.memory_records import MemoryRecordStore
    from gateway.databroker.session_records import RecordSessionStore

    snapshot = _snapshot(AUTH_CONFIG)
    clock = MemoryReactorClock()
    clock.advance(time.time())
    records = MemoryRecordStore(time.time)
    store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
    holder = IdentityHolder(clock, snapshot,
                            SimpleNamespace(sessions=store, directory=None, store=records,
                                            ends=None))
    reactor, core = _core(snapshot, holder)
    identity = holder.identity
    session = identity.new_session({"sub": AUTH_USER, "email": AUTH_USER}, "", "", "",
                                    identity.clock() + 36000)
    cookie = b"; ".join(v.split(b";")[0] for _, v in identity.session_cookie(session))
    return reactor, core, cookie


def _bearer() -> tuple[MemoryReactorClock, ProxyCore, bytes]:
    """A core with the daemon's identity layer and a bearer route (``bench/harness/
    bearer.py``: the issue's policy, a GitHub Actions-shaped token), the token's provider
    read from a ``jwks_file`` by the daemon's key source."""
    from bench.harness import bearer
    from gateway.authenticate.holder import IdentityHolder
    from gateway.databroker.follower import ChangeFollower
    from gateway.databroker.memory_records import MemoryRecordStore
    from gateway.databroker.session_records import RecordSessionStore
    from gateway.services.bearer_providers import BearerVerifiers

    directory = Path(tempfile.mkdtemp(prefix="gateway-inproc-"))
    config = {**AUTH_CONFIG, "identity_providers": [
        bearer.provider(bearer.write_jwks(directory))],
        "policy": [bearer.route("http://app.bench.test", "http://127.0.0.1:9000")]}
    snapshot = _snapshot(config)
    clock = MemoryReactorClock()
    clock.advance(time.time())
    records = MemoryRecordStore(time.time)
    store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
    keys = BearerVerifiers(clock)
    keys.startService()  # reads the jwks_file now
    holder = IdentityHolder(clock, snapshot,
                            SimpleNamespace(sessions=store, directory=None, store=records,
                                            ends=None), keys.verifiers)
    reactor, core = _core(snapshot, holder)
    return reactor, core, bearer.token().encode()


class _Upstream:
    """The upstream end of the connection the pool opened: answers each request."""

    def __init__(self, reactor: MemoryReactorClock) -> None:
        host, port, factory, _, _ = reactor.tcpClients[-1]
        self.protocol = factory.buildProtocol(IPv4Address("TCP", host, port))
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def answer(self) -> None:
        if not self.transport.value():
            raise RuntimeError("the request did not reach the upstream")
        self.transport.clear()
        self.protocol.dataReceived(RESPONSE)


Prepared = Callable[[int], Callable[[], None]]


def _serving(reads: list[bytes], conn: Any, upstream: _Upstream, client: StringTransport,
             reactor: MemoryReactorClock) -> Callable[[], None]:
    """The timed loop: each read to the connection, answered upstream, output dropped."""

    def run() -> None:
        feed, answer, clear = conn.dataReceived, upstream.answer, client.clear
        for data in reads:
            feed(data)
            answer()
            clear()
        if len(reactor.tcpClients) != 1:
            raise RuntimeError("the upstream connection was not kept alive")

    return run


def http1_loop(signed_in: bool = False, bearer: bool = False) -> Prepared:
    """One client connection sending requests one after another (with a session
    cookie on the signed-in route when ``signed_in``, a bearer token on the bearer
    route when ``bearer``)."""
    request = REQUEST
    if signed_in:
        reactor, core, cookie = _signed_in()
        request = REQUEST[:-2] + b"Cookie: " + cookie + b"\r\n\r\n"
    elif bearer:
        reactor, core, token = _bearer()
        request = REQUEST[:-2] + b"Authorization: Bearer " + token + b"\r\n\r\n"
    else:
        reactor, core = _core()
    client = StringTransport(peerAddress=CLIENT)
    conn = Http1Connection(core)
    conn.makeConnection(client)
    conn.dataReceived(request)
    upstream = _Upstream(reactor)
    upstream.answer()
    if not client.value().startswith(b"HTTP/1.1 200"):
        raise RuntimeError(client.value()[:200])
    client.clear()

    def prepare(n: int) -> Callable[[], None]:
        return _serving([request] * n, conn, upstream, client, reactor)

    return prepare


def http2_loop() -> Prepared:
    """One h2c connection sending requests one after another (as h2load -m1). The
    client's frames are encoded before the clock starts and its reading is skipped, so
    only the gateway's work is counted."""
    reactor, core = _core()
    client = StringTransport(peerAddress=CLIENT)
    conn = H2Connection(core)
    conn.makeConnection(client)
    peer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    peer.initiate_connection()
    peer.increment_flow_control_window(2**31 - 1 - 65535)  # the responses never block
    conn.dataReceived(peer.data_to_send())
    peer.receive_data(client.value())
    conn.dataReceived(peer.data_to_send())  # SETTINGS ack
    client.clear()
    headers = [(":method", "GET"), (":scheme", "http"), (":authority", "app.bench.test"),
               (":path", "/index.html"), ("user-agent", "bench")]
    upstream: list[_Upstream] = []

    encoder = hpack.Encoder()
    next_id = [1]

    def request() -> bytes:
        # framed by hand: the h2 peer would count the streams it never reads as open
        frame = HeadersFrame(next_id[0], encoder.encode(headers),
                             flags=("END_HEADERS", "END_STREAM"))
        next_id[0] += 2
        return bytes(frame.serialize())

    conn.dataReceived(request())
    upstream.append(_Upstream(reactor))
    upstream[0].answer()
    if b"ok" not in client.value():
        raise RuntimeError(client.value()[:200])
    client.clear()

    def prepare(n: int) -> Callable[[], None]:
        return _serving([request() for _ in range(n)], conn, upstream[0], client, reactor)

    return prepare


def measure(prepare: Prepared, requests: int, rounds: int) -> float:
    """Microseconds of process CPU per request, the fastest round."""
    prepare(min(requests, 2000))()  # warm caches and the pool
    best = float("inf")
    for _ in range(rounds):
        run = prepare(requests)
        gc.collect()
        start = time.process_time()
        run()
        best = min(best, (time.process_time() - start) / requests * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=("h1", "h2", "auth", "bearer", "both", "all",
                                               "signed"),
                        default="both", help="auth: HTTP/1.1 on the signed-in route; "
                        "bearer: on the bearer-token route; both: h1 and h2; all: h1, h2 "
                        "and auth; signed: auth and bearer")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    loops: dict[str, Callable[[], Prepared]] = {
        "h1": http1_loop, "h2": http2_loop, "auth": lambda: http1_loop(signed_in=True),
        "bearer": lambda: http1_loop(bearer=True)}
    names = {"both": ["h1", "h2"], "all": ["h1", "h2", "auth"],
             "signed": ["auth", "bearer"]}.get(
        args.protocol, [args.protocol])
    for name in names:
        prepare = loops[name]()
        if args.profile:
            profile = cProfile.Profile()
            prepare(200)()
            run = prepare(args.requests)
            profile.enable()
            run()
            profile.disable()
            stats: Any = pstats.Stats(profile, stream=sys.stdout)
            stats.sort_stats("tottime").print_stats(25)
            continue
        print(f"{name}: {measure(prepare, args.requests, args.rounds):.1f} µs CPU per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
