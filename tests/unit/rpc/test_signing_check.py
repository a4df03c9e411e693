"""Authorize signs the identity assertions, the proxy (or authenticate) publishes the key
set: their ``signing_key`` must be the same. Per request, a proxy answers 503 instead of
passing an assertion its JWKS cannot verify (routes without an assertion go on); at start
and every so often, ``SigningKeyCheck`` asks authorize and logs a mismatch naming
``signing_key`` on both sides. Real gRPC on loopback."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twisted.internet.defer import Deferred, succeed

from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_client import RemoteAuthorizer
from gateway.rpc.authorize_server import AuthorizeDecider
from gateway.rpc.failover import FailoverClient
from gateway.rpc.signing_check import SigningKeyCheck, published_kid
from tests.support.processes import free_port

from .loopback import SECRET
from .test_authorize_rpc import (
    APP,
    LocalIdentity,
    info,
    messages,
    plan_for,
    policy_snapshot,
    start_authorize,
)


def key_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def signer(pem: bytes | None) -> AssertionSigner:
    return AssertionSigner(pem, "ES256", "auth.test")


class AssertingHolder:
    """Allows with an identity assertion (or, for ``/plain``, without one)."""

    def __init__(self, signing: AssertionSigner) -> None:
        self.signer = signing

    def authorize(self, request: RequestInfo, route: Any) -> Decision | Deferred[Decision]:
        if request.path == "/plain":
            return succeed(Allow(((b"x-email", b"alice@example.test"),)))
        return succeed(Allow(((b"x-gateway-jwt-assertion", b"a.b.c"),)))


def remote(bridge: AsyncioThread, port: int, published: AssertionSigner
           ) -> RemoteAuthorizer:
    return RemoteAuthorizer.create(bridge, LocalIdentity(published),  # type: ignore[arg-type]
                                   (f"http://127.0.0.1:{port}",), SECRET, 5.0,
                                   process="gateway-proxy")


def test_published_kid_is_empty_without_a_signing_key() -> None:
    pem = key_pem()
    assert published_kid(signer(None)) == ""
    assert published_kid(signer(pem)) == signer(pem).kid != ""


@pytest.mark.parametrize("proxy_key, authorize_key, allowed", [
    ("same", "same", True),
    (None, None, True),        # both unset: nothing published, as all-in-one without one
    ("same", "other", False),
    ("same", None, False),     # authorize signs with an ephemeral key: unverifiable
    (None, "same", False),     # the proxy publishes an empty key set
])
def test_an_assertion_signed_with_an_unpublished_key_is_a_503(
        rig: Any, events: Any, proxy_key: str | None, authorize_key: str | None,
        allowed: bool) -> None:
    bridge, reactor = rig
    pems = {"same": key_pem(), "other": key_pem(), None: None}
    snapshot = policy_snapshot()
    server = start_authorize(bridge, AuthorizeDecider(
        AssertingHolder(signer(pems[authorize_key])), snapshot))  # type: ignore[arg-type]
    client = remote(bridge, server.port, signer(pems[proxy_key]))
    plan = plan_for(snapshot, APP, "/x")
    try:
        decision = reactor.wait(client.authorize(info("/x"), plan.route))
        if allowed:
            assert isinstance(decision, Allow)
        else:
            assert isinstance(decision, Reply) and decision.status == 503
            assert decision.reason == "signing-key-mismatch"
            assert b"signing_key" in decision.body
            reactor.drain()
            text = messages(events)
            assert "signing_key differs: authorize signs identity assertions with" in text
            assert "this process (gateway-proxy) publishes" in text
            # a route that passes no assertion is not affected
            assert isinstance(reactor.wait(client.authorize(info("/plain"), plan.route)), Allow)
    finally:
        reactor.wait(client.close())
        reactor.wait(server.stopService())


def test_the_check_at_start_says_whether_the_keys_agree(rig: Any, events: Any) -> None:
    bridge, reactor = rig
    pem = key_pem()
    snapshot = policy_snapshot()
    holder = AssertingHolder(signer(pem))
    server = start_authorize(bridge, AuthorizeDecider(holder, snapshot))  # type: ignore[arg-type]
    client = FailoverClient(bridge, "authorize", "gateway.authorize.v1.Authorize",
                            remote(bridge, 1, signer(None)).client.make_stub,
                            (f"http://127.0.0.1:{server.port}",), SECRET, 5.0)
    ours = [published_kid(signer(pem))]
    check = SigningKeyCheck(reactor, bridge, client, lambda: ours[0], "gateway-proxy")
    check.startService()
    try:
        while check.agreed is None:
            reactor.run_one()
        assert check.agreed
        reactor.drain()
        assert f"use the same key (kid {ours[0]})" in messages(events)
        assert "this authorize signs" not in messages(events)
        # this process reloads with another key: the next check says so
        ours[0] = ""
        reactor.clock.advance(30)
        while check.agreed:
            reactor.run_one()
        reactor.drain()
        text = messages(events)
        assert f"signing_key differs: authorize signs identity assertions with kid " \
               f"{holder.signer.kid}, this process (gateway-proxy) publishes none " \
               f"(signing_key not set" in text
        # and authorize says it too (both sides, as for shared_secret)
        assert f"signing_key differs: a gateway-proxy process publishes none (signing_key " \
               f"not set: an ephemeral key) on its JWKS endpoint, this authorize signs " \
               f"identity assertions with kid {holder.signer.kid}" in text
    finally:
        check.stopService()
        reactor.wait(bridge.submit(client.close))
        reactor.wait(server.stopService())


def test_the_check_waits_for_authorize_to_answer(rig: Any, events: Any) -> None:
    """Nothing answering yet: asked again with backoff, no verdict meanwhile."""
    bridge, reactor = rig
    client = FailoverClient(bridge, "authorize", "gateway.authorize.v1.Authorize",
                            remote(bridge, 1, signer(None)).client.make_stub,
                            (f"http://127.0.0.1:{free_port()}",), SECRET, 0.5)
    check = SigningKeyCheck(reactor, bridge, client, lambda: "", "gateway-proxy")
    check.startService()
    try:
        for _ in range(3):
            while not reactor.clock.getDelayedCalls():
                reactor.run_one()
            assert check.agreed is None
            [retry] = reactor.clock.getDelayedCalls()
            reactor.clock.advance(retry.getTime() - reactor.clock.seconds())
    finally:
        check.stopService()
        assert not reactor.clock.getDelayedCalls()
        reactor.drain()
        reactor.wait(bridge.submit(client.close))


@pytest.mark.parametrize("extra, warned", [
    ({}, True),  # all-in-one signs with its ephemeral key: warned
    ({"services": "proxy"}, True),  # a proxy that decides in process signs too
    ({"services": "proxy", "authorize_service_url": "http://127.0.0.1:5443"}, False),
    ({"services": "authenticate"}, False),  # it signs nothing, only publishes
])
def test_only_a_process_that_signs_warns_of_an_ephemeral_key(
        events: Any, extra: dict[str, Any], warned: bool) -> None:
    from gateway.authenticate.holder import _signer

    from ..config.helpers import IDENTITY, base_config, load

    split = {"shared_secret": SECRET_B64, "cookie_secret": SECRET_B64} if extra else {}
    snapshot = load(base_config(**IDENTITY, **split, **extra))
    assert _signer(snapshot, None).ephemeral
    text = messages(events)
    assert ("signed with an ephemeral" in text) is warned
    assert ("signs no identity assertions (the authorize service does)" in text) \
        is (not warned)


SECRET_B64 = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI="
