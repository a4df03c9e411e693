"""Sign-in: the per-snapshot state behind the gateway's own endpoints and sign-in answers.

Browser flow (route host ``app``, authenticate host ``auth``, no shared cookie domain):

1. ``app`` without a session: 302 to ``auth/.gateway/sign_in?gateway_redirect=<sealed URL>``.
2. ``auth`` with its own session cookie: straight to step 4; otherwise a CSRF cookie and
   a sealed ``state`` (original URL, nonce, PKCE verifier, CSRF hash; 10 minutes), then
   302 to the provider.
3. ``auth`` callback: state checked against the cookie, code exchanged, ID token
   validated, userinfo merged, a server-side session created, ``auth``'s cookie set.
4. 302 to ``app/.gateway/callback?gateway_session=<sealed session id, 60 s>``; ``app``
   sets its own cookie and redirects to the original URL.

Everything carried between the hosts is sealed with ``shared_secret`` and expires;
cookies are sealed with ``cookie_secret``. The session record is the source of truth:
deleting it (sign-out) ends the session on every host.

This module holds the per-snapshot sign-in state: the sealers, session cookies, step 1's
redirect, token refresh and new sessions. It builds the request's session lookup
(``gateway.sessions.lookup``) and the decider (``gateway.authorize.http_requests``), which asks
it for sign-in answers and refreshes. The endpoints of steps 2-4, programmatic login and
sign-out are in ``endpoints``, the pure target checks in ``targets``.
"""


from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate.bearer_callers import BearerCallers
from gateway.authenticate.clients import Clients
from gateway.authenticate.sign_in import SignInFlow
from gateway.authorize import answers
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.claims import session_from_claims
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.authorize.http_requests import Decider, McpTokens
from gateway.bearer_jwt.verifier import Verifier
from gateway.config.providers import IMPLICIT_ID
from gateway.config.snapshot import Snapshot
from gateway.pages.layout import Action, look_of
from gateway.pages.whoami import AllowedClient
from gateway.sessions.cookie import set_cookie_headers
from gateway.sessions.lookup import Found, SessionLookup
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.spent import SpentTokens
from gateway.sessions.store import DirectoryGroups, SessionStore

log = Logger()
# what a page answers given the request's session (None: none, or not valid now)
SessionAnswer = Callable[[Session | None], Decision | Deferred[Decision]]
# the MCP clients a session's person allowed, each with its revoke button (given the
# form's CSRF token)
Consents = Callable[[Session, str], Deferred[list[AllowedClient]]]


class Identity:
    """Per snapshot: sign-in state (sealers, cookies, the providers' clients), and the
    request's session lookup and decider built on it; the decider's ``SignIn`` is
    ``flow`` (``sign_in.SignInFlow``)."""

    def __init__(self, reactor: Any, snapshot: Snapshot, store: SessionStore,
                 signer: AssertionSigner, clock: Callable[[], float] = time.time,
                 directory: DirectoryGroups | None = None,
                 spent: SpentTokens | None = None,
                 bearer: Mapping[str, Verifier] | None = None,
                 mcp: McpTokens | None = None,
                 mcp_consents: Consents | None = None) -> None:
        self.reactor = reactor
        # the MCP clients a person allowed, for their account page (``None``: no MCP
        # routes)
        self.mcp_consents = mcp_consents
        self.spent = spent if spent is not None else SpentTokens()  # used hand-offs
        self.store = store
        self.directory = directory
        self.signer = signer
        self.clock = clock
        o = snapshot.options
        self.options = o
        # ssh:// routes by name: an SSH sign-in offers the providers its route accepts
        self.ssh_routes = {r.ssh.name: r for r in snapshot.ssh_routes if r.ssh is not None}
        self.look = look_of(o)
        material = snapshot.material
        self.shared = Sealer(material.shared_secret)
        self.cookies = Sealer(material.cookie_secret)
        self.csrf_key = material.cookie_secret
        auth = urlsplit(o.authenticate_service_url) if o.authenticate_service_url else None
        self.auth_origin = f"{auth.scheme}://{auth.netloc}" if auth else ""
        self.auth_host = (auth.netloc or "").lower() if auth else ""
        self.auth_hostname = (auth.hostname or "").lower() if auth else ""
        self.allowed_hosts = {h for h in (self.auth_host, self.auth_hostname) if h}
        for route in snapshot.routes:
            self.allowed_hosts.add(route.host)
            if route.port:
                self.allowed_hosts.add(f"{route.host}:{route.port}")
        self.programmatic_domains = tuple(d.lower() for d in
                                          o.programmatic_redirect_domain_whitelist)
        self.sessions = SessionLookup(store, self.cookies, self.shared, o.cookie_name, clock)
        # one OIDC client per interactive provider; the sign-in answers and refreshes
        # the decider asks for are the flow's, not this object's
        self.clients = Clients(reactor, snapshot,
                               self.auth_origin + o.authenticate_callback_path)
        self.flow = SignInFlow(reactor, self.clients, self.shared, self.auth_origin, store,
                               clock, self.look)
        # the bearer providers' verifiers (``gateway.services.bearer_providers``), where
        # this process decides
        self.bearer = BearerCallers(bearer, o.identity_providers, o.cookie_name, self.look,
                                    clock) if bearer else None
        self.decider = Decider(snapshot, self.sessions, store, signer, self.flow, clock,
                               directory, self.bearer, mcp)

    # -- cookies and sessions

    def session_cookie(self, session: Session) -> tuple[tuple[bytes, bytes], ...]:
        o = self.options
        value = self.cookies.seal("session", {"sid": session.id}, session.expires_at)
        max_age = max(int(session.expires_at - self.clock()), 0)
        return tuple((b"set-cookie", v) for v in set_cookie_headers(
            o.cookie_name, value, max_age=max_age, domain=o.cookie_domain,
            secure=o.cookie_secure, http_only=o.cookie_http_only))

    def session_for(self, request: RequestInfo) -> Session | None:
        """The request's session: cookie on this host, or ``Authorization: Gateway``."""
        return self.sessions.find_in(request.headers).session

    def lookup(self, request: RequestInfo) -> Found:
        """The request's session, the session id it names and its programmatic token
        (the account pages)."""
        return self.sessions.find_in(request.headers)

    def with_session(self, request: RequestInfo, answer: SessionAnswer
                     ) -> Decision | Deferred[Decision]:
        """``answer`` given the request's session. With a store shared among processes,
        a session this process has no copy of is read from the store first: one made
        through another process an instant ago (a browser's next request need not reach
        the same worker) is not answered as no session."""
        found = self.lookup(request)
        if found.session is None and found.sid and self.store.needs_fetch:
            return self.after_reading(request, found.sid, answer)
        return answer(found.session)

    def after_reading(self, request: RequestInfo, sid: str, answer: SessionAnswer
                      ) -> Deferred[Decision]:
        """``answer`` given the session ``sid`` as the shared store holds it (None: gone
        or ended); 503 when the store cannot be read."""
        async def read() -> Decision:
            try:
                session: Session | None = await self.store.fetch(sid)
            except Exception as exc:  # storage down or unreadable: never a guess
                return self.storage_unavailable(request, exc)
            if session is not None and not session.valid(self.clock()):
                session = None
            result = answer(session)
            return await result if isinstance(result, Deferred) else result
        return ensureDeferred(read())

    def storage_unavailable(self, request: RequestInfo, exc: Exception) -> Reply:
        """The answer when the session store cannot be read: never a guess."""
        log.error("session storage unavailable: {error}", error=str(exc))
        return self.error(503, "Sessions cannot be read right now; try again shortly.",
                          request.headers, "session-storage-unavailable")

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self.csrf_key, session.id.encode(), hashlib.sha256).hexdigest()

    # -- sign-in (``flow``: the decider's ``SignIn``), for the pages and the SSH service

    def refresh_due(self, session: Session) -> float:
        return self.flow.refresh_due(session)

    async def refresh(self, session: Session) -> Session | None:
        return await self.flow.refresh(session)

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str, extra: tuple[tuple[bytes, bytes], ...] = (), **more: Any) -> Reply:
        """An error page of the family with this snapshot's look."""
        return answers.error(status, message, headers, reason, extra, look=self.look, **more)

    def switch_action(self, request: RequestInfo, uri: str = "") -> Action | None:
        return self.flow.switch_action(request, uri)

    def sign_in(self, request: RequestInfo) -> Reply:
        """302 to the authenticate host's sign-in (every interactive provider offered)
        with ``request``'s URL sealed in it."""
        return self.flow.sign_in(request)

    def new_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                    token_expiry: float, provider: str = IMPLICIT_ID) -> Session:
        """A new session, stored without waiting (see ``build_session``)."""
        session = self.build_session(claims, id_token, access, refresh, token_expiry,
                                     provider)
        self.store.put(session)
        return session

    def build_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                      token_expiry: float, provider: str = IMPLICIT_ID) -> Session:
        """The session a sign-in through ``provider`` creates; the sign-in stores it with
        ``put_confirmed``. It records the provider's ``iss`` and the ID token's ``sid``,
        which a back-channel logout names (``backchannel``)."""
        session = session_from_claims(claims, secrets.token_urlsafe(24), self.clock(),
                                      self.options.cookie_expire, id_token=id_token,
                                      access_token=access, refresh_token=refresh,
                                      token_expires_at=token_expiry)
        issuer, sid = claims.get("iss"), claims.get("sid")
        return replace(session, provider=provider,
                       idp_issuer=issuer if isinstance(issuer, str) else "",
                       idp_sid=sid if isinstance(sid, str) else "")

