"""The authorize service over gRPC: one ``Check`` per request a split proxy must decide.

The decision is the all-in-one one, made on the reactor thread by this process's
``IdentityHolder`` (session lookup and fetch from the databroker, token refresh with the
identity provider, policy, the signed identity assertion and claim headers, the rendered
deny page or sign-in redirect). What is new here is only the route:

- authorize matches the request against its OWN policy (host and path, or the
  authority of a CONNECT), exactly as its data plane would (``Plan.lookup``);
- the proxy names the route it matched (``route_key``: ``from`` and path matcher); when
  the two differ the configurations differ, and the answer is a mismatch, never a
  decision (the proxy answers 503), with a log line on both sides naming the two keys.

Every answer carries the kid of the key authorize signs with (``signing_check``), and
``SigningKey`` answers it alone, so the proxies can tell that they publish the same key.

Authorize's own decision cache (per session record and route, ``Identity``) serves
repeated requests; session changes reach it through the databroker's change stream.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.authenticate.holder import IdentityHolder
from gateway.config.snapshot import Snapshot
from gateway.dataplane.routing.plan import Plan, build_plan
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_wire import decision_to_pb, request_from_pb, route_key
from gateway.rpc.log_limit import MismatchLog
from gateway.rpc.protos import authorize_pb2 as pb
from gateway.rpc.protos import authorize_pb2_grpc as pb_grpc
from gateway.rpc.signing_check import AskedNotice, published_kid
from gateway.rpc.trace_context import ServerTracing

log = Logger(namespace="gateway.rpc")

SERVICE_NAME = "gateway.authorize.v1.Authorize"


class AuthorizeDecider:
    """On the reactor: this process's policy (a plan per snapshot) and identity."""

    def __init__(self, holder: IdentityHolder, snapshot: Snapshot) -> None:
        self.holder = holder
        self.plan: Plan = build_plan(snapshot)
        self.mismatches = MismatchLog()
        self.key_mismatches = AskedNotice()

    def apply(self, snapshot: Snapshot) -> None:
        if snapshot is not self.plan.snapshot:
            self.plan = build_plan(snapshot, self.plan)

    def check(self, message: pb.CheckRequest) -> pb.CheckResponse | Deferred[pb.CheckResponse]:
        request = request_from_pb(message)
        if message.connect:
            plan, _ = self.plan.lookup_tcp(request.host)
        else:
            plan, _ = self.plan.lookup(request.host, request.path)
        ours = route_key(plan.route if plan is not None else None)
        if plan is None or ours != message.route_key:
            if self.mismatches.due(message.route_key, ours):
                log.error("route mismatch for {host}{path}: the proxy matched route "
                          "{proxy_route!r}, this authorize matched {authorize_route!r}; "
                          "their policies differ (give every process the same routes); "
                          "answered 503", host=request.host, path=request.path,
                          proxy_route=message.route_key, authorize_route=ours or "none")
            return pb.CheckResponse(route_key=ours, mismatch=True)
        decision = self.holder.authorize(request, plan.route)
        kid = published_kid(self.holder.signer)
        if isinstance(decision, Deferred):
            return decision.addCallback(decision_to_pb, ours, kid)
        return decision_to_pb(decision, ours, kid)

    def signing_key(self, asked: pb.SigningKeyRequest) -> pb.SigningKeyResponse:
        """Our key; a process that publishes another is said here too (AskedNotice)."""
        signer = self.holder.signer
        ours = published_kid(signer)
        self.key_mismatches(asked.process, asked.kid, ours)
        return pb.SigningKeyResponse(kid=ours, algorithm=signer.algorithm)


class AuthorizeServicer(pb_grpc.AuthorizeServicer):
    def __init__(self, bridge: AsyncioThread, decider: AuthorizeDecider,
                 tracing: ServerTracing | None = None) -> None:
        self.bridge = bridge
        self.decider = decider
        self.tracing = tracing or ServerTracing()

    async def Check(self, request: pb.CheckRequest, context: Any) -> pb.CheckResponse:
        metadata = context.invocation_metadata()  # a traced request's traceparent
        answer: pb.CheckResponse = await self.bridge.in_reactor(
            lambda: self.tracing.traced(metadata, f"grpc {SERVICE_NAME}/Check",
                                        lambda: self.decider.check(request)))
        return answer

    async def SigningKey(self, request: pb.SigningKeyRequest, context: Any
                         ) -> pb.SigningKeyResponse:
        answer: pb.SigningKeyResponse = await self.bridge.in_reactor(
            lambda: self.decider.signing_key(request))
        return answer
