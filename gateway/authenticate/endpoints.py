"""The gateway's own endpoints: sign-in start, the provider's callback, the hand-off to
route hosts, programmatic login, sign-out, the account pages (who am I, the routes
portal) and the JWKS document (the browser flow is described in ``identity``). State
shared with authorization (sealers, the session store, the provider, options) is the
``Identity``'s; the routes portal lists the snapshot's ``routes``."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate.account import (
    PORTAL,
    WHO_AM_I,
    bearer_profile,
    routes_portal,
    sign_out_confirmation,
    signed_out_page,
    who_am_i,
)
from gateway.authenticate.backchannel import BackchannelLogout
from gateway.authenticate.mcp_connect import CALLBACK_PATH, McpConnect
from gateway.authenticate.oidc import OIDCError, ProviderUnavailable, pkce_pair
from gateway.authenticate.same_origin import SameOrigin
from gateway.authenticate.ssh_sign_in import SSH_SIGN_IN, SshSignIn
from gateway.authenticate.targets import (
    BACKCHANNEL_LOGOUT,
    CHOSEN_PARAM,
    CSRF_COOKIE,
    HANDOFF,
    HANDOFF_TTL,
    JWKS,
    PROGRAMMATIC,
    PROVIDER_COOKIE,
    PROVIDER_COOKIE_AGE,
    SIGN_IN,
    SIGN_OUT,
    STATE_TTL,
    allowed_programmatic_target,
    form_params,
    query_params,
    safe_target,
)
from gateway.authorize import answers
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.config.providers import IMPLICIT_ID
from gateway.config.routes import Route
from gateway.databroker.records import RecordStore
from gateway.databroker.session_index import IndexFull
from gateway.dataplane.routing.router import own_path
from gateway.pages.chooser import choose_provider
from gateway.pages.layout import Action
from gateway.sessions.cookie import clear_cookie_headers, parse_cookies, set_cookie_headers
from gateway.sessions.model import Session
from gateway.wire.cross_origin import SAFE_METHODS

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity
    from gateway.databroker.session_ends import SessionEnds
    from gateway.mcp_oauth.server import McpAuthorizationServer
    from gateway.mcp_oauth.upstream import UpstreamVault

log = Logger()

DISCOVERY_RETRY = 60.0  # seconds a failed discovery read is not tried again by pages


def endpoint_name(path: str) -> str:
    """How a log line names the endpoint of ``path`` (an SSH sign-in's ticket is left
    out: whoever holds it may ask a signed-in person to allow a connection)."""
    if path.startswith(SSH_SIGN_IN):
        return SSH_SIGN_IN + "TICKET"
    return path[:200]


def followed_from_here(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the browser says this navigation came from a page of this origin
    (``Sec-Fetch-Site: same-origin``, every value): a link on the chooser page, not one
    another site, a mail or a route host's ``/.gateway/sign_in`` sent. No header (an old
    browser): not known, so no."""
    sites = [v.strip().lower() for n, v in headers if n.lower() == b"sec-fetch-site"]
    return bool(sites) and all(v == b"same-origin" for v in sites)


class Choice(NamedTuple):
    """A sign-in's choice of provider: its sealed link (the chooser's links carry it
    again), the providers it offers, the one asked for with ``?provider=``."""

    sealed: str
    offered: tuple[str, ...]
    asked: str
    # picked on the chooser page itself (its own link, followed from that page): the
    # only choice remembered, so a link someone else made cannot fix a browser's choice
    picked: bool = False


class Endpoints:
    def __init__(self, identity: Identity, routes: tuple[Route, ...] = (),
                 records: RecordStore | None = None, ends: SessionEnds | None = None,
                 mcp: McpAuthorizationServer | None = None,
                 vault: UpstreamVault | None = None) -> None:
        self.identity = identity
        # the authorization server of MCP clients on MCP routes' hosts (None: none)
        self.mcp = mcp
        # the providers' back-channel logouts (``ends``: the databroker's, which ends
        # the sessions a logout names)
        self.backchannel = BackchannelLogout(identity, ends)
        # native SSH's sign-in pages (they bind SSH keys in the databroker's records)
        self.ssh = SshSignIn(identity, records) if records is not None else None
        self.routes = routes  # the snapshot's, for the routes portal
        # every form's submission comes from the gateway's own page (``same_origin``)
        self.same_origin = SameOrigin(identity, routes)
        self._discovery_failed = float("-inf")  # when reading it last failed (clock)
        # MCP routes' upstream token vault: where the upstream sends people back
        self.mcp_connect = McpConnect(identity, vault, routes) if vault is not None else None

    def handles(self, host: str, path: str) -> bool:
        ident = self.identity
        return (bool(ident.auth_host) and host in (ident.auth_host, ident.auth_hostname)) or \
            own_path(path) or (self.mcp is not None and path.startswith("/.well-known/")
                               and self.mcp.handles_well_known(host, path))

    def internal(self, request: RequestInfo, body: bytes = b""
                 ) -> Decision | Deferred[Decision] | None:
        """Answer the gateway's own endpoints; None lets the request go on to routing."""
        ident = self.identity
        on_auth = request.host in (ident.auth_host, ident.auth_hostname)
        path = request.path
        if on_auth and path == BACKCHANNEL_LOGOUT:
            # a provider's server posts here, not a page: the form rule below does not
            # apply, and the endpoint refuses whatever a browser sends (``backchannel``)
            return self.backchannel.answer(request, body)
        mcp = self.mcp
        if mcp is not None:
            # an MCP client's token, revocation and registration requests: posted by
            # programs (browser-based clients too, from their own origin), no cookie read
            posted = mcp.client_post(request, body)
            if posted is not None:
                return posted
        if request.method not in SAFE_METHODS and own_path(path):
            # a form posted to any of the gateway's own endpoints, from its own page only
            refused = self.same_origin.refusal(request, endpoint_name(path))
            if refused is not None:
                return refused
        if mcp is not None:
            answered = mcp.answer(request, body)
            if answered is not None:
                return answered
        if on_auth and path == JWKS:
            return Reply(200, json.dumps(ident.signer.jwks()).encode(),
                        ((b"content-type", b"application/json"),), reason="jwks")
        if on_auth and path == SIGN_IN:
            return self._start(request)
        if path == SIGN_IN:
            return self._sign_in_link(request)
        if on_auth and path == ident.options.authenticate_callback_path:
            return ensureDeferred(self._callback(request))
        if path == HANDOFF:
            return self._handoff(request)
        if path == PROGRAMMATIC:
            return self._programmatic(request)
        if path in (SIGN_OUT, SIGN_OUT.rstrip("/")):
            return self._discovered(lambda: self._sign_out(request, body))
        if path in WHO_AM_I:
            bearer = bearer_profile(ident, self.routes, request)  # a machine caller's
            if bearer is not None:
                return bearer
            return self._discovered(lambda: who_am_i(ident, request))
        if path in PORTAL:
            return routes_portal(ident, self.routes, request)
        if on_auth and self.ssh is not None and path.startswith(SSH_SIGN_IN):
            return self.ssh.answer(request, body)
        if path == CALLBACK_PATH and self.mcp_connect is not None:
            return self.mcp_connect.answer(request)
        if own_path(path):
            return self._error(404, "Not found.", request.headers, "not-found")
        return None

    def _error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
               reason: str, extra: tuple[tuple[bytes, bytes], ...] = (),
               actions: tuple[Action, ...] = ()) -> Reply:
        return answers.error(status, message, headers, reason, extra, look=self.identity.look,
                           actions=actions)

    def _start(self, request: RequestInfo) -> Decision | Deferred[Decision]:
        ident = self.identity
        now = ident.clock()
        params = query_params(request)
        payload = ident.shared.open("sign-in", params.get("gateway_redirect", ""), now)
        if payload is None or not safe_target(str(payload.get("uri", "")), ident.allowed_hosts):
            return self._error(400, "This sign-in link is invalid or has expired.",
                               request.headers, "bad-sign-in-link")
        uri = str(payload["uri"])
        client = str(payload.get("programmatic", ""))
        offered = self._offered(payload)
        asked = params.get("provider", "")
        if asked and asked not in offered:
            return self._error(400, "This sign-in link names an identity provider that is "
                               "not offered here.", request.headers, "provider-not-offered")
        picked = bool(asked) and params.get(CHOSEN_PARAM) == "1" and \
            followed_from_here(request.headers)
        chosen = Choice(params.get("gateway_redirect", ""), offered, asked, picked)
        found = ident.lookup(request)
        # "sign in as someone else": the provider is asked for a fresh login, and the
        # session this browser had ends once the new one exists (in the callback)
        if payload.get("switch"):
            return self._choose(request, uri, client, found.sid or "", True, chosen)

        def start(session: Session | None) -> Decision | Deferred[Decision]:
            if session is None or session.provider not in offered:
                # (a session of a provider not offered stays: other routes accept it)
                return self._choose(request, uri, client, "", False, chosen)
            return self._to_client(session, client) if client else self._to_route(session, uri)
        if found.sid and ident.store.needs_fetch:
            # this process's copy may be stale (a sign-out through another process an
            # instant ago) or missing (a sign-in through another): the store decides
            return ident.after_reading(request, found.sid, start)
        return start(found.session)

    def _sign_in_link(self, request: RequestInfo) -> Decision:
        """``/.gateway/sign_in?provider=ID[&uri=/path]`` on a route host: a link people
        can be given ("sign in to the wiki with your partner account"), which starts a
        sign-in with that provider and comes back to ``uri`` on this host (a path
        only: never another site)."""
        ident = self.identity
        params = query_params(request)
        provider = params.get("provider", "")
        uri = params.get("uri", "/")
        if ident.clients.get(provider) is None or not uri.startswith("/") or \
                uri.startswith("//") or "\\" in uri:
            return self._error(400, "This sign-in link names no identity provider of this "
                               "gateway, or a page elsewhere.", request.headers,
                               "bad-sign-in-link")
        if not ident.auth_origin:
            return self._error(503, "No authenticate service is configured.",
                               request.headers, "no-authenticate-url")
        sealed = ident.flow.sign_in_link(f"{request.scheme}://{request.host}{uri}")
        return answers.redirect(f"{ident.auth_origin}{SIGN_IN}?"
                                + urlencode({"gateway_redirect": sealed, "provider": provider}))

    def _offered(self, payload: dict[str, Any]) -> tuple[str, ...]:
        """The providers a sign-in offers: those the route accepts (sealed in its
        link by ``SignInFlow.sign_in_link``), else every interactive one."""
        clients = self.identity.clients
        named = payload.get("providers")
        if not isinstance(named, list):
            return clients.interactive
        return tuple(p for p in clients.interactive if p in named)

    def _choose(self, request: RequestInfo, uri: str, client: str, replace: str,
                fresh_login: bool, choice: Choice) -> Decision | Deferred[Decision]:
        """The provider to sign in with: the one asked for (``?provider=``), the only
        one offered, or the one this browser chose last (not for "sign in as someone
        else": that may be another provider's account); otherwise the chooser page."""
        ident = self.identity
        offered = choice.offered
        if not offered:
            return self._error(503, "No identity provider is configured.", request.headers,
                               "no-provider")
        provider = choice.asked
        if not provider and len(offered) == 1:
            provider = offered[0]
        if not provider and not fresh_login:
            remembered = parse_cookies(request.headers).get(PROVIDER_COOKIE, "")
            provider = remembered if remembered in offered else ""
        if not provider:
            body, page = choose_provider(
                tuple((p, ident.clients.label(p)) for p in offered), SIGN_IN, choice.sealed,
                ident.look, CHOSEN_PARAM)
            return answers.answer(200, body, page, "choose-provider")
        remember: tuple[tuple[bytes, bytes], ...] = ()
        if len(offered) > 1 and choice.picked:
            remember = tuple((b"set-cookie", c) for c in set_cookie_headers(
                PROVIDER_COOKIE, provider, max_age=PROVIDER_COOKIE_AGE, domain="",
                secure=ident.options.cookie_secure, http_only=True))
        return self._to_provider(request, uri, client, replace, fresh_login, provider,
                                 remember)

    def _to_provider(self, request: RequestInfo, uri: str, client: str,
                     replace: str, fresh_login: bool, provider: str,
                     extra: tuple[tuple[bytes, bytes], ...] = ()
                     ) -> Decision | Deferred[Decision]:
        """Send the browser to the identity provider ``provider`` (``fresh_login``:
        "sign in as someone else", ``replace``: the session that ends once the new one
        exists). The state names the provider: the callback redeems the code there."""
        ident = self.identity
        now = ident.clock()
        oidc = ident.clients.get(provider)
        if oidc is None:
            return self._error(503, "No identity provider is configured.", request.headers,
                               "no-provider")
        csrf = secrets.token_urlsafe(24)
        verifier, challenge = pkce_pair()
        nonce = secrets.token_urlsafe(24)
        state = ident.shared.seal("state", {
            "uri": uri, "nonce": nonce, "verifier": verifier, "provider": provider,
            "programmatic": client, "replace": replace,
            "csrf": hashlib.sha256(csrf.encode()).hexdigest()}, now + STATE_TTL)
        cookie = set_cookie_headers(CSRF_COOKIE, csrf, max_age=int(STATE_TTL), domain="",
                                    secure=ident.options.cookie_secure, http_only=True)
        extra = tuple((b"set-cookie", c) for c in cookie) + extra

        async def go() -> Decision:
            try:
                url = await oidc.start_url(state, nonce, challenge, fresh_login=fresh_login)
            except Exception as exc:  # the provider is down or misconfigured
                return self._provider_down(exc, request)
            return answers.redirect(url, extra)

        return ensureDeferred(go())

    def _provider_down(self, exc: Exception, request: RequestInfo) -> Reply:
        log.error("identity provider unavailable: {error}", error=str(exc))
        return self._error(503, "The identity provider cannot be reached; try again later.",
                           request.headers, "provider-unavailable")

    async def _callback(self, request: RequestInfo) -> Decision:
        ident = self.identity
        params = query_params(request)
        now = ident.clock()
        if params.get("error"):
            status = 401 if params["error"] == "access_denied" else 400
            return self._error(status, "The identity provider did not sign you in.",
                               request.headers, f"provider-error: {params['error'][:64]}")
        state = ident.shared.open("state", params.get("state", ""), now)
        csrf = parse_cookies(request.headers).get(CSRF_COOKIE, "")
        if state is None or not hmac.compare_digest(
                str(state.get("csrf", "")), hashlib.sha256(csrf.encode()).hexdigest()):
            return self._error(400, "This sign-in attempt is invalid or has expired; start "
                               "again.", request.headers, "bad-state")
        # the provider the sign-in was started with (a state from before states named
        # one was the implicit provider's): the code is redeemed there and nowhere else
        provider = str(state.get("provider", IMPLICIT_ID))
        oidc = ident.clients.get(provider)
        if not params.get("code") or oidc is None:
            return self._error(400, "The identity provider sent no code.", request.headers,
                               "no-code")
        try:
            await oidc.metadata()
            mixed_up = oidc.response_issuer_problem(params.get("iss"))
            if mixed_up:
                log.warn("sign-in through {provider} refused: {error}", provider=provider,
                         error=mixed_up, client=request.client_ip)
                return self._error(400, "This sign-in answer did not come from the "
                                   "provider the sign-in was started with; start again.",
                                   request.headers, "issuer-mismatch")
            tokens = await oidc.exchange(params["code"], str(state["verifier"]),
                                         str(state["nonce"]))
        except ProviderUnavailable as exc:  # went away during the code exchange
            return self._provider_down(exc, request)
        except OIDCError as exc:
            log.error("sign-in through {provider} failed: {error}", provider=provider,
                      error=str(exc))
            return self._error(502, "The sign-in could not be completed.", request.headers,
                               "exchange-failed")
        session = ident.build_session(tokens.claims, tokens.id_token, tokens.access_token,
                                     tokens.refresh_token, now + tokens.expires_in, provider)
        try:
            await ident.store.put_confirmed(session)
        except IndexFull as exc:  # this person's own sessions fill an index key
            log.warn("sign-in of {email} refused: {error}", email=session.email,
                     error=str(exc))
            return self._error(429, f"You signed in, but {exc}.", request.headers,
                               "too-many-sessions")
        except Exception as exc:
            # No cookie for a session the store does not have: every process would
            # answer it with a sign-in redirect (503 now, "never a guess").
            log.error("sign-in of {email}: the session could not be saved: {error}",
                      email=session.email, error=str(exc))
            return self._error(503, "You signed in, but your session could not be saved "
                                    "right now; please try again in a moment.",
                               request.headers, "session-not-saved")
        # the route signed in for: its host only (the URL's query may hold anything)
        log.info("signed in {email} ({user}) through {provider} for {host}",
                 email=session.email, provider=provider,
                 user=session.user_id, host=urlsplit(str(state.get("uri", ""))).netloc,
                 client=request.client_ip, programmatic=bool(state.get("programmatic")))
        if state.get("replace"):
            ident.store.delete(str(state["replace"]))  # the session this one replaces
            log.info("{email} signed in as someone else: the browser's previous session "
                     "ended", email=session.email)
        clear_csrf = tuple((b"set-cookie", c) for c in clear_cookie_headers(
            CSRF_COOKIE, "", ident.options.cookie_secure)[:1])
        if state.get("programmatic"):
            return self._to_client(session, str(state["programmatic"]),
                                   ident.session_cookie(session) + clear_csrf)
        return self._to_route(session, str(state["uri"]),
                              ident.session_cookie(session) + clear_csrf)

    def _programmatic(self, request: RequestInfo) -> Decision:
        """Sign-in for non-browser clients: answers the URL to open; after sign-in the
        browser is sent to the client's local ``gateway_redirect_uri`` with
        ``gateway_jwt``, which the client then sends as ``Authorization: Gateway``."""
        ident = self.identity
        if request.method != b"GET":
            return self._error(405, "Use GET.", request.headers, "method-not-allowed")
        target = query_params(request).get("gateway_redirect_uri")
        if target is None:
            return self._error(404, "Not found.", request.headers, "not-found")
        if not allowed_programmatic_target(target, ident.programmatic_domains):
            return self._error(400, "invalid redirect uri", request.headers,
                               "bad-programmatic-redirect")
        if not ident.auth_origin:
            return self._error(503, "No authenticate service is configured.",
                               request.headers, "no-authenticate-url")
        route_url = f"{request.scheme}://{request.host}/"
        if not safe_target(route_url, ident.allowed_hosts):
            # Started on a name that is no route's (the gateway's own name, as `gateway
            # tcp --gateway-url` may use): the browser ends at the client anyway, so the
            # sign-in runs on the authenticate host.
            route_url = f"{ident.auth_origin}/"
        sealed = ident.shared.seal("sign-in", {"uri": route_url, "programmatic": target},
                                  ident.clock() + STATE_TTL)
        url = f"{ident.auth_origin}{SIGN_IN}?" + urlencode({"gateway_redirect": sealed})
        return Reply(200, url.encode(), ((b"content-type", b"text/plain; charset=utf-8"),),
                    reason="programmatic-login")

    def _to_client(self, session: Session, target: str,
                   extra: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
        token = self.identity.shared.seal("programmatic", {"sid": session.id}, session.expires_at)
        sep = "&" if "?" in target else "?"
        return answers.redirect(f"{target}{sep}{urlencode({'gateway_jwt': token})}", extra)

    def _to_route(self, session: Session, uri: str,
                  extra: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
        ident = self.identity
        parts = urlsplit(uri)
        sealed = ident.shared.seal("handoff", {"sid": session.id, "uri": uri},
                                  ident.clock() + HANDOFF_TTL)
        location = f"{parts.scheme}://{parts.netloc}{HANDOFF}?" + \
            urlencode({"gateway_session": sealed})
        return answers.redirect(location, extra)

    def _handoff(self, request: RequestInfo) -> Decision | Deferred[Decision]:
        """Sets this host's cookie: the sealed value is bound to the host, expires in
        ``HANDOFF_TTL`` and is accepted once (it travels in a URL that proxies log)."""
        ident = self.identity
        now = ident.clock()
        sealed = query_params(request).get("gateway_session", "")
        payload = ident.shared.open("handoff", sealed, now)
        uri = str(payload.get("uri", "")) if payload else ""
        if payload is None or urlsplit(uri).netloc.lower() != request.host:
            return self._error(400, "This sign-in link is invalid or has expired.",
                               request.headers, "bad-handoff")
        token_id, expires = ident.shared.token_id(sealed), float(payload["exp"])
        if not ident.spent.spend(token_id, expires, now):
            return self._reused(request)
        sid = str(payload.get("sid", ""))
        if ident.store.needs_fetch:
            # Sessions in the kvstore: other processes (workers, other gateways) may
            # see this link too, so it is spent there as well; and the session, made
            # by another process an instant ago, is read if this one has no copy yet
            # (it was stored before the redirect here).
            return ensureDeferred(self._shared_handoff(request, token_id, expires - now,
                                                       sid, uri))
        return self._handoff_to(request, ident.store.get(sid), uri)

    def _reused(self, request: RequestInfo) -> Decision:
        log.warn("a sign-in hand-off for {host} was used twice; refused", host=request.host)
        return self._error(400, "This sign-in link was already used; open the page again.",
                           request.headers, "handoff-reused")

    async def _shared_handoff(self, request: RequestInfo, token_id: str, ttl: float,
                              sid: str, uri: str) -> Decision:
        store = self.identity.store
        try:
            if not await store.claim_once(f"handoff:{token_id}", max(ttl, 1.0)):
                return self._reused(request)
            session = store.get(sid)
            if session is None:
                session = await store.fetch(sid)
        except Exception as exc:  # storage down or unreadable: no cookie without it
            return self.identity.storage_unavailable(request, exc)
        return self._handoff_to(request, session, uri)

    def _handoff_to(self, request: RequestInfo, session: Session | None, uri: str
                    ) -> Decision:
        ident = self.identity
        if session is None or not session.valid(ident.clock()):
            return self._error(401, "Your session has ended; sign in again.", request.headers,
                               "session-gone", actions=(Action("Sign in again", uri, "get"),))
        return answers.redirect(uri, ident.session_cookie(session))

    def _sign_out(self, request: RequestInfo, body: bytes) -> Decision | Deferred[Decision]:
        return self.identity.with_session(
            request, lambda session: self._sign_out_of(request, body, session))

    def _sign_out_of(self, request: RequestInfo, body: bytes, session: Session | None
                     ) -> Decision | Deferred[Decision]:
        ident = self.identity
        given = query_params(request) | (form_params(body) if request.method == b"POST" else {})
        token = given.get("csrf", "")
        if token and request.method in SAFE_METHODS:
            # the sign-out link with its token: a state change by GET (the reference's);
            # opened by hand it is the person's, followed from another site it is not
            refused = self.same_origin.refusal(request, SIGN_OUT, navigation=True)
            if refused is not None:
                return refused
        if session is None or not hmac.compare_digest(
                token.encode("utf-8", "replace"), ident.csrf_token(session).encode()):
            if session is not None and request.method == b"GET" and not token:
                wanted = given.get("gateway_redirect_uri", "")
                return sign_out_confirmation(
                    ident, session, wanted if safe_target(wanted, ident.allowed_hosts) else "")
            return self._error(400, "CSRF token invalid.", request.headers, "csrf-invalid")
        log.info("signed out {email} ({user}) on {host}", email=session.email,
                 user=session.user_id, host=request.host, client=request.client_ip)
        if not ident.store.needs_fetch:
            ident.store.delete(session.id)
            return self._signed_out(session, given)
        # a shared store: answer once it holds the sign-out, so that a sign-in right after
        # it (through any process) finds no session to hand back
        return ident.store.delete_confirmed(session.id).addCallback(
            lambda _: self._signed_out(session, given))

    def _discovered(self, render: Callable[[], Decision | Deferred[Decision]]
                    ) -> Decision | Deferred[Decision]:
        """Pages with the sign-out form list the provider's end-session origin in their
        form-action, and the sign-out redirects there; both need the provider's
        discovery document. A process that has not read it yet (a split proxy:
        authenticate signed the person in; any process just restarted) reads it first,
        so that signing out there ends the provider's session too."""
        ident = self.identity
        unread = [(pid, c) for pid, c in ident.clients.clients.items()
                  if not c.metadata_loaded]
        if not unread or ident.clock() - self._discovery_failed < DISCOVERY_RETRY:
            return render()  # (a provider that just failed is not waited for again)

        async def run() -> Decision:
            for provider_id, provider in unread:  # (whoever signed them in: not known yet)
                try:
                    await provider.metadata()
                except Exception as exc:  # the page and the sign-out here stand
                    self._discovery_failed = ident.clock()
                    log.warn("the discovery document of identity provider {provider} "
                             "could not be read ({error}): a sign-out here does not end "
                             "its session (tried again in {retry:g}s)",
                             provider=provider_id, error=str(exc),
                             retry=DISCOVERY_RETRY)
            result = render()
            return await result if isinstance(result, Deferred) else result
        return ensureDeferred(run())

    def _signed_out(self, session: Session, given: dict[str, str]) -> Decision:
        ident = self.identity
        clear = tuple((b"set-cookie", c) for c in clear_cookie_headers(
            ident.options.cookie_name, ident.options.cookie_domain, ident.options.cookie_secure))
        target = given.get("gateway_redirect_uri", "")
        if not (target and safe_target(target, ident.allowed_hosts)):
            target = ident.options.signout_redirect_url
        oidc = ident.clients.get(session.provider)
        if oidc is not None and session.id_token:
            end = oidc.end_session_url(session.id_token, target)
            if end:
                return answers.redirect(end, clear)
        if target:
            return answers.redirect(target, clear)
        return signed_out_page(ident, session, clear)
