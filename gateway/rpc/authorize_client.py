"""The data plane's ``Authorizer`` in a split proxy: every decision is asked of the
authorize service over gRPC (``authorize_service_url(s)``).

- ``authorize``: one ``Check`` per request (and per re-check of an open tunnel or
  websocket). The proxy sends the route it matched; authorize decides with its own
  policy and answers the headers to add (the identity assertion, claim headers) or the
  whole deny answer (the rendered 401/403 page, or the sign-in redirect). No decision is
  cached here: authorize caches per session record and route, and a loopback round trip
  measured about 1 ms median, bridge hops included (README, Split deployment).
- Failure never allows: no authorize answering within ``grpc_client_timeout`` (every
  URL tried, client-side failover), a refused token (``shared_secret differs``, logged),
  a broken answer, or a route mismatch (configurations differ; logged with both route
  keys) are each a 503 page with a body that says which.
- An allow that passes an identity assertion signed with another key than the one this
  proxy publishes (its ``signing_key``; ``signing_check``) is a 503 too, said in a log
  line naming ``signing_key`` on both sides.
- The gateway's own endpoints on route hosts (``/.gateway/*``: the sign-in hand-off,
  sign-out, the account pages) stay in this process (``local``): they set and clear this
  host's cookie, and read sessions from the databroker.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.authenticate.holder import IdentityHolder
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.authorize_server import SERVICE_NAME
from gateway.rpc.authorize_wire import decision_from_pb, request_to_pb, route_key
from gateway.rpc.failover import FailoverClient
from gateway.rpc.log_limit import MismatchLog
from gateway.rpc.protos import authorize_pb2 as pb
from gateway.rpc.protos import authorize_pb2_grpc as pb_grpc
from gateway.rpc.signing_check import (
    MISMATCH_BODY,
    MismatchNotice,
    carries_assertion,
    published_kid,
)
from gateway.rpc.trace_context import client_call, end
from gateway.wire.request_id import HEADER as REQUEST_ID

log = Logger(namespace="gateway.rpc")

UNAVAILABLE = ("Authorization is unavailable right now (the authorize service did not "
               "answer); try again shortly.")
MISMATCH = ("This gateway's proxy and authorize services disagree about which route "
            "serves this address (their configurations differ); ask an administrator.")


def authorize_failover(bridge: AsyncioThread, urls: tuple[str, ...], secret: bytes,
                       timeout: float, ca: bytes | None = None, override_name: str = "",
                       round_robin: bool = True, process: str = "proxy") -> FailoverClient:
    """A client of the authorize service at ``urls`` (failover between them)."""
    return FailoverClient(bridge, "authorize", SERVICE_NAME, pb_grpc.AuthorizeStub, urls,
                          secret, timeout, ca, override_name, round_robin, process)


class RemoteAuthorizer:
    def __init__(self, bridge: AsyncioThread, local: IdentityHolder,
                 client: FailoverClient) -> None:
        self.bridge = bridge
        self.local = local
        self.client = client
        self.mismatches = MismatchLog()
        self.key_mismatch = MismatchNotice(client.process)

    @classmethod
    def create(cls, bridge: AsyncioThread, local: IdentityHolder, urls: tuple[str, ...],
               secret: bytes, timeout: float, ca: bytes | None = None,
               override_name: str = "", round_robin: bool = True,
               process: str = "proxy") -> RemoteAuthorizer:
        return cls(bridge, local, authorize_failover(
            bridge, urls, secret, timeout, ca, override_name, round_robin, process))

    # -- Authorizer

    def authorize(self, request: RequestInfo, route: Route) -> Deferred[Decision]:
        key = route_key(route)
        message = request_to_pb(request, self.local.identity.options.cookie_name, key,
                                connect=bool(route.tcp))
        span, metadata = client_call(SERVICE_NAME, "Check")  # a traced request: its trace
        d: Deferred[pb.CheckResponse] = self.bridge.submit(
            lambda: self.client.invoke("Check", message, metadata))
        d.addBoth(end, span)
        return d.addCallbacks(self._answered, self._failed, (request, key),
                              errbackArgs=(request,))

    def sign_in(self, request: RequestInfo) -> Decision:
        return self.local.sign_in(request)

    def close(self) -> Deferred[None]:
        return self.bridge.submit(self.client.close)

    # -- answers

    def _answered(self, answer: pb.CheckResponse, request: RequestInfo, key: str
                  ) -> Decision:
        decision = decision_from_pb(answer, request.mcp)
        if answer.mismatch or decision is None:
            if self.mismatches.due(key, answer.route_key):
                log.error("route mismatch for {host}{path}: this proxy matched route "
                          "{proxy_route!r}, authorize matched {authorize_route!r}; their "
                          "policies differ (give every process the same routes); answered "
                          "503", host=request.host, path=request.path, proxy_route=key,
                          authorize_route=answer.route_key or "none")
            return self._error(request, MISMATCH, "authorize-route-mismatch")
        if isinstance(decision, Reply):
            _adopt_request_id(request, decision)
        elif carries_assertion(decision):
            ours = published_kid(self.local.signer)
            if answer.signing_kid != ours:  # upstreams could not verify it: fail closed
                self.key_mismatch(ours, answer.signing_kid)
                return self._error(request, MISMATCH_BODY, "signing-key-mismatch")
        return decision

    def _failed(self, failure: Failure, request: RequestInfo) -> Decision:
        # FailoverClient has logged each URL's failure (rate-limited); never an allow.
        log.debug("authorize unavailable: {error}", error=failure.getErrorMessage())
        return self._error(request, UNAVAILABLE, "authorize-unavailable")

    def _error(self, request: RequestInfo, message: str, reason: str) -> Reply:
        return self.local.identity.error(503, message, request.headers, reason)


def _adopt_request_id(request: RequestInfo, decision: Reply) -> None:
    """The id on authorize's page becomes this request's (the access log shows it)."""
    if any(n.lower() == REQUEST_ID for n, _ in request.headers):
        return
    for name, value in decision.headers:
        if name.lower() == REQUEST_ID:
            request.headers.append((REQUEST_ID, value))
            return
