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
import math
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate import refresh_lease
from gateway.authenticate.oidc import Provider
from gateway.authenticate.targets import SIGN_IN, STATE_TTL
from gateway.authorize import answers
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.claims import claim_groups, flatten_claims, session_from_claims
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.authorize.http_requests import Decider
from gateway.config.snapshot import Snapshot
from gateway.pages.layout import Action, look_of
from gateway.sessions.cookie import set_cookie_headers
from gateway.sessions.lookup import Found, SessionLookup
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.spent import SpentTokens
from gateway.sessions.store import DirectoryGroups, SessionStore

log = Logger()
REFRESH_GRACE = 60.0
# what a page answers given the request's session (None: none, or not valid now)
SessionAnswer = Callable[[Session | None], Decision | Deferred[Decision]]


async def _share(deferred: Deferred[Any]) -> Any:
    """Await a Deferred that others await too (without consuming its result)."""
    waiter: Deferred[Any] = Deferred()

    def relay(result: Any) -> Any:
        waiter.callback(result)
        return result

    deferred.addBoth(relay)
    return await waiter


class Identity:
    """Per snapshot: sign-in state (sealers, cookies, the provider), and the request's
    session lookup and decider built on it. It is the decider's ``SignIn``."""

    def __init__(self, reactor: Any, snapshot: Snapshot, store: SessionStore,
                 signer: AssertionSigner, clock: Callable[[], float] = time.time,
                 directory: DirectoryGroups | None = None,
                 spent: SpentTokens | None = None) -> None:
        self.reactor = reactor
        self.spent = spent if spent is not None else SpentTokens()  # used hand-offs
        self.store = store
        self.directory = directory
        self.signer = signer
        self.clock = clock
        o = snapshot.options
        self.options = o
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
        self._refreshing: dict[str, Deferred[Session | None]] = {}
        self.sessions = SessionLookup(store, self.cookies, self.shared, o.cookie_name, clock)
        self.decider = Decider(snapshot, self.sessions, store, signer, self, clock,
                               directory)
        self.provider: Provider | None = None
        if o.idp_provider_url and o.idp_client_id:
            self.provider = Provider(
                reactor, o.idp_provider_url, o.idp_client_id, material.idp_client_secret,
                o.idp_scopes, dict(o.idp_request_params),
                self.auth_origin + o.authenticate_callback_path)

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

    # -- what the decider asks (``gateway.authorize.http_requests.SignIn``)

    def refresh_due(self, session: Session) -> float:
        if session.refresh_token and self.provider is not None:
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
        assert self.provider is not None
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
            tokens = await self.provider.refresh(session.refresh_token)
        except Exception as exc:  # refused, unreachable or timed out: all end the session
            log.warn("token refresh for {email} failed, session ended: {error}",
                     email=session.email, error=str(exc))
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
                 pid=os.getpid())  # (a field: which process refreshed, among workers)
        return updated

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str, extra: tuple[tuple[bytes, bytes], ...] = (), **more: Any) -> Reply:
        """An error page of the family with this snapshot's look."""
        return answers.error(status, message, headers, reason, extra, look=self.look, **more)

    def switch_action(self, request: RequestInfo, uri: str = "") -> Action | None:
        """"Sign in as someone else": a link to the authenticate host's sign-in that asks
        the provider for a fresh login (``prompt``), then returns to ``uri`` (default:
        the request's URL); the session the browser had ends once the new one exists."""
        if not self.auth_origin or self.provider is None:
            return None
        target = uri or f"{request.scheme}://{request.host}{request.path}" + \
            request.query.decode("latin-1")
        sealed = self.shared.seal("sign-in", {"uri": target, "switch": True},
                                  self.clock() + STATE_TTL)
        return Action("Sign in as someone else", f"{self.auth_origin}{SIGN_IN}", "get",
                      (("gateway_redirect", sealed),), primary=False)

    def sign_in_answer(self, request: RequestInfo) -> Reply:
        if not answers.wants_html(request.headers):
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        return self.sign_in(request)

    def sign_in(self, request: RequestInfo) -> Reply:
        """302 to the authenticate host's sign-in with ``request``'s URL sealed in it."""
        if not self.auth_origin:
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        target = f"{request.scheme}://{request.host}{request.path}" + \
            request.query.decode("latin-1")
        sealed = self.shared.seal("sign-in", {"uri": target}, self.clock() + STATE_TTL)
        query = urlencode({"gateway_redirect": sealed})
        return answers.redirect(f"{self.auth_origin}{SIGN_IN}?{query}")

    def new_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                    token_expiry: float) -> Session:
        """A new session, stored without waiting (see ``build_session``)."""
        session = self.build_session(claims, id_token, access, refresh, token_expiry)
        self.store.put(session)
        return session

    def build_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                      token_expiry: float) -> Session:
        """The session a sign-in creates; the sign-in stores it with ``put_confirmed``."""
        return session_from_claims(claims, secrets.token_urlsafe(24), self.clock(),
                                   self.options.cookie_expire, id_token=id_token,
                                   access_token=access, refresh_token=refresh,
                                   token_expires_at=token_expiry)

