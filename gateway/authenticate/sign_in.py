"""What deciding asks of sign-in (the decider's ``SignIn``): the answer to someone not
signed in, the page for a session of a provider the route does not accept, "sign in as
someone else", and token refresh at the provider that signed the session in.

Apart from ``Identity`` (which holds a snapshot's sealers, cookies and sessions and
builds the decider with this): each provider's sign-in is its own (``Clients``), and a
route names the providers it accepts, so the sign-in a route sends people to carries
them (sealed), and the authenticate host offers only those.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate import refresh_lease
from gateway.authenticate.clients import Clients
from gateway.authenticate.targets import SIGN_IN, STATE_TTL
from gateway.authorize import answers
from gateway.authorize.caller import caller_of
from gateway.authorize.claims import claim_groups, flatten_claims
from gateway.authorize.hook import Reply, RequestInfo
from gateway.config.routes import Route
from gateway.pages.layout import Action, Look
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.store import SessionStore

log = Logger()
REFRESH_GRACE = 60.0


async def _share(deferred: Deferred[Any]) -> Any:
    """Await a Deferred that others await too (without consuming its result)."""
    waiter: Deferred[Any] = Deferred()

    def relay(result: Any) -> Any:
        waiter.callback(result)
        return result

    deferred.addBoth(relay)
    return await waiter


def request_url(request: RequestInfo) -> str:
    return f"{request.scheme}://{request.host}{request.path}" + \
        request.query.decode("latin-1")


class SignInFlow:
    """Per snapshot: the sign-in answers and refreshes of the providers in ``clients``."""

    def __init__(self, reactor: Any, clients: Clients, shared: Sealer, auth_origin: str,
                 store: SessionStore, clock: Callable[[], float], look: Look) -> None:
        self.reactor = reactor
        self.clients = clients
        self.shared = shared
        self.auth_origin = auth_origin
        self.store = store
        self.clock = clock
        self.look = look
        self._refreshing: dict[str, Deferred[Session | None]] = {}
        # the providers whose sessions a route accepts: asked by every decision that is
        # not remembered, so the clients' own (cached per route), without a call between
        self.accepted: Callable[[Route], tuple[str, ...]] = clients.accepted

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str, **more: Any) -> Reply:
        return answers.error(status, message, headers, reason, look=self.look, **more)

    # -- which providers

    def sign_in_link(self, uri: str, accepted: tuple[str, ...] = (), **more: Any) -> str:
        """The sealed ``gateway_redirect`` of a sign-in that returns to ``uri``, offering
        ``accepted`` (none named: every interactive provider)."""
        payload: dict[str, Any] = {"uri": uri, **more}
        if accepted and accepted != self.clients.interactive:
            payload["providers"] = list(accepted)
        return self.shared.seal("sign-in", payload, self.clock() + STATE_TTL)

    # -- answers

    def sign_in_answer(self, request: RequestInfo, route: Route | None = None) -> Reply:
        """No session (or an ended one): a redirect to sign in (browsers) or 401."""
        accepted = self.accepted(route) if route is not None else self.clients.interactive
        if route is not None and not accepted and self.clients.any:
            return self.error(401, "This route accepts no sign-in through a browser.",
                              request.headers, "no-interactive-provider")
        if not answers.wants_html(request.headers):
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        return self.sign_in(request, accepted)

    def sign_in(self, request: RequestInfo, accepted: tuple[str, ...] = ()) -> Reply:
        """302 to the authenticate host's sign-in with ``request``'s URL sealed in it."""
        if not self.auth_origin:
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        sealed = self.sign_in_link(request_url(request), accepted)
        return answers.redirect(f"{self.auth_origin}{SIGN_IN}?"
                                + urlencode({"gateway_redirect": sealed}))

    def refused_provider(self, request: RequestInfo, route: Route, session: Session) -> Reply:
        """A session of a provider ``route`` does not accept: a page that says so and
        offers each provider it does (a redirect to sign in would come straight back
        here: the authenticate host has a session)."""
        accepted = self.accepted(route)
        who = session.email or session.user_id
        names = ", ".join(self.clients.label(p) for p in accepted)
        message = (f"This route does not accept sign-ins through "
                   f"{self.clients.label(session.provider)}; "
                   + (f"sign in with {names}." if accepted else "it accepts none through "
                      "a browser."))
        actions: tuple[Action, ...] = ()
        if self.auth_origin and accepted:
            sealed = self.sign_in_link(request_url(request), accepted)
            actions = tuple(Action(f"Sign in with {self.clients.label(p)}",
                                   f"{self.auth_origin}{SIGN_IN}", "get",
                                   (("gateway_redirect", sealed), ("provider", p)))
                            for p in accepted)
        log.info("{user} signed in through {provider}, which {host} does not accept",
                 user=who, provider=session.provider, host=request.host,
                 client=request.client_ip)
        refused = self.error(403, message, request.headers,
                             f"provider-not-accepted: {session.provider}", who=who,
                             actions=actions, host=request.host)
        # who was refused, for the access log and the audit stream (an address the
        # provider did not vouch for is left out: nothing is decided on it here)
        return replace(refused, caller=caller_of(session, allow_unverified_email=False,
                                                 groups_available=False))

    def switch_action(self, request: RequestInfo, uri: str = "") -> Action | None:
        """"Sign in as someone else": a link to the authenticate host's sign-in that asks
        the provider for a fresh login (``prompt``), then returns to ``uri`` (default:
        the request's URL); the session the browser had ends once the new one exists."""
        if not self.auth_origin or not self.clients.any:
            return None
        sealed = self.sign_in_link(uri or request_url(request), switch=True)
        return Action("Sign in as someone else", f"{self.auth_origin}{SIGN_IN}", "get",
                      (("gateway_redirect", sealed),), primary=False)

    # -- refresh, at the session's own provider

    def refresh_due(self, session: Session) -> float:
        if session.refresh_token and self.clients.get(session.provider) is not None:
            return session.token_expires_at - REFRESH_GRACE
        return math.inf

    async def refresh(self, session: Session) -> Session | None:
        """New tokens before the old ones expire; a failed refresh ends the session.
        Concurrent requests of one session share one refresh."""
        pending = self._refreshing.get(session.id)
        if pending is None:
            pending = ensureDeferred(self._do_refresh(session))
            self._refreshing[session.id] = pending
            pending.addBoth(self._refresh_done, session.id)
        result: Session | None = await _share(pending)
        return result

    def _refresh_done(self, result: Any, session_id: str) -> Any:
        self._refreshing.pop(session_id, None)
        return result

    async def _do_refresh(self, session: Session) -> Session | None:
        client = self.clients.get(session.provider)
        if client is None:  # the provider left the configuration: so does the session
            self.store.delete(session.id)
            return None
        if self.store.needs_fetch:  # a store shared with other processes
            try:
                mine = await refresh_lease.claim(self.store, session)
            except Exception as exc:  # the store is down: refresh here, as alone
                log.warn("token refresh lease for {email} not taken: {error}",
                         email=session.email, error=str(exc))
                mine = True
            if not mine:
                log.debug("another process refreshes the tokens of {email}: waiting",
                          email=session.email)
                return await refresh_lease.wait_for_refresh(self.store, session,
                                                            self.reactor)
        try:
            tokens = await client.refresh(session.refresh_token)
        except Exception as exc:  # refused, unreachable or timed out: all end the session
            log.warn("token refresh for {email} failed, session ended: {error}",
                     email=session.email, error=str(exc), provider=session.provider)
            self.store.delete(session.id)
            return None
        claims = tokens.claims or {}
        groups = claim_groups(claims)
        updated = replace(
            session, access_token=tokens.access_token, refresh_token=tokens.refresh_token,
            id_token=tokens.id_token or session.id_token,
            token_expires_at=self.clock() + tokens.expires_in,
            claims=flatten_claims(claims) if claims else session.claims,
            groups=groups if claims else session.groups)
        self.store.put(updated)
        log.info("refreshed the tokens of {email}", email=session.email,
                 pid=os.getpid(), provider=session.provider)  # (which process, among workers)
        return updated
