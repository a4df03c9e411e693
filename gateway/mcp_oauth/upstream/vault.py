"""The upstream token vault: on an MCP route with ``mcp.upstream_oauth2``, each person
authorizes the route's upstream (an outside authorization server) once, and every
request the route's policy allows reaches the MCP server with that person's upstream
access token as ``Authorization: Bearer`` (the MCP client's own token is removed, as on
every route). Pomerium calls the two tokens TE (the client's) and TI (the upstream's).

Three entrances:
- ``connect_step``: the consent flow's one call. After the person consents to a client
  on such a route, it asks whether the person must first authorize the upstream; if so
  it gets the upstream's authorization URL (code flow, PKCE S256, a one-time ``state``
  bound to the person's session) to send them to, and the flow continues at
  ``continue_url`` once the tokens are stored.
- ``callback``: ``/.gateway/mcp/connect/callback`` on the route's host, where the
  upstream sends the person back: the state taken (once), checked against the session
  that started it (so nobody can plant their upstream account in another's vault), the
  code exchanged, the tokens stored (``tokens``), and on to ``continue_url``.
- ``decorate``: an allowed request's decision gets the person's access token, refreshed
  when it is within ``REFRESH_AHEAD`` of its expiry (one refresh per person and route at
  a time in a process); without usable tokens the request is answered 401
  ``invalid_token`` (the client signs in again, and the consent flow connects again).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from treq.client import HTTPClient
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool

from gateway.authorize.hook import Allow, Decision, Reply
from gateway.config.mcp_upstream import UpstreamOAuth2
from gateway.config.routes import Route
from gateway.databroker.cipher import RecordCipher
from gateway.databroker.records import RecordStore
from gateway.mcp_oauth.upstream import oauth
from gateway.mcp_oauth.upstream.tokens import (
    CONNECT_SECONDS,
    PendingConnect,
    forget_tokens,
    read_tokens,
    start_connect,
    take_connect,
    token_id,
    write_tokens,
)

log = Logger()

CALLBACK_PATH = "/.gateway/mcp/connect/callback"
REFRESH_AHEAD = 30.0


class ConnectRefused(Exception):
    """The callback cannot complete; the text is what the person reads."""


def route_key(route: Route) -> str:
    """The route as its resource identifier names it (host and path or prefix)."""
    return f"{route.host}{(route.path or route.prefix).rstrip('/')}"


def upstream_of(route: Route) -> UpstreamOAuth2 | None:
    return route.mcp.upstream_oauth2 if route.mcp is not None else None


def _vault_key(shared_secret: bytes) -> bytes:
    # a key of its own, so the tokens are not sealed as the kvstore seals the record again
    return hashlib.sha256(b"gateway mcp upstream token vault\0" + shared_secret).digest()


def _challenge(description: str) -> Reply:
    return Reply(401, b'{"error":"invalid_token"}\n', (
        (b"content-type", b"application/json"), (b"cache-control", b"no-store"),
        (b"www-authenticate",
         f'Bearer error="invalid_token", error_description="{description}"'.encode())),
        reason="mcp-upstream-not-connected")


class UpstreamVault:
    def __init__(self, reactor: Any, records: RecordStore, shared_secret: bytes,
                 http: HTTPClient | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.reactor = reactor
        self.clock = clock if clock is not None else reactor.seconds
        self.records = records
        self.shared_secret = shared_secret
        self.cipher = RecordCipher(_vault_key(shared_secret))
        # the system store, no kept connections (an upstream is asked rarely); ``http``
        # and ``clock`` are the tests' seams (an in-memory upstream, tokens made due)
        self.http = http if http is not None else HTTPClient(Agent(
            reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        self._refreshing: dict[str, list[Deferred[str | None]]] = {}

    # --- the consent flow's step ---------------------------------------------------

    def connect_step(self, route: Route, provider: str, user_id: str, session_id: str,
                     continue_url: str, callback_url: str) -> Deferred[str | None]:
        """The upstream authorization URL to send the person (``provider``'s
        ``user_id``) to first, or None (the route has no upstream, or the person's
        tokens are stored)."""
        return Deferred.fromCoroutine(self._connect_step(route, provider, user_id,
                                                         session_id, continue_url,
                                                         callback_url))

    async def _connect_step(self, route: Route, provider: str, user_id: str,
                            session_id: str, continue_url: str, callback_url: str
                            ) -> str | None:
        upstream = upstream_of(route)
        if upstream is None:
            return None
        now = self.clock()
        rid = token_id(route_key(route), upstream, provider, user_id)
        if await read_tokens(self.records, self.cipher, rid, now) is not None:
            return None
        state = secrets.token_urlsafe(32)
        verifier, challenge = oauth.pkce_pair()
        await start_connect(self.records, self.cipher, state, PendingConnect(
            route_key(route), provider, user_id, session_id, verifier, continue_url, callback_url,
            now + CONNECT_SECONDS))
        return oauth.authorization_url(upstream, state, challenge, callback_url)

    # --- the callback --------------------------------------------------------------

    def callback(self, routes: Iterable[Route], provider: str, user_id: str,
                 session_id: str, query: Mapping[str, str]) -> Deferred[str]:
        """Where the person goes next (the consent flow's ``continue_url``); fails with
        ``ConnectRefused`` (a page) or ``oauth.UpstreamUnavailable`` (503)."""
        return Deferred.fromCoroutine(self._callback(tuple(routes), provider, user_id,
                                                     session_id, query))

    async def _callback(self, routes: tuple[Route, ...], provider: str, user_id: str,
                        session_id: str, query: Mapping[str, str]) -> str:
        now = self.clock()
        pending = await take_connect(self.records, self.cipher, query.get("state", ""), now)
        if pending is None:
            raise ConnectRefused("This authorization is unknown, used or expired. Connect "
                                 "again from your MCP client.")
        if (pending.provider, pending.user_id, pending.session_id) != (
                provider, user_id, session_id):
            log.warn("MCP upstream authorization for {route} refused: it was started in "
                     "another session", route=pending.route_key)
            raise ConnectRefused("This authorization was started in another session. "
                                 "Connect again from your MCP client.")
        route = next((r for r in routes if route_key(r) == pending.route_key
                      and upstream_of(r) is not None), None)
        upstream = upstream_of(route) if route is not None else None
        if upstream is None:
            raise ConnectRefused("This route no longer has an upstream to authorize.")
        if "error" in query:
            raise ConnectRefused(f"The upstream refused: {query['error'][:100]}.")
        code = query.get("code", "")
        if not code:
            raise ConnectRefused("The upstream sent no authorization code.")
        try:
            tokens = await oauth.exchange_code(upstream, code, pending.verifier,
                                               pending.redirect_uri, now, self.reactor,
                                               self.http)
        except oauth.UpstreamRefused as exc:
            log.warn("MCP upstream authorization for {route} refused at {token_url}: "
                     "{error}", route=pending.route_key, token_url=upstream.token_url,
                     error=str(exc))
            raise ConnectRefused(f"The upstream refused the code ({exc.error}).") from None
        await write_tokens(self.records, self.cipher,
                           token_id(pending.route_key, upstream, provider, user_id),
                           tokens, now)
        log.info("MCP upstream of {route} authorized for {user}", route=pending.route_key,
                 user=user_id)
        return pending.continue_url

    # --- requests --------------------------------------------------------------------

    def bearer(self, route: Route, provider: str, user_id: str) -> Deferred[str | None]:
        """The person's access token for the route's upstream (refreshed if due), or
        None: not authorized, or no longer (the refresh was refused)."""
        upstream = upstream_of(route)
        if upstream is None or not user_id:
            return Deferred.fromCoroutine(_none())
        rid = token_id(route_key(route), upstream, provider, user_id)
        mine: Deferred[str | None] = Deferred()
        waiting = self._refreshing.get(rid)
        if waiting is not None:  # a read or refresh under way: wait for its token
            waiting.append(mine)
            return mine
        self._refreshing[rid] = [mine]

        def settle(result: Any) -> None:
            for waiter in self._refreshing.pop(rid, []):
                if isinstance(result, Failure):
                    waiter.errback(result)
                else:
                    waiter.callback(result)

        Deferred.fromCoroutine(self._bearer(upstream, rid)).addBoth(settle)
        return mine

    async def _bearer(self, upstream: UpstreamOAuth2, rid: str) -> str | None:
        now = self.clock()
        tokens = await read_tokens(self.records, self.cipher, rid, now)
        if tokens is None:
            return None
        if not tokens.expires_at or now < tokens.expires_at - REFRESH_AHEAD:
            return tokens.access_token
        if not tokens.refresh_token:
            await forget_tokens(self.records, rid)
            return None
        try:
            fresh = await oauth.refresh(upstream, tokens.refresh_token, now, self.reactor,
                                        self.http)
        except oauth.UpstreamRefused as exc:
            log.warn("MCP upstream token refresh refused at {token_url} ({error}): the "
                     "person must authorize again", token_url=upstream.token_url,
                     error=exc.error)
            await forget_tokens(self.records, rid)
            return None
        await write_tokens(self.records, self.cipher, rid, fresh, now)
        return fresh.access_token

    def forget(self, route: Route, provider: str, user_id: str) -> Deferred[None]:
        upstream = upstream_of(route)
        if upstream is None:
            return Deferred.fromCoroutine(_nothing())
        return Deferred.fromCoroutine(forget_tokens(
            self.records, token_id(route_key(route), upstream, provider, user_id)))

    def decorate(self, decision: Decision | Deferred[Decision], route: Route
                 ) -> Decision | Deferred[Decision]:
        """``decision`` with the person's upstream token (an ``Allow``), a 401 when
        they have none, a 503 when the upstream cannot refresh it; anything else as
        it is."""
        if isinstance(decision, Deferred):
            return decision.addCallback(self._decorated, route)
        return self._decorated(decision, route)

    def _decorated(self, decision: Decision, route: Route) -> Decision | Deferred[Decision]:
        if not isinstance(decision, Allow) or decision.caller is None:
            return decision
        allow, caller = decision, decision.caller

        def with_token(token: str | None) -> Decision:
            if token is None:
                return replace(_challenge("the upstream of this MCP route is not authorized "
                                          "for you; sign in again"), caller=caller)
            # (every other field kept: the MCP messages' verdicts go on to the response
            # filter and the audit)
            return replace(allow, headers=(*allow.headers, (b"authorization",
                                                            b"Bearer " + token.encode())),
                           remove=allow.remove | {b"authorization"})

        def unavailable(failure: Any) -> Decision:
            failure.trap(oauth.UpstreamUnavailable)
            log.warn("MCP upstream token refresh failed: {why}", why=str(failure.value))
            return Reply(503, b'{"error":"temporarily_unavailable"}\n', (
                (b"content-type", b"application/json"), (b"retry-after", b"5")),
                reason="mcp-upstream-unavailable", caller=caller)

        return self.bearer(route, caller.provider, caller.user_id).addCallbacks(
            with_token, unavailable)


async def _none() -> str | None:
    return None


async def _nothing() -> None:
    return None
