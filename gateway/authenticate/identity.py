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
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate import pages
from gateway.authenticate.oidc import OIDCError, Provider, pkce_pair
from gateway.authorize.assertion import AssertionSigner, claim_headers
from gateway.authorize.claims import flatten_claims
from gateway.authorize.evaluate import evaluate
from gateway.config.snapshot import Snapshot
from gateway.dataplane.authz import Allow, Decision, Deny, RequestInfo
from gateway.sessions.cookie import (
    clear_cookie_headers,
    parse_cookies,
    read_cookie,
    set_cookie_headers,
)
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.store import DirectoryGroups, SessionStore

log = Logger()
SIGN_IN = "/.gateway/sign_in"
HANDOFF = "/.gateway/callback"
SIGN_OUT = "/.gateway/signout/"
JWKS = "/.well-known/gateway/jwks.json"
PROGRAMMATIC = "/.gateway/api/v1/login"
REFRESH_GRACE = 60.0
TOKEN_CACHE = 20_000
DECISION_CACHE = 20_000
DECISION_TTL = 30.0  # well inside the assertion's reuse window
STATE_TTL = 600.0
HANDOFF_TTL = 60.0
CSRF_COOKIE = "_gateway_csrf"


def _query(request: RequestInfo) -> dict[str, str]:
    parsed = parse_qs(request.query.decode("latin-1").lstrip("?"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def _form(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("latin-1")).items()}


def safe_target(uri: str, allowed_hosts: set[str]) -> bool:
    """No open redirects: http(s), no credentials, no backslashes or controls, and a host
    the gateway serves. ``//evil``, ``/\\evil``, ``https://app.example.evil``,
    ``https://app.example@evil`` and ``javascript:`` are all refused."""
    if not uri or "\\" in uri or any(ord(c) < 0x21 or ord(c) == 0x7F for c in uri):
        return False
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.username or parts.password:
        return False
    host = (parts.hostname or "").lower()
    netloc = parts.netloc.lower()
    if not host:
        return False  # "https:///evil.example" lands on evil.example in browsers
    return host in allowed_hosts or netloc in allowed_hosts


def _own_path(path: str) -> bool:
    """The gateway's reserved prefix, on a segment boundary (``/.gatewayish`` is not)."""
    return path == "/.gateway" or path.startswith("/.gateway/")


def programmatic_token(headers: list[tuple[bytes, bytes]]) -> str:
    """``Authorization: Gateway <token>`` or ``Authorization: Bearer Gateway-<token>``."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        text = value.decode("latin-1").strip()
        if text[:8].lower() == "gateway ":
            return text[8:].strip()
        if text[:7].lower() == "bearer " and text[7:15].lower() == "gateway-":
            return text[15:].strip()
    return ""


def allowed_programmatic_target(uri: str, domains: tuple[str, ...]) -> bool:
    """``programmatic_redirect_domain_whitelist``: the host must equal an entry; the
    entry ``localhost`` admits any loopback host. Port ignored."""
    try:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.username or parts.password or not host:
        return False
    if "\\" in uri or any(ord(c) < 0x21 for c in uri):
        return False
    if host in domains:
        return True
    if "localhost" in domains:
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return False


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
                 directory: DirectoryGroups | None = None) -> None:
        self.reactor = reactor
        self.store = store
        self.directory = directory
        self._with_groups: dict[str, tuple[Session, int, Session]] = {}
        self.signer = signer
        self.clock = clock
        o = snapshot.options
        self.options = o
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
        self.programmatic_domains = tuple(d.lower() for d in
                                          o.programmatic_redirect_domain_whitelist)
        self._refreshing: dict[str, Deferred[Session | None]] = {}
        self._tokens: dict[str, tuple[str, float]] = {}
        self._last_sid: str | None = None
        self._cookie_tokens: dict[bytes, str] = {}  # Cookie header -> our cookie's value
        self._decisions: dict[tuple[Any, ...], tuple[Session, float, Allow]] = {}
        self.provider: Provider | None = None
        if o.idp_provider_url and o.idp_client_id:
            self.provider = Provider(
                reactor, o.idp_provider_url, o.idp_client_id, material.idp_client_secret,
                o.idp_scopes, dict(o.idp_request_params),
                self.auth_origin + o.authenticate_callback_path)

    # -- cookies and sessions

    def _cookie(self, session: Session) -> tuple[tuple[bytes, bytes], ...]:
        o = self.options
        value = self.cookies.seal("session", {"sid": session.id}, session.expires_at)
        max_age = max(int(session.expires_at - self.clock()), 0)
        return tuple((b"set-cookie", v) for v in set_cookie_headers(
            o.cookie_name, value, max_age=max_age, domain=o.cookie_domain,
            secure=o.cookie_secure, http_only=o.cookie_http_only))

    def session_for(self, request: RequestInfo) -> Session | None:
        """The request's session: cookie on this host, or ``Authorization: Gateway``.

        Opened tokens are cached by their exact text (a cookie is sent unchanged on every
        request); the session record is still looked up each time, so a deleted or
        expired session ends at once."""
        now = self.clock()
        raw = b"; ".join(v for n, v in request.headers if n.lower() == b"cookie")
        token = self._cookie_tokens.get(raw) if raw else None
        if token is None and raw:
            token = read_cookie(parse_cookies(request.headers), self.options.cookie_name) or ""
            if len(self._cookie_tokens) >= TOKEN_CACHE:
                self._cookie_tokens.pop(next(iter(self._cookie_tokens)))
            self._cookie_tokens[raw] = token
        sid = self._open_cached("session", self.cookies, token, now) if token else None
        if sid is None:
            token = programmatic_token(request.headers)
            if token:
                sid = self._open_cached("programmatic", self.shared, token, now)
        self._last_sid = sid
        if sid is None:
            return None
        session = self.store.get(sid)
        if session is None or not session.valid(now):
            return None
        return session

    def _open_cached(self, purpose: str, sealer: Sealer, token: str, now: float
                     ) -> str | None:
        cached = self._tokens.get(token)
        if cached is not None:
            sid, expires = cached
            return sid if now < expires else None
        payload = sealer.open(purpose, token, now)
        if payload is None:
            return None
        sid = str(payload.get("sid", ""))
        if len(self._tokens) >= TOKEN_CACHE:
            self._tokens.pop(next(iter(self._tokens)))
        self._tokens[token] = (sid, float(payload["exp"]))
        return sid

    def _csrf_token(self, session: Session) -> str:
        return hmac.new(self.csrf_key, session.id.encode(), hashlib.sha256).hexdigest()

    # -- the authorization hook

    def authorize(self, request: RequestInfo, route: Any) -> Decision | Deferred[Decision]:
        session = self.session_for(request)
        sid = self._last_sid
        if session is None and sid and self.store.needs_fetch:
            # A session another process created, or this one has not read yet.
            return ensureDeferred(self._fetch_then_decide(request, route, sid,
                                                          self.store.fetch))
        if session is not None and self._needs_refresh(session):
            return ensureDeferred(self._refresh_then_decide(request, route, session))
        return self._decide(request, route, session)

    async def _fetch_then_decide(self, request: RequestInfo, route: Any, sid: str,
                                 fetch: Callable[[str], Deferred[Session | None]]) -> Decision:
        try:
            session = await fetch(sid)
        except Exception as exc:  # storage down or unreadable: never a false "allowed"
            log.error("session storage unavailable: {error}", error=str(exc))
            return pages.error(503, "Sessions cannot be read right now; try again shortly.",
                               request.headers, "session-storage-unavailable")
        if session is not None and not session.valid(self.clock()):
            session = None
        if session is not None and self._needs_refresh(session):
            return await self._refresh_then_decide(request, route, session)
        return self._decide(request, route, session)

    def _needs_refresh(self, session: Session) -> bool:
        return bool(session.refresh_token and self.provider is not None
                    and session.token_expires_at - REFRESH_GRACE <= self.clock())

    async def _refresh_then_decide(self, request: RequestInfo, route: Any,
                                   session: Session) -> Decision:
        refreshed = await self.refresh(session)
        return self._decide(request, route, refreshed)

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
        groups = tuple(str(g) for g in claims.get("groups") or () if isinstance(g, str | int))
        updated = replace(
            session, access_token=tokens.access_token, refresh_token=tokens.refresh_token,
            id_token=tokens.id_token or session.id_token,
            token_expires_at=self.clock() + tokens.expires_in,
            claims=flatten_claims(claims) if claims else session.claims,
            groups=groups if claims else session.groups)
        self.store.put(updated)
        log.info("refreshed the tokens of {email}", email=session.email)
        return updated

    def _directory_session(self, session: Session) -> Session:
        """The session with its directory groups (``idp_service_account`` describes a
        directory): one object per session record and directory version, so decision
        caches keyed on the object see a change of either."""
        assert self.directory is not None
        version = self.directory.version
        hit = self._with_groups.get(session.id)
        if hit is not None and hit[0] is session and hit[1] == version:
            return hit[2]
        derived = replace(session, groups=self.directory.groups_for(session.user_id,
                                                                    session.email))
        if len(self._with_groups) >= DECISION_CACHE:
            self._with_groups.pop(next(iter(self._with_groups)))
        self._with_groups[session.id] = (session, version, derived)
        return derived

    def _decide(self, request: RequestInfo, route: Any, session: Session | None) -> Decision:
        now = self.clock()
        if session is not None and self.directory is not None:
            session = self._directory_session(session)
        key: tuple[Any, ...] | None = None
        if session is not None and request.method != b"OPTIONS":
            # Decision and identity headers per (session record, route) for a short
            # while: the record object changes when the session is refreshed or ended.
            key = (session.id, route.route.index, bool(programmatic_token(request.headers)))
            hit = self._decisions.get(key)
            if hit is not None and hit[0] is session and now < hit[1]:
                return hit[2]
        decision = evaluate(route.route, request.method, request.headers, session,
                            now, self.groups_available)
        if decision.allowed:
            allow = self._allow(route.route, session, request)
            if key is not None and session is not None:
                if len(self._decisions) >= DECISION_CACHE:
                    self._decisions.pop(next(iter(self._decisions)))
                self._decisions[key] = (session, now + DECISION_TTL, allow)
            return allow
        if decision.status == 401:
            return self._sign_in(request)
        reasons = ", ".join(decision.reasons)
        log.info("access denied to {host}{path} for {user}: {reasons}", host=request.host,
                 path=request.path, user=session.email if session else "-", reasons=reasons)
        message = "You are signed in, but this route does not allow you in."
        if "groups-need-service-account" in decision.reasons:
            message += (" Group rules need idp_service_account, which is not configured.")
        return pages.error(403, message, request.headers, f"denied: {reasons}")

    def _allow(self, route: Any, session: Session | None, request: RequestInfo) -> Allow:
        headers: list[tuple[bytes, bytes]] = []
        if route.pass_identity_headers and session is not None:
            audience = route.host
            headers.append((b"x-gateway-jwt-assertion",
                            self.signer.sign(session, audience).encode()))
            headers.extend(claim_headers(self.options.jwt_claims_headers, session))
        own_token = bool(programmatic_token(request.headers))
        return Allow(tuple(headers), frozenset({b"authorization"}) if own_token
                     else frozenset(), strip_cookie=self.options.cookie_name)

    def _sign_in(self, request: RequestInfo) -> Deny:
        if not pages.wants_html(request.headers) or not self.auth_origin:
            return pages.error(401, "Sign in to reach this route.", request.headers,
                               "user-unauthenticated")
        target = f"{request.scheme}://{request.host}{request.path}" + \
            request.query.decode("latin-1")
        sealed = self.shared.seal("sign-in", {"uri": target}, self.clock() + STATE_TTL)
        query = urlencode({"gateway_redirect": sealed})
        return pages.redirect(f"{self.auth_origin}{SIGN_IN}?{query}")

    # -- the gateway's own endpoints

    def handles(self, host: str, path: str) -> bool:
        return (bool(self.auth_host) and host in (self.auth_host, self.auth_hostname)) or \
            _own_path(path)

    def internal(self, request: RequestInfo, body: bytes = b""
                 ) -> Decision | Deferred[Decision] | None:
        """Answer the gateway's own endpoints; None lets the request go on to routing."""
        on_auth = request.host in (self.auth_host, self.auth_hostname)
        path = request.path
        if on_auth and path == JWKS:
            import json

            return Deny(200, json.dumps(self.signer.jwks()).encode(),
                        ((b"content-type", b"application/json"),), reason="jwks")
        if on_auth and path == SIGN_IN:
            return self._start(request)
        if on_auth and path == self.options.authenticate_callback_path:
            return ensureDeferred(self._callback(request))
        if path == HANDOFF:
            return self._handoff(request)
        if path == PROGRAMMATIC and not on_auth:
            return self._programmatic(request)
        if path in (SIGN_OUT, SIGN_OUT.rstrip("/")):
            return self._sign_out(request, body)
        if _own_path(path):
            return pages.error(404, "Not found.", request.headers, "not-found")
        return None

    def _start(self, request: RequestInfo) -> Decision | Deferred[Decision]:
        now = self.clock()
        payload = self.shared.open("sign-in", _query(request).get("gateway_redirect", ""), now)
        if payload is None or not safe_target(str(payload.get("uri", "")), self.allowed_hosts):
            return pages.error(400, "This sign-in link is invalid or has expired.",
                               request.headers, "bad-sign-in-link")
        uri = str(payload["uri"])
        client = str(payload.get("programmatic", ""))
        existing = self.session_for(request)
        if existing is not None:
            return self._to_client(existing, client) if client else self._to_route(existing, uri)
        if self.provider is None:
            return pages.error(503, "No identity provider is configured.", request.headers,
                               "no-provider")
        csrf = secrets.token_urlsafe(24)
        verifier, challenge = pkce_pair()
        nonce = secrets.token_urlsafe(24)
        state = self.shared.seal("state", {
            "uri": uri, "nonce": nonce, "verifier": verifier,
            "programmatic": str(payload.get("programmatic", "")),
            "csrf": hashlib.sha256(csrf.encode()).hexdigest()}, now + STATE_TTL)
        cookie = set_cookie_headers(CSRF_COOKIE, csrf, max_age=int(STATE_TTL), domain="",
                                    secure=self.options.cookie_secure, http_only=True)
        extra = tuple((b"set-cookie", c) for c in cookie)

        async def go() -> Decision:
            assert self.provider is not None
            try:
                url = await self.provider.start_url(state, nonce, challenge)
            except Exception as exc:  # the provider is down or misconfigured
                return self._provider_down(exc, request)
            return pages.redirect(url, extra)

        return ensureDeferred(go())

    def _provider_down(self, exc: Exception, request: RequestInfo) -> Deny:
        log.error("identity provider unavailable: {error}", error=str(exc))
        return pages.error(503, "The identity provider cannot be reached; try again later.",
                           request.headers, "provider-unavailable")

    async def _callback(self, request: RequestInfo) -> Decision:
        params = _query(request)
        now = self.clock()
        if params.get("error"):
            status = 401 if params["error"] == "access_denied" else 400
            return pages.error(status, "The identity provider did not sign you in.",
                               request.headers, f"provider-error: {params['error'][:64]}")
        state = self.shared.open("state", params.get("state", ""), now)
        csrf = parse_cookies(request.headers).get(CSRF_COOKIE, "")
        if state is None or not hmac.compare_digest(
                str(state.get("csrf", "")), hashlib.sha256(csrf.encode()).hexdigest()):
            return pages.error(400, "This sign-in attempt is invalid or has expired; start "
                               "again.", request.headers, "bad-state")
        if not params.get("code") or self.provider is None:
            return pages.error(400, "The identity provider sent no code.", request.headers,
                               "no-code")
        try:
            tokens = await self.provider.exchange(params["code"], str(state["verifier"]),
                                                  str(state["nonce"]))
        except OIDCError as exc:
            log.error("sign-in failed: {error}", error=str(exc))
            return pages.error(502, "The sign-in could not be completed.", request.headers,
                               "exchange-failed")
        session = self.new_session(tokens.claims, tokens.id_token, tokens.access_token,
                                   tokens.refresh_token, now + tokens.expires_in)
        log.info("signed in {email} ({user})", email=session.email, user=session.user_id)
        clear_csrf = tuple((b"set-cookie", c) for c in clear_cookie_headers(
            CSRF_COOKIE, "", self.options.cookie_secure)[:1])
        if state.get("programmatic"):
            return self._to_client(session, str(state["programmatic"]),
                                   self._cookie(session) + clear_csrf)
        return self._to_route(session, str(state["uri"]), self._cookie(session) + clear_csrf)

    def _programmatic(self, request: RequestInfo) -> Decision:
        """Sign-in for non-browser clients: answers the URL to open; after sign-in the
        browser is sent to the client's local ``gateway_redirect_uri`` with
        ``gateway_jwt``, which the client then sends as ``Authorization: Gateway``."""
        if request.method != b"GET":
            return pages.error(405, "Use GET.", request.headers, "method-not-allowed")
        target = _query(request).get("gateway_redirect_uri")
        if target is None:
            return pages.error(404, "Not found.", request.headers, "not-found")
        if not allowed_programmatic_target(target, self.programmatic_domains):
            return pages.error(400, "invalid redirect uri", request.headers,
                               "bad-programmatic-redirect")
        if not self.auth_origin:
            return pages.error(503, "No authenticate service is configured.",
                               request.headers, "no-authenticate-url")
        route_url = f"{request.scheme}://{request.host}/"
        sealed = self.shared.seal("sign-in", {"uri": route_url, "programmatic": target},
                                  self.clock() + STATE_TTL)
        url = f"{self.auth_origin}{SIGN_IN}?" + urlencode({"gateway_redirect": sealed})
        return Deny(200, url.encode(), ((b"content-type", b"text/plain; charset=utf-8"),),
                    reason="programmatic-login")

    def _to_client(self, session: Session, target: str,
                   extra: tuple[tuple[bytes, bytes], ...] = ()) -> Deny:
        token = self.shared.seal("programmatic", {"sid": session.id}, session.expires_at)
        sep = "&" if "?" in target else "?"
        return pages.redirect(f"{target}{sep}{urlencode({'gateway_jwt': token})}", extra)

    def new_session(self, claims: dict[str, Any], id_token: str, access: str, refresh: str,
                    token_expiry: float) -> Session:
        now = self.clock()
        flat = flatten_claims(claims)
        groups = tuple(str(g) for g in claims.get("groups") or () if isinstance(g, str | int))
        session = Session(
            id=secrets.token_urlsafe(24), user_id=str(claims.get("sub", "")),
            email=str(claims.get("email", "")), name=str(claims.get("name", "")),
            issued_at=now, expires_at=now + self.options.cookie_expire, claims=flat,
            groups=groups, id_token=id_token, access_token=access, refresh_token=refresh,
            token_expires_at=token_expiry)
        self.store.put(session)
        return session

    def _to_route(self, session: Session, uri: str,
                  extra: tuple[tuple[bytes, bytes], ...] = ()) -> Deny:
        parts = urlsplit(uri)
        sealed = self.shared.seal("handoff", {"sid": session.id, "uri": uri},
                                  self.clock() + HANDOFF_TTL)
        location = f"{parts.scheme}://{parts.netloc}{HANDOFF}?" + \
            urlencode({"gateway_session": sealed})
        return pages.redirect(location, extra)

    def _handoff(self, request: RequestInfo) -> Decision:
        payload = self.shared.open("handoff", _query(request).get("gateway_session", ""),
                                   self.clock())
        uri = str(payload.get("uri", "")) if payload else ""
        if payload is None or urlsplit(uri).netloc.lower() != request.host:
            return pages.error(400, "This sign-in link is invalid or has expired.",
                               request.headers, "bad-handoff")
        session = self.store.get(str(payload.get("sid", "")))
        if session is None or not session.valid(self.clock()):
            return pages.error(401, "Your session has ended; sign in again.", request.headers,
                               "session-gone")
        return pages.redirect(uri, self._cookie(session))

    def _sign_out(self, request: RequestInfo, body: bytes) -> Decision:
        session = self.session_for(request)
        given = _query(request) | (_form(body) if request.method == b"POST" else {})
        token = given.get("csrf", "")
        if session is None or not hmac.compare_digest(
                token.encode("utf-8", "replace"), self._csrf_token(session).encode()):
            if session is not None and request.method == b"GET" and not token:
                target = html.escape(given.get("gateway_redirect_uri", ""), quote=True)
                keep = (f'<input type="hidden" name="gateway_redirect_uri" value="{target}">'
                        if target else "")
                form = (f'<form method="post" action="{SIGN_OUT}">'
                        f'<input type="hidden" name="csrf" value="{self._csrf_token(session)}">'
                        f"{keep}<button>Sign out</button></form>")
                return pages.page("Sign out?", form)
            return pages.error(400, "CSRF token invalid.", request.headers, "csrf-invalid")
        self.store.delete(session.id)
        log.info("signed out {email}", email=session.email)
        clear = tuple((b"set-cookie", c) for c in clear_cookie_headers(
            self.options.cookie_name, self.options.cookie_domain, self.options.cookie_secure))
        target = given.get("gateway_redirect_uri", "")
        if not (target and safe_target(target, self.allowed_hosts)):
            target = self.options.signout_redirect_url
        if self.provider is not None and session.id_token:
            end = self.provider.end_session_url(session.id_token, target)
            if end:
                return pages.redirect(end, clear)
        if target:
            return pages.redirect(target, clear)
        return pages.page("Signed out", "<p>You are signed out.</p>", clear)
