"""The authorize decision over gRPC: the messages round trip (and carry only what a
decision reads), the route-mismatch rule (never a decision, a 503 and a log line naming
both routes), and the failure paths of the proxy's client (nothing answering, a wrong
shared_secret, a broken server): each a 503, never an allow. Real gRPC on loopback."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred, succeed

from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.config.snapshot import Snapshot
from gateway.dataplane.routing.plan import RoutePlan, build_plan
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_client import RemoteAuthorizer
from gateway.rpc.authorize_server import (
    SERVICE_NAME,
    AuthorizeDecider,
    AuthorizeServicer,
)
from gateway.rpc.authorize_wire import (
    decision_from_pb,
    decision_to_pb,
    request_from_pb,
    request_to_pb,
    route_key,
)
from gateway.rpc.log_limit import MismatchLog
from gateway.rpc.protos import authorize_pb2_grpc as pb_grpc
from gateway.rpc.server import GrpcServerService
from tests.support.processes import free_port

from ..config.helpers import IDENTITY, base_config, load
from .loopback import SECRET, server_snapshot

APP = "app.test"


def policy_snapshot(prefix: str = "/admin") -> Snapshot:
    policy = [
        {"from": f"https://{APP}", "to": "http://127.0.0.1:9", "prefix": prefix,
         "allowed_users": ["alice@example.com"]},
        {"from": f"https://{APP}", "to": "http://127.0.0.1:9",
         "allow_any_authenticated_user": True},
        {"from": "tcp+https://db.test:5432", "to": "tcp://127.0.0.1:5432",
         "allow_any_authenticated_user": True},
    ]
    return load(base_config(**IDENTITY, policy=policy))


def info(path: str = "/", headers: list[tuple[bytes, bytes]] | None = None,
         method: bytes = b"GET", host: str = APP) -> RequestInfo:
    return RequestInfo(method, "https", host, path, b"?q=1", list(headers or []),
                       "192.0.2.7")


def plan_for(snapshot: Snapshot, host: str, path: str) -> RoutePlan:
    plan, _ = build_plan(snapshot).lookup(host, path)
    assert plan is not None
    return plan


# -- the messages


def test_request_carries_only_what_a_decision_reads() -> None:
    headers = [(b"Cookie", b"app=secret-of-the-app; _gateway=sealed; _gateway_1=more"),
               (b"Authorization", b"Gateway tok3n"), (b"Accept", b"text/html"),
               (b"Origin", b"https://x.test"), (b"X-App-Secret", b"nope"),
               (b"Access-Control-Request-Method", b"PUT"), (b"X-Request-Id", b"rid-1")]
    message = request_to_pb(info("/admin/x", headers, b"OPTIONS"), "_gateway", "k")
    back = request_from_pb(message)
    assert (back.method, back.scheme, back.host, back.path, back.query, back.client_ip) == (
        b"OPTIONS", "https", APP, "/admin/x", b"?q=1", "192.0.2.7")
    assert message.route_key == "k" and not message.connect
    sent = dict(back.headers)
    assert sent[b"cookie"] == b"_gateway=sealed; _gateway_1=more"  # not the app's cookie
    assert sent[b"authorization"] == b"Gateway tok3n"
    assert sent[b"accept"] == b"text/html" and sent[b"origin"] == b"https://x.test"
    assert sent[b"access-control-request-method"] == b"PUT"
    assert sent[b"x-request-id"] == b"rid-1"
    assert b"x-app-secret" not in sent


def test_the_checked_client_certificate_goes_with_the_request() -> None:
    """A policy with ``client_certificate`` decides on the authorize service too: the
    certificate the proxy checked against the route's CA travels with the request."""
    request = info()
    request.client_cert = b"0\x82\x01\x0a-der-bytes"
    assert request_from_pb(request_to_pb(request, "_gateway", "k")).client_cert == \
        b"0\x82\x01\x0a-der-bytes"
    assert request_from_pb(request_to_pb(info(), "_gateway", "k")).client_cert == b""


def test_an_ordinary_authorization_header_is_not_sent() -> None:
    message = request_to_pb(info(headers=[(b"Authorization", b"Bearer app-token")]),
                            "_gateway", "k")
    assert not any(h.name == b"authorization" for h in message.headers)
    assert not any(h.name == b"cookie" for h in message.headers)


def test_decisions_round_trip() -> None:
    allow = Allow(((b"x-gateway-jwt-assertion", b"jwt"), (b"x-email", b"a@b")),
                  frozenset({b"authorization"}), "_gateway")
    deny = Reply(403, b"<html>no</html>", ((b"content-type", b"text/html"),),
                "denied: email-unauthorized")
    for decision in (allow, deny):
        message = decision_to_pb(decision, "key")
        assert message.route_key == "key" and not message.mismatch
        assert decision_from_pb(type(message).FromString(message.SerializeToString())) \
            == decision


def test_route_keys_name_from_and_the_path_matcher() -> None:
    snapshot = policy_snapshot()
    assert route_key(plan_for(snapshot, APP, "/admin/1").route) == \
        f"https://{APP} prefix=/admin"
    assert route_key(plan_for(snapshot, APP, "/other").route) == f"https://{APP} any path"
    assert route_key(None) == ""


# -- the mismatch rule (authorize's side)


class FakeHolder:
    """Allows, and says which route it was asked about."""

    def __init__(self, signer: AssertionSigner | None = None) -> None:
        self.asked: list[str] = []
        self.signer = signer or AssertionSigner(None, "ES256", "")

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        self.asked.append(route_key(route))
        return succeed(Allow(((b"x-route", route_key(route).encode()),)))


def test_the_route_authorize_matches_must_be_the_proxys() -> None:
    holder = FakeHolder()
    decider = AuthorizeDecider(holder, policy_snapshot())  # type: ignore[arg-type]
    same = decider.check(request_to_pb(info("/admin/1"), "_gateway",
                                       f"https://{APP} prefix=/admin"))
    outcome: list[Any] = []
    assert isinstance(same, Deferred)
    same.addCallback(outcome.append)
    assert outcome[0].WhichOneof("outcome") == "allow" and not outcome[0].mismatch
    # the proxy's policy had no /admin route: its key differs, no decision is made
    other = decider.check(request_to_pb(info("/admin/1"), "_gateway",
                                        f"https://{APP} any path"))
    assert not isinstance(other, Deferred)
    assert other.mismatch and other.WhichOneof("outcome") is None
    assert other.route_key == f"https://{APP} prefix=/admin"
    assert holder.asked == [f"https://{APP} prefix=/admin"]
    # CONNECT: matched by authority among the tcp+https routes
    tunnel = decider.check(request_to_pb(info("", method=b"CONNECT", host="db.test:5432"),
                                         "_gateway", "tcp+https://db.test:5432 any path",
                                         connect=True))
    assert isinstance(tunnel, Deferred)
    # an unknown host on authorize: a mismatch too
    unknown = decider.check(request_to_pb(info("/", host="nowhere.test"), "_gateway", "k"))
    assert not isinstance(unknown, Deferred) and unknown.mismatch
    assert unknown.route_key == ""


def test_mismatch_lines_are_rate_limited_per_pair() -> None:
    now = [0.0]
    log = MismatchLog(lambda: now[0])
    assert log.due("a", "b") and not log.due("a", "b") and log.due("a", "c")
    now[0] = 11.0
    assert log.due("a", "b")


# -- the proxy's client against a real server on loopback


class LocalIdentity:
    """The proxy's own identity layer, as far as the client uses it."""

    def __init__(self, signer: AssertionSigner | None = None) -> None:
        self.identity = SimpleNamespace(options=SimpleNamespace(cookie_name="_gateway"),
                                        error=self.error)
        self.signer = signer or AssertionSigner(None, "ES256", "")

    @staticmethod
    def error(status: int, message: str, headers: Any, reason: str) -> Reply:
        return Reply(status, message.encode(), (), reason)


def start_authorize(bridge: AsyncioThread, decider: Any, secret: bytes = SECRET
                    ) -> GrpcServerService:
    service = GrpcServerService(bridge, server_snapshot(secret), [
        (AuthorizeServicer(bridge, decider), pb_grpc.add_AuthorizeServicer_to_server,
         SERVICE_NAME)])
    service.startService()
    return service


def client(bridge: AsyncioThread, *ports: int, secret: bytes = SECRET,
           timeout: float = 5.0) -> RemoteAuthorizer:
    return RemoteAuthorizer.create(bridge, LocalIdentity(),  # type: ignore[arg-type]
                                   tuple(f"http://127.0.0.1:{p}" for p in ports), secret,
                                   timeout)


def messages(events: list[dict[str, Any]]) -> str:
    from twisted.logger import formatEvent
    return "\n".join(formatEvent(e) for e in events)


def test_decision_and_mismatch_through_a_server(rig: Any, events: Any) -> None:
    bridge, reactor = rig
    snapshot = policy_snapshot()
    server = start_authorize(bridge, AuthorizeDecider(FakeHolder(), snapshot))
    remote = client(bridge, server.port)
    try:
        plan = plan_for(snapshot, APP, "/admin/1")
        decision = reactor.wait(remote.authorize(info("/admin/1"), plan.route))
        assert decision == Allow(((b"x-route", f"https://{APP} prefix=/admin".encode()),))
        # the proxy's policy differs: its /admin route is another one
        other = plan_for(policy_snapshot(prefix="/adm"), APP, "/admin/1")
        refused = reactor.wait(remote.authorize(info("/admin/1"), other.route))
        assert isinstance(refused, Reply) and refused.status == 503
        assert refused.reason == "authorize-route-mismatch"
        reactor.drain()
        text = messages(events)
        assert f"this proxy matched route 'https://{APP} prefix=/adm', authorize matched " \
               f"'https://{APP} prefix=/admin'" in text
        assert "this authorize matched" in text  # the server's line
    finally:
        reactor.wait(remote.close())
        reactor.wait(server.stopService())


def test_nothing_answering_is_a_503_never_an_allow(rig: Any) -> None:
    bridge, reactor = rig
    snapshot = policy_snapshot()
    remote = client(bridge, free_port(), free_port(), timeout=1.0)
    try:
        decision = reactor.wait(remote.authorize(info("/x"), plan_for(snapshot, APP, "/x").route))
        assert isinstance(decision, Reply) and decision.status == 503
        assert decision.reason == "authorize-unavailable"
        assert b"unavailable" in decision.body
    finally:
        reactor.wait(remote.close())


def test_a_wrong_shared_secret_is_said_and_refused(rig: Any, events: Any) -> None:
    bridge, reactor = rig
    snapshot = policy_snapshot()
    server = start_authorize(bridge, AuthorizeDecider(FakeHolder(), snapshot))
    remote = client(bridge, server.port, secret=b"x" * 32)
    try:
        decision = reactor.wait(remote.authorize(info("/x"), plan_for(snapshot, APP, "/x").route))
        assert isinstance(decision, Reply) and decision.status == 503
        reactor.drain()
        text = messages(events)
        assert "authorize at http://127.0.0.1" in text and "shared_secret differs" in text
        assert "refused (bad token): shared_secret differs" in text  # the server's line
    finally:
        reactor.wait(remote.close())
        reactor.wait(server.stopService())


class Broken:
    def check(self, message: Any) -> Any:
        raise RuntimeError("policy exploded")


def test_a_failing_decision_is_a_503_and_failover_finds_the_other_url(rig: Any,
                                                                      events: Any) -> None:
    bridge, reactor = rig
    snapshot = policy_snapshot()
    broken = start_authorize(bridge, Broken())
    good = start_authorize(bridge, AuthorizeDecider(FakeHolder(), snapshot))
    plan = plan_for(snapshot, APP, "/x")
    alone = client(bridge, broken.port)
    both = client(bridge, broken.port, good.port)
    try:
        decision = reactor.wait(alone.authorize(info("/x"), plan.route))
        assert isinstance(decision, Reply) and decision.status == 503
        assert isinstance(reactor.wait(both.authorize(info("/x"), plan.route)), Allow)
        assert both.client.preferred == 1
        reactor.drain()
        assert f"authorize: now using http://127.0.0.1:{good.port}" in messages(events)
    finally:
        reactor.wait(alone.close())
        reactor.wait(both.close())
        reactor.wait(broken.stopService())
        reactor.wait(good.stopService())
