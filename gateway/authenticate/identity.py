"""Sign-in, sessions and authorization on top of the data plane's hook.

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

This module holds sessions and the per-request decision (step 1's redirect included);
the endpoints of steps 2-4, programmatic login and sign-out are in ``endpoints``, the pure
target checks in ``targets``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate import pages
from gateway.authenticate.oidc import Provider
from gateway.authenticate.targets import SIGN_IN, STATE_TTL
from gateway.authorize.assertion import AssertionSigner, claim_headers
from gateway.authorize.claims import claim_groups, flatten_claims
from gateway.authorize.email import REFUSAL_TEXT, decision_view
from gateway.authorize.evaluate import evaluate
from gateway.authorize.hook import Allow, Decision, Deny, RequestInfo
from gateway.config.snapshot import Snapshot
from gateway.observability.request_metrics import route_label
from gateway.observability.tracing.active import start_child
from gateway.pages.layout import Action, look_of
from gateway.pages.rules import admits
from gateway.sessions.bearer import programmatic_token
from gateway.sessions.cookie import (
    parse_cookies,
    read_cookie,
    set_cookie_headers,
)
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.spent import SpentTokens
from gateway.sessions.store import DirectoryGroups, SessionStore

log = Logger()
REFRESH_GRACE = 60.0
TOKEN_CACHE = 20_000
DECISION_CACHE = 20_000
DECISION_TTL = 30.0  # well inside the assertion's reuse window
# The caches keyed by a whole Cookie header keep only headers whose session cookie
# opened, up to 4 KiB, and at most 4,096 of them (16 MiB at worst, for a client with a
# valid cookie varying its other cookies): a header can be 64 KiB, and junk is free.
CACHED_COOKIE_MAX = 4096
COOKIE_CACHE = 4096


def cookie_and_authorization(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The request's Cookie header (several joined as one), and whether it has an
    Authorization header; one pass over the headers for both."""
    cookies: list[bytes] = []
    authorization = False
    for name, value in headers:
        size = len(name)  # (cheaper than lower-casing every name)
        if size == 6:
            if name.lower() == b"cookie":
                cookies.append(value)
        elif size == 13 and name.lower() == b"authorization":
            authorization = True
    return (cookies[0] if len(cookies) == 1 else b"; ".join(cookies)), authorization


async def _share(deferred: Deferred[Any]) -> Any:
    """Await a Deferred that others await too (without consuming its result)."""
    waiter: Deferred[Any] = Deferred()

    def relay(result: Any) -> Any:
        waiter.callback(result)
        return result

    deferred.addBoth(relay)
    return await waiter


class Identity:
    """Per snapshot: answers the gateway's own endpoints and decides every request to a
    route that is not public (the data plane's ``Authorizer``)."""

    def __init__(self, reactor: Any, snapshot: Snapshot, store: SessionStore,
                 signer: AssertionSigner, clock: Callable[[], float] = time.time,
                 directory: DirectoryGroups | None = None,
                 spent: SpentTokens | None = None) -> None:
        self.reactor = reactor
        self.spent = spent if spent is not None else SpentTokens()  # used hand-offs
        self.store = store
        self.directory = directory
        # session id -> (the session record, directory version, the record as decisions
        # see it, why its e-mail was refused): ``decision_session``
        self._views: dict[str, tuple[Session, int, Session, str]] = {}
        self._refusals_logged: set[str] = set()
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
        self.groups_available = bool(o.idp_service_account)
        self.allow_unverified_email = o.idp_allow_unverified_email
        self.programmatic_domains = tuple(d.lower() for d in
                                          o.programmatic_redirect_domain_whitelist)
        self._refreshing: dict[str, Deferred[Session | None]] = {}
        # (purpose, token) -> (sid, expiry): a token opens only for the purpose it was
        # sealed for, cached or not (keyed by the token alone, a session cookie once
        # seen was accepted as an ``Authorization: Gateway`` token, and the reverse)
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self._cookie_tokens: dict[bytes, str] = {}  # Cookie header -> our cookie's value
        self._decisions: dict[tuple[Any, ...], tuple[Session, float, Allow]] = {}
        # (Cookie header, route index) -> (session id, the session record, valid until,
        # the decision, directory version): a browser's next request to a route it was
        # allowed on, answered without opening its cookie or deciding again
        self._allowed: dict[tuple[bytes, int], tuple[str, Session, float, Allow, int]] = {}
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
        return self._lookup(request, *cookie_and_authorization(request.headers))[0]

    def lookup(self, request: RequestInfo) -> tuple[Session | None, str | None, str]:
        """``_lookup`` for the account pages (``account``)."""
        return self._lookup(request, *cookie_and_authorization(request.headers))

    def _lookup(self, request: RequestInfo, raw: bytes, authorization: bool
                ) -> tuple[Session | None, str | None, str]:
        """(session, the session id the request names, its programmatic token);
        ``raw`` and ``authorization`` are ``cookie_and_authorization`` of its headers.

        Opened tokens are cached by their exact text (a cookie is sent unchanged on every
        request); the session record is still looked up each time, so a deleted or
        expired session ends at once."""
        now = self.clock()
        token = self._cookie_tokens.get(raw) if raw else None
        read = token is None and bool(raw)
        if read:
            token = read_cookie(parse_cookies(request.headers), self.options.cookie_name) or ""
        sid = self._open_cached("session", self.cookies, token, now) if token else None
        if read and sid is not None and token and len(raw) <= CACHED_COOKIE_MAX:
            if len(self._cookie_tokens) >= COOKIE_CACHE:
                self._cookie_tokens.pop(next(iter(self._cookie_tokens)))
            self._cookie_tokens[raw] = token
        own_token = programmatic_token(request.headers) if authorization else ""
        if sid is None and own_token:
            sid = self._open_cached("programmatic", self.shared, own_token, now)
        if sid is None:
            return None, None, own_token
        session = self.store.get(sid)
        if session is None or not session.valid(now):
            return None, sid, own_token
        return session, sid, own_token

    def _open_cached(self, purpose: str, sealer: Sealer, token: str, now: float
                     ) -> str | None:
        cached = self._tokens.get((purpose, token))
        if cached is not None:
            sid, expires = cached
            return sid if now < expires else None
        payload = sealer.open(purpose, token, now)
        if payload is None:
            return None
        sid = str(payload.get("sid", ""))
        if len(self._tokens) >= TOKEN_CACHE:
            self._tokens.pop(next(iter(self._tokens)))
        self._tokens[(purpose, token)] = (sid, float(payload["exp"]))
        return sid

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self.csrf_key, session.id.encode(), hashlib.sha256).hexdigest()

    # -- the authorization hook

    def authorize(self, request: RequestInfo, route: Any) -> Decision | Deferred[Decision]:
        span = start_child("session lookup", client=False)  # None unless traced
        raw, authorization = cookie_and_authorization(request.headers)
        if span is None and raw and not authorization:
            allowed = self._allowed_again(request, route, raw)
            if allowed is not None:
                return allowed
        session, sid, token = self._lookup(request, raw, authorization)
        if span is not None:
            span.set("gateway.session.found", session is not None)
            span.set("gateway.session.fetch", session is None and bool(sid)
                     and self.store.needs_fetch)
            span.end()
        own_token = bool(token)
        if session is None and sid and self.store.needs_fetch:
            # A session another process created, or this one has not read yet.
            return ensureDeferred(self._fetch_then_decide(request, route, sid, own_token,
                                                          self.store.fetch))
        if session is not None and self._needs_refresh(session):
            return ensureDeferred(self._refresh_then_decide(request, route, session,
                                                            own_token))
        decision = self._decide(request, route, session, own_token)
        if session is not None and sid and not own_token and isinstance(decision, Allow):
            self._remember_allowed(request, route, raw, sid, session, decision)
        return decision

    def _allowed_again(self, request: RequestInfo, route: Any, raw: bytes) -> Allow | None:
        """The decision remembered for this exact Cookie header ``raw`` on this route,
        while nothing it rests on has changed: the session record is the same object (not
        ended, refreshed or replaced), and neither the cookie, the session, the tokens
        (refresh) nor the decision cache has expired. (Requests with an Authorization
        header take the full path: it may be a programmatic token.)"""
        if request.method == b"OPTIONS":
            return None
        hit = self._allowed.get((raw, route.route.index))
        if hit is None:
            return None
        sid, session, until, allow, version = hit
        if self.clock() < until and self.store.get(sid) is session and (
                self.directory is None or self.directory.version == version):
            return allow
        return None

    def _remember_allowed(self, request: RequestInfo, route: Any, raw: bytes, sid: str,
                          session: Session, allow: Allow) -> None:
        """Keep ``allow`` for ``_allowed_again``, valid as long as each thing that made
        the full path answer it is: the cookie's seal, the session, the tokens before
        their refresh, the decision cache's entry."""
        if request.method == b"OPTIONS":
            return
        # (a header too long to cache has no remembered token: nothing is kept for it)
        token = self._cookie_tokens.get(raw)
        sealed = self._tokens.get(("session", token)) if token else None
        decided = self._decisions.get((session.id, route.route.index, False))
        if sealed is None or sealed[0] != sid or decided is None or decided[2] is not allow:
            return
        until = min(sealed[1], decided[1], session.expires_at)
        if session.refresh_token and self.provider is not None:
            until = min(until, session.token_expires_at - REFRESH_GRACE)
        if len(self._allowed) >= COOKIE_CACHE:
            self._allowed.pop(next(iter(self._allowed)))
        version = self.directory.version if self.directory is not None else 0
        self._allowed[(raw, route.route.index)] = (sid, session, until, allow, version)

    async def _fetch_then_decide(self, request: RequestInfo, route: Any, sid: str,
                                 own_token: bool,
                                 fetch: Callable[[str], Deferred[Session | None]]) -> Decision:
        try:
            session = await fetch(sid)
        except Exception as exc:  # storage down or unreadable: never a false "allowed"
            log.error("session storage unavailable: {error}", error=str(exc))
            return self.error(503, "Sessions cannot be read right now; try again shortly.",
                              request.headers, "session-storage-unavailable")
        if session is not None and not session.valid(self.clock()):
            session = None
        if session is not None and self._needs_refresh(session):
            return await self._refresh_then_decide(request, route, session, own_token)
        return self._decide(request, route, session, own_token)

    def _needs_refresh(self, session: Session) -> bool:
        return bool(session.refresh_token and self.provider is not None
                    and session.token_expires_at - REFRESH_GRACE <= self.clock())

    async def _refresh_then_decide(self, request: RequestInfo, route: Any,
                                   session: Session, own_token: bool) -> Decision:
        refreshed = await self.refresh(session)
        return self._decide(request, route, refreshed, own_token)

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
        log.info("refreshed the tokens of {email}", email=session.email)
        return updated

    def decision_session(self, session: Session) -> tuple[Session, str]:
        """The session as every decision and what it hands on see it, and why its e-mail
        was refused (``""``: it was not): without an e-mail the provider did not vouch
        for (``gateway.authorize.email``), and with its directory groups when
        ``idp_service_account`` describes a directory (matched by that e-mail too).

        One object per session record and directory version, so decision caches keyed
        on the object see a change of either; the same object as the record when there
        is nothing to change."""
        version = self.directory.version if self.directory is not None else 0
        hit = self._views.get(session.id)
        if hit is not None and hit[0] is session and hit[1] == version:
            return hit[2], hit[3]
        view, refusal = decision_view(session, self.allow_unverified_email)
        if refusal and session.id not in self._refusals_logged:
            if len(self._refusals_logged) >= DECISION_CACHE:
                self._refusals_logged.clear()
            self._refusals_logged.add(session.id)
            log.warn("the e-mail {claimed!r} of user {user_id} is not used for access "
                     "decisions: {why} ({reason}); rules that need an e-mail address do "
                     "not match", claimed=session.email, user_id=session.user_id,
                     why=REFUSAL_TEXT[refusal], reason=refusal)
        if self.directory is not None:
            view = replace(view, groups=self.directory.groups_for(view.user_id, view.email))
        elif not refusal:
            return session, ""
        if len(self._views) >= DECISION_CACHE:
            self._views.pop(next(iter(self._views)))
        self._views[session.id] = (session, version, view, refusal)
        return view, refusal

    def _decide(self, request: RequestInfo, route: Any, session: Session | None,
                own_token: bool) -> Decision:
        """``own_token``: the request carries a programmatic token (``Authorization:
        Gateway``), which the upstream must not see."""
        now = self.clock()
        refusal = claimed = ""
        if session is not None:
            claimed = session.email
            session, refusal = self.decision_session(session)
        key: tuple[Any, ...] | None = None
        if session is not None and request.method != b"OPTIONS":
            # Decision and identity headers per (session record, route) for a short
            # while: the record object changes when the session is refreshed or ended.
            key = (session.id, route.route.index, own_token)
            hit = self._decisions.get(key)
            if hit is not None and hit[0] is session and now < hit[1]:
                return hit[2]
        decision = evaluate(route.route, request.method, request.headers, session,
                            now, self.groups_available, refusal)
        if decision.allowed:
            allow = self._allow(route.route, session, own_token, decision.reason)
            if key is not None and session is not None:
                if len(self._decisions) >= DECISION_CACHE:
                    self._decisions.pop(next(iter(self._decisions)))
                self._decisions[key] = (session, now + DECISION_TTL, allow)
            return allow
        if decision.status == 401:
            return self._sign_in(request)
        reasons = ", ".join(decision.reasons)
        log.info("access denied to {host}{path} for {user}: {reasons}", host=request.host,
                 path=request.path, user=(session.email or session.user_id) if session else "-",
                 reasons=reasons,
                 user_id=session.user_id if session else None,
                 route=route_label(route.route), client=request.client_ip)
        who = (session.email or session.user_id) if session else ""
        message = (f"You are signed in as {who}, but this route does not allow you in."
                   if who else "You are signed in, but this route does not allow you in.")
        if refusal and refusal in decision.reasons:
            # A sentence of its own, without the name shown beside it (the error page
            # leaves out a sentence that repeats who is signed in).
            address = f" ({claimed})" if claimed != who else ""
            message = (f"This route needs your e-mail address, and {REFUSAL_TEXT[refusal]}"
                       f"{address}.")
        if "groups-need-service-account" in decision.reasons:
            message += (" Group rules need idp_service_account, which is not configured.")
        actions = tuple(a for a in (self.switch_action(request),
                                    Action("Who am I?", "/.gateway/", "get", primary=False))
                        if a is not None)
        denied = self.error(403, message, request.headers, f"denied: {reasons}", who=who,
                            admits=admits(route.route, self.groups_available),
                            actions=actions, host=request.host)
        if session is None:
            return denied
        return replace(denied, user_id=session.user_id, email=session.email)

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str, extra: tuple[tuple[bytes, bytes], ...] = (), **more: Any) -> Deny:
        """An error page of the family with this snapshot's look."""
        return pages.error(status, message, headers, reason, extra, look=self.look, **more)

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

    def _allow(self, route: Any, session: Session | None, own_token: bool,
               reason: str = "") -> Allow:
        headers: list[tuple[bytes, bytes]] = []
        if route.pass_identity_headers and session is not None:
            audience = route.host
            headers.append((b"x-gateway-jwt-assertion",
                            self.signer.sign(session, audience).encode()))
            headers.extend(claim_headers(self.options.jwt_claims_headers, session))
        return Allow(tuple(headers), frozenset({b"authorization"}) if own_token
                     else frozenset(), strip_cookie=self.options.cookie_name, reason=reason,
                     user_id=session.user_id if session else "",
                     email=session.email if session else "")

    def _sign_in(self, request: RequestInfo) -> Deny:
        if not pages.wants_html(request.headers):
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        return self.sign_in(request)

    def sign_in(self, request: RequestInfo) -> Deny:
        """302 to the authenticate host's sign-in with ``request``'s URL sealed in it."""
        if not self.auth_origin:
            return self.error(401, "Sign in to reach this route.", request.headers,
                              "user-unauthenticated")
        target = f"{request.scheme}://{request.host}{request.path}" + \
            request.query.decode("latin-1")
        sealed = self.shared.seal("sign-in", {"uri": target}, self.clock() + STATE_TTL)
        query = urlencode({"gateway_redirect": sealed})
        return pages.redirect(f"{self.auth_origin}{SIGN_IN}?{query}")

    def new_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                    token_expiry: float) -> Session:
        """A new session, stored without waiting (see ``build_session``)."""
        session = self.build_session(claims, id_token, access, refresh, token_expiry)
        self.store.put(session)
        return session

    def build_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                      token_expiry: float) -> Session:
        """The session a sign-in creates; the sign-in stores it with ``put_confirmed``."""
        now = self.clock()
        flat = flatten_claims(claims)
        groups = claim_groups(claims)
        session = Session(
            id=secrets.token_urlsafe(24), user_id=str(claims.get("sub", "")),
            email=str(claims.get("email", "")), name=str(claims.get("name", "")),
            issued_at=now, expires_at=now + self.options.cookie_expire, claims=flat,
            groups=groups, id_token=id_token, access_token=access, refresh_token=refresh,
            token_expires_at=token_expiry)
        return session

