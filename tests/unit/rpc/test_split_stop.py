"""A split proxy's gRPC clients end with the process: stopping its service tree closes
the authorize client's channels before the bridge's thread stops and leaves no thread
behind; a call made after that (a request still in flight) is a 503 and opens no new
channel. (The databroker client is closed by the Databroker service's own stop.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from twisted.application.service import MultiService

from gateway.authorize.hook import Allow, Reply
from gateway.config.settings import Options
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_client import RemoteAuthorizer
from gateway.rpc.authorize_server import AuthorizeDecider
from gateway.rpc.split import SplitRpc

from .loopback import SECRET, QueueReactor
from .test_authorize_rpc import (
    APP,
    FakeHolder,
    LocalIdentity,
    info,
    plan_for,
    policy_snapshot,
    start_authorize,
)


@pytest.fixture
def services() -> Iterator[tuple[AsyncioThread, QueueReactor]]:
    """The authorize and databroker servers, on a bridge of their own."""
    reactor = QueueReactor()
    bridge = AsyncioThread(reactor, name="servers-aio")
    bridge.start()
    yield bridge, reactor
    bridge.stop()


def proxy_snapshot(authorize_port: int) -> Any:
    options = Options(services="proxy", grpc_client_timeout=5.0,
                      authorize_service_urls=(f"http://127.0.0.1:{authorize_port}",))
    return SimpleNamespace(options=options, material=SimpleNamespace(
        shared_secret=SECRET, certificate_authority=None))


def test_stopping_a_split_proxy_closes_its_channels_and_thread(services: Any) -> None:
    bridge, reactor = services
    policy = policy_snapshot()
    authorize = start_authorize(bridge, AuthorizeDecider(FakeHolder(), policy))
    before = {t.name for t in threading.enumerate()}
    root = MultiService()
    split = SplitRpc(proxy_snapshot(authorize.port), reactor, root)
    remote = split.authorizer(LocalIdentity())  # type: ignore[arg-type]
    assert isinstance(remote, RemoteAuthorizer)
    root.startService()
    try:
        plan = plan_for(policy, APP, "/x")
        assert isinstance(reactor.wait(remote.authorize(info("/x"), plan.route)), Allow)
        [channel] = remote.client._channels.values()
        assert "grpc-aio" in {t.name for t in threading.enumerate()}
    finally:
        reactor.wait(root.stopService())
    assert channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN
    assert not remote.client._channels
    assert {t.name for t in threading.enumerate()} - before == set()
    # a request during the stop gets a 503, and opens no channel again
    after = reactor.wait(remote.authorize(info("/x"), plan.route))
    assert isinstance(after, Reply) and after.status == 503
    assert not remote.client._channels
    reactor.wait(authorize.stopService())


def test_a_closed_client_opens_no_channel_again(services: Any) -> None:
    """A request still in flight while the process stops (the loop still running) gets
    an answer of its own (Unavailable: a 503) instead of a fresh channel."""
    bridge, reactor = services
    remote = RemoteAuthorizer.create(bridge, LocalIdentity(),  # type: ignore[arg-type]
                                     ("http://127.0.0.1:9",), SECRET, 1.0)
    reactor.wait(remote.close())
    decision = reactor.wait(remote.authorize(info("/x"), plan_for(policy_snapshot(), APP,
                                                                   "/x").route))
    assert isinstance(decision, Reply) and decision.status == 503
    assert not remote.client._channels
