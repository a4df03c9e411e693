"""The resource-server side of an MCP route: the request's ``Authorization: Bearer``
token, looked up, checked against the route, and answered as the grant behind it or
as the RFC 9728 challenge. The HTTP entrance (``gateway.authorize.http_requests``,
its ``McpTokens``) makes the caller of the grant's session and decides.

MCP routes take only their own tokens: neither the gateway's session cookie (a web
page the person opens must not be able to make requests an agent's client makes) nor
``Authorization: Gateway`` nor an outside issuer's JWT stands for a client there; a
request without a token is decided as someone not signed in (a policy that lets
everyone in lets it in), and answered the challenge otherwise, never a sign-in
redirect. A token that is not good is 401 ``invalid_token`` (the MCP text: invalid or
expired tokens MUST get 401), as is one bound to another route (RFC 8707 audience).

Lookups are cached per token hash for a few seconds (bounded) and dropped when any
grant ends (the change stream's tombstone, in every process): revocation, reuse of a
refresh token and a revoked consent are seen at once; a session's end is seen through
the session store itself, which the entrance reads for every request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

from twisted.internet.defer import Deferred, ensureDeferred

from gateway.authorize.hook import Reply, RequestInfo
from gateway.authorize.http_requests import McpHolder
from gateway.caches import FifoCache
from gateway.config.routes import Route
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import MCP_GRANT, MCP_TOKEN, Record
from gateway.mcp_oauth.grants import Grants
from gateway.mcp_oauth.metadata import challenge
from gateway.mcp_oauth.resources import canonical, metadata_url, resource_of
from gateway.mcp_oauth.tokens import Grant, Token, token_hash

CACHE_SIZE = 10_000
CACHE_SECONDS = 10.0


class TokenHolder(NamedTuple):
    """Who holds a good token: the grant's session and client."""

    session_id: str
    client_id: str
    grant_id: str


class Looked(NamedTuple):
    token: Token
    grant: Grant
    until: float


def bearer_token(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, int]:
    """The ``Bearer`` credential of the request's Authorization headers and how many
    there are (``None``: none, or not a Bearer one)."""
    values = [v for n, v in headers if len(n) == 13 and n.lower() == b"authorization"]
    if not values:
        return None, 0
    scheme, _, token = values[0].strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None, len(values)
    return token.strip().decode("latin-1"), len(values)


class McpResourceServer:
    """The ``McpTokens`` of the HTTP entrance, one per process (kept across reloads:
    the cache follows the change stream)."""

    def __init__(self, grants: Grants, follower: ChangeFollower | None,
                 clock: Callable[[], float]) -> None:
        self.grants = grants
        self.clock = clock
        self._cache: FifoCache[str, Looked] = FifoCache(CACHE_SIZE)
        # (route object, scheme, Host) -> the route's resource identifier
        self._resources: FifoCache[tuple[int, str, str], tuple[Route, str]] = \
            FifoCache(1024)
        grants.on_end.append(self._cache.clear)
        if follower is not None:
            follower.subscribe(MCP_GRANT, self._changed)
            follower.subscribe(MCP_TOKEN, self._changed)
            follower.on_reset(self._cache.clear)

    def _changed(self, record: Record) -> None:
        if record.deleted:  # a grant ended, a token revoked: rare; look again
            self._cache.clear()

    def forget(self) -> None:
        self._cache.clear()

    def holder(self, request: RequestInfo, route: Route
               ) -> McpHolder | Reply | Deferred[McpHolder | Reply | None] | None:
        """The grant behind the request's token; the 401 refusing it; ``None``: no
        credential at all (decided as someone not signed in)."""
        token, count = bearer_token(request.headers)
        if count == 0:
            return None
        if token is None or count > 1:
            return self.refused(request, route, "only one Authorization: Bearer token "
                                "this gateway issued for this MCP server is accepted")
        now = self.clock()
        key = token_hash(token)
        hit = self._cache.get(key)
        if hit is not None and now < hit.until:
            return self._bound(request, route, hit)

        async def look() -> McpHolder | Reply | None:
            found = await self.grants.access(token)
            if found is None:
                return self.refused(request, route, "the access token is unknown, "
                                    "expired or revoked")
            looked = Looked(found[0], found[1], min(self.clock() + CACHE_SECONDS,
                                                   found[0].expires_at))
            self._cache.put(key, looked)
            return self._bound(request, route, looked)
        return ensureDeferred(look())

    def _bound(self, request: RequestInfo, route: Route, looked: Looked
               ) -> TokenHolder | Reply:
        token = looked.token
        if self.clock() >= token.expires_at:
            return self.refused(request, route, "the access token has expired")
        if self._resource(route, request.scheme, request.host) != token.resource:
            return self.refused(request, route, "the access token was issued for another "
                                "resource")
        return TokenHolder(token.session_id, token.client_id, token.grant_id)

    def _resource(self, route: Route, scheme: str, host: str) -> str:
        """The route's resource identifier as the client reached it (kept: it is
        compared on every request)."""
        key = (id(route), scheme, host)
        found = self._resources.get(key)
        if found is None or found[0] is not route:
            found = (route, canonical(resource_of(route, scheme, host)))
            self._resources.put(key, found)
        return found[1]

    def challenge(self, request: RequestInfo, route: Route) -> Reply:
        """No token, and the policy does not let anyone in: 401 with where to start."""
        url = metadata_url(route, request.scheme, request.host)
        body = json.dumps({"error": "unauthorized", "error_description":
                           "this MCP server needs an access token from its "
                           "authorization server"}).encode()
        return Reply(401, body, ((b"www-authenticate", challenge(url)),
                                 (b"content-type", b"application/json"),
                                 (b"cache-control", b"no-store")),
                     reason="mcp-token-missing")

    def refused(self, request: RequestInfo, route: Route, description: str) -> Reply:
        url = metadata_url(route, request.scheme, request.host)
        body = json.dumps({"error": "invalid_token",
                           "error_description": description}).encode()
        return Reply(401, body, ((b"www-authenticate", challenge(
            url, error="invalid_token", description=description)),
            (b"content-type", b"application/json"), (b"cache-control", b"no-store")),
            reason="mcp-token-invalid")
