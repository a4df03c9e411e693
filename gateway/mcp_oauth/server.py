"""The authorization server's endpoints on each MCP route's host: the metadata
documents, ``/.gateway/mcp/authorize`` with sign-in and consent, ``consent``,
``token``, ``revoke`` and (when turned on) ``register``. The sign-in web app
(``gateway.authenticate.endpoints``) hands them their requests; sign-in itself, the
session and the person's caller come from the authenticate layer through ``People``.

The flow: the client's request is checked (``authorize_request``; the client and its
redirect URI through the client directory, ``Clients``, before anything may be sent
back there), the person signs in as for any route (the route's identity providers),
the route's policy must let them in at all (any of the messages an MCP session starts
with), then the consent page unless they allowed this client this route
before and its redirect URI is https (a loopback or private-use one is asked about every
time: any program on the computer could be behind it, OAuth 2.1 7.12.2's untrusted
redirect); the code goes to the redirect URI with ``state`` and ``iss``."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authorize import answers
from gateway.authorize.caller import Caller
from gateway.authorize.decide import facts_of, http_asked
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.config.values import is_loopback_host
from gateway.databroker.records import StorageUnavailable
from gateway.mcp_oauth.authorize_request import (
    AuthorizeAsk,
    RedirectError,
    client_stage,
    code_response,
    error_response,
    request_params,
    request_stage,
)
from gateway.mcp_oauth.client_types import ClientRefused, Clients, McpClient
from gateway.mcp_oauth.clients import RATE_LIMITED, REGISTRATION_OFF, registration_response
from gateway.mcp_oauth.grants import Grants, Issued, TokenError
from gateway.mcp_oauth.metadata import (
    AUTHORIZE,
    CONSENT,
    REGISTER,
    REVOKE,
    TOKEN,
    as_json,
    authorization_server,
    protected_resource,
)
from gateway.mcp_oauth.resources import (
    AS_METADATA_PATH,
    OIDC_DISCOVERY_PATH,
    PRM_PATH,
    issuer,
    mcp_routes,
    resource_of,
    resource_path,
    route_named,
    route_of_metadata_path,
)
from gateway.mcp_oauth.upstream import CALLBACK_PATH, UpstreamVault
from gateway.pages.consent import ConsentView, consent_page
from gateway.pages.layout import Action, Look
from gateway.pages.whoami import AllowedClient
from gateway.policy.any_message import any_message_allowed
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer

log = Logger()

CONSENT_TTL = 600.0
REVOKE_CONSENT = "/.gateway/mcp/consents/revoke"
# paths answered before the same-origin rule of forms: clients post here, not pages
CLIENT_POSTS = (TOKEN, REVOKE, REGISTER)
JSON = b"application/json"
_CORS = ((b"access-control-allow-origin", b"*"),)
MAX_FORM = 64 * 1024


class People(Protocol):
    """What the endpoints need of sign-in (``gateway.authenticate.mcp_people``)."""

    look: Look

    def with_session(self, request: RequestInfo,
                     answer: Callable[[Session | None], Decision | Deferred[Decision]]
                     ) -> Decision | Deferred[Decision]: ...

    def sign_in_answer(self, request: RequestInfo, route: Route) -> Reply: ...

    def accepted(self, route: Route) -> tuple[str, ...]: ...

    def refused_provider(self, request: RequestInfo, route: Route, session: Session
                         ) -> Reply: ...

    def caller(self, session: Session) -> Caller: ...

    def csrf_token(self, session: Session) -> str: ...

    def session_of(self, session_id: str) -> Awaitable[Session | None]: ...

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str) -> Reply: ...


def _json(status: int, doc: dict[str, Any], reason: str,
          extra: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
    return Reply(status, json.dumps(doc, separators=(",", ":")).encode(),
                 ((b"content-type", JSON), (b"cache-control", b"no-store"),
                  (b"pragma", b"no-cache"), *_CORS, *extra), reason=reason)


def oauth_error(status: int, error: str, description: str, reason: str) -> Reply:
    return _json(status, {"error": error, "error_description": description}, reason)


def form(body: bytes) -> tuple[dict[str, str], tuple[str, ...]]:
    """A form body's parameters and those given more than once (RFC 6749 3.2: a
    parameter MUST NOT be included more than once)."""
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}, tuple(k for k, v in parsed.items()
                                                       if len(v) > 1)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _form_target(uri: str) -> str:
    """The CSP form-action source of a redirect URI (browsers check each redirect of a
    form's submission against it): its origin, or a private-use scheme."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


class McpAuthorizationServer:
    """Per snapshot: the MCP routes, the directory of clients, the grants store."""

    def __init__(self, routes: tuple[Route, ...], grants: Grants, clients: Clients,
                 people: People, sealer: Sealer, clock: Callable[[], float], *,
                 registration: bool, vault: UpstreamVault | None = None) -> None:
        self.routes = tuple(r for r in routes if r.mcp is not None)
        self.grants = grants
        self.clients = clients
        self.people = people
        self.sealer = sealer
        self.clock = clock
        self.registration = registration
        # the upstream token vault: a route with ``mcp.upstream_oauth2`` has the person
        # authorize its upstream once, before consenting (``_signed_in``)
        self.vault = vault

    def handles_well_known(self, host: str, path: str) -> bool:
        """The metadata documents of an MCP route's host (routes of other hosts keep
        their ``/.well-known/``)."""
        return (path in (AS_METADATA_PATH, OIDC_DISCOVERY_PATH, PRM_PATH)
                or path.startswith(PRM_PATH + "/")) and bool(mcp_routes(self.routes, host))

    # -- the dispatch

    def client_post(self, request: RequestInfo, body: bytes
                    ) -> Decision | Deferred[Decision] | None:
        """The endpoints clients call (not forms of a page: the same-origin rule does
        not apply, no cookie is read); ``None``: not one of them."""
        path = request.path
        if path not in CLIENT_POSTS:
            return None
        if not mcp_routes(self.routes, request.host):
            return None  # (not an MCP host: the 404 of unknown own paths)
        if request.method == b"OPTIONS":
            return self._preflight()
        if request.method != b"POST":
            return oauth_error(405, "invalid_request", "use POST", "method-not-allowed")
        if path == TOKEN:
            return ensureDeferred(self._token(request, body))
        if path == REVOKE:
            return ensureDeferred(self._revoke(body))
        return self._register(request, body)

    def answer(self, request: RequestInfo, body: bytes
               ) -> Decision | Deferred[Decision] | None:
        """The metadata documents, ``authorize`` and ``consent`` (after the same-origin
        rule of forms), and the consent's revocation from the account page."""
        path = request.path
        if path == REVOKE_CONSENT:
            return self._forget(request, body)
        if not mcp_routes(self.routes, request.host):
            return None
        if path.startswith("/.well-known/"):
            if request.method == b"OPTIONS":
                return self._preflight()
            if request.method not in (b"GET", b"HEAD"):
                return oauth_error(405, "invalid_request", "use GET", "method-not-allowed")
            return self._metadata(request)
        if path == AUTHORIZE:
            # GET only: with a remembered consent a GET issues a code at once, and a
            # HEAD must have no such effect (a prefetch, a link checker)
            if request.method != b"GET":
                refused = self.people.error(405, "Use GET.", request.headers,
                                            "method-not-allowed")
                return replace(refused, headers=(*refused.headers, (b"allow", b"GET")))
            return ensureDeferred(self._authorize(request))
        if path == CONSENT and request.method == b"POST":
            return ensureDeferred(self._consent(request, body))
        return None

    @staticmethod
    def _preflight() -> Reply:
        return Reply(204, b"", (*_CORS, (b"access-control-allow-methods",
                                         b"GET, POST, OPTIONS"),
                                (b"access-control-allow-headers",
                                 b"authorization, content-type, mcp-protocol-version"),
                                (b"access-control-max-age", b"600")), reason="mcp-preflight")

    # -- metadata

    def _metadata(self, request: RequestInfo) -> Reply:
        iss = issuer(request.scheme, request.host)
        if request.path in (AS_METADATA_PATH, OIDC_DISCOVERY_PATH):
            doc = authorization_server(iss, registration=self.registration)
            return Reply(200, as_json(doc), ((b"content-type", JSON), *_CORS),
                         reason="mcp-metadata")
        route = route_of_metadata_path(self.routes, request.host, request.path)
        if route is None:
            return oauth_error(404, "not_found", "no MCP server of this gateway has "
                               "metadata here", "not-found")
        doc = protected_resource(resource_of(route, request.scheme, request.host), iss,
                                 route.name or request.host + resource_path(route))
        return Reply(200, as_json(doc), ((b"content-type", JSON), *_CORS),
                     reason="mcp-metadata")

    # -- authorize

    async def _authorize(self, request: RequestInfo) -> Decision:
        params, twice = request_params(request.query)
        page = client_stage(params, twice)
        if page is not None:
            return self.people.error(page.status, page.message, request.headers,
                                     page.reason)
        checked = await self._client(request, params["client_id"], params["redirect_uri"])
        if isinstance(checked, Reply):
            return checked
        client = checked
        iss = issuer(request.scheme, request.host)
        redirect_uri = params["redirect_uri"]
        asked = request_stage(params, twice)
        if isinstance(asked, RedirectError):
            return self._back(redirect_uri, asked, params.get("state", ""), iss)
        route = route_named(self.routes, request.scheme, request.host, asked.resource)
        if route is None:
            return self._back(redirect_uri, RedirectError(
                "invalid_target", "resource names no MCP server of this authorization "
                "server"), asked.state, iss)
        # the token is for the route's resource, whatever URL under it was named
        asked = replace(asked, resource=resource_of(route, request.scheme, request.host))
        result = self.people.with_session(
            request, lambda s: ensureDeferred(self._signed_in(request, route, asked,
                                                              client, s)))
        return await result if isinstance(result, Deferred) else result

    async def _client(self, request: RequestInfo, client_id: str, redirect_uri: str
                      ) -> McpClient | Reply:
        """The client and its redirect URI, or the page refusing them."""
        try:
            client = await self.clients.resolve(client_id)
        except ClientRefused as exc:
            log.info("mcp: authorization refused for client {client}: {error}",
                     client=client_id[:200], error=exc.description)
            return self.people.error(400, f"This MCP client cannot be used here: "
                                     f"{exc.description}", request.headers,
                                     f"mcp-client-refused: {exc.error}")
        except Exception as exc:  # the directory could not say: never a guess
            log.error("mcp: client {client} could not be looked up: {error}",
                      client=client_id[:200], error=str(exc))
            return self.people.error(503, "This MCP client cannot be looked up right now; "
                                     "try again shortly.", request.headers,
                                     "mcp-client-unavailable")
        why = self.clients.check_redirect_uri(client, redirect_uri)
        if why is not None:
            return self.people.error(400, f"This MCP client's redirect URI is not one it "
                                     f"registered: {why}", request.headers,
                                     "mcp-redirect-uri-refused")
        return client

    @staticmethod
    def _back(redirect_uri: str, error: RedirectError, state: str, iss: str) -> Reply:
        return answers.redirect(error_response(redirect_uri, error, state, iss))

    async def _signed_in(self, request: RequestInfo, route: Route, ask: AuthorizeAsk,
                         client: McpClient, session: Session | None) -> Decision:
        people = self.people
        iss = issuer(request.scheme, request.host)
        if session is None:
            return people.sign_in_answer(request, route)
        if session.provider not in people.accepted(route):
            return people.refused_provider(request, route, session)
        caller = people.caller(session)
        if not self._admitted(request, route, caller):
            log.info("mcp: {who} may not use {resource}: no client authorized",
                     who=caller.who, resource=ask.resource, client=client.client_id)
            return self._back(ask.redirect_uri, RedirectError(
                "access_denied", "the MCP server's policy does not let this account in"),
                ask.state, iss)
        if self.vault is not None:
            # the route's upstream first (once per person): then back to this very
            # request, which finds the tokens stored and goes on to the consent
            here = f"{iss}{request.path}?{request.query.decode('utf-8', 'replace')}"
            try:
                to_upstream = await self.vault.connect_step(
                    route, session.provider, session.user_id, session.id,
                    continue_url=here, callback_url=iss + CALLBACK_PATH)
            except StorageUnavailable as exc:
                log.error("mcp: an upstream authorization could not be stored: {error}",
                          error=str(exc))
                return people.error(503, "This MCP server's upstream cannot be connected "
                                    "right now; try again shortly.", request.headers,
                                    "mcp-upstream-unavailable")
            if to_upstream is not None:
                return answers.redirect(to_upstream)
        remembered = await self.grants.consented(session, client.client_id, ask.resource)
        if remembered and urlsplit(ask.redirect_uri).scheme == "https":
            return await self._code(request, ask, session, iss)
        # a loopback or private-use redirect URI could be any program on the person's
        # computer opening their browser with this client's id: asked every time
        return self._consent_page(request, route, ask, client, session, caller, remembered)

    def _admitted(self, request: RequestInfo, route: Route, caller: Caller) -> bool:
        return admitted(request, route, caller, self.clock())

    async def _code(self, request: RequestInfo, ask: AuthorizeAsk, session: Session,
                    iss: str, status: int = 302) -> Decision:
        try:
            code = await self.grants.issue_code(ask, session)
        except StorageUnavailable as exc:
            log.error("mcp: a code could not be stored: {error}", error=str(exc))
            return self._back(ask.redirect_uri, RedirectError(
                "temporarily_unavailable", "try again shortly"), ask.state, iss)
        log.info("mcp: code issued to {client} for {resource} as {user}",
                 client=ask.client_id, resource=ask.resource, user=session.user_id)
        return answers.redirect(code_response(ask, code, iss), status=status)

    def _consent_page(self, request: RequestInfo, route: Route, ask: AuthorizeAsk,
                      client: McpClient, session: Session, caller: Caller,
                      remembered: bool) -> Reply:
        people = self.people
        sealed = self.sealer.seal("mcp-consent", {
            "client_id": ask.client_id, "redirect_uri": ask.redirect_uri,
            "challenge": ask.challenge, "resource": ask.resource, "state": ask.state,
            "scope": ask.scope, "sid": session.id}, self.clock() + CONSENT_TTL)
        csrf = people.csrf_token(session)
        redirect_host = urlsplit(ask.redirect_uri).hostname or ask.redirect_uri
        client_host = (urlsplit(client.client_id).hostname or "") \
            if client.kind == "metadata_document" else ""
        view = ConsentView(caller.who, client.name, client.client_id, client_host,
                           redirect_host, is_loopback_host(redirect_host), ask.resource,
                           route.name or ask.resource, remembered)
        allow = Action("Allow", CONSENT, "post",
                       (("ask", sealed), ("csrf", csrf), ("decision", "allow")))
        deny = Action("Deny", CONSENT, "post",
                      (("ask", sealed), ("csrf", csrf), ("decision", "deny")), primary=False)
        look = replace(people.look, form_targets=(*people.look.form_targets,
                                                  _form_target(ask.redirect_uri)))
        body, page = consent_page(view, allow, deny, look)
        return answers.answer(200, body, page, "mcp-consent")

    async def _consent(self, request: RequestInfo, body: bytes) -> Decision:
        people = self.people
        given, _ = form(body[:MAX_FORM])
        payload = self.sealer.open("mcp-consent", given.get("ask", ""), self.clock())
        if payload is None:
            return people.error(400, "This consent form is invalid or has expired; start "
                                "again from your MCP client.", request.headers,
                                "mcp-consent-invalid")
        result = people.with_session(
            request, lambda s: ensureDeferred(self._consented(request, given, payload, s)))
        return await result if isinstance(result, Deferred) else result

    async def _consented(self, request: RequestInfo, given: dict[str, str],
                         payload: dict[str, Any], session: Session | None) -> Decision:
        people = self.people
        if session is None or session.id != payload.get("sid") or \
                not _same(given.get("csrf", ""), people.csrf_token(session)):
            return people.error(400, "This consent form was not made for this sign-in; "
                                "start again from your MCP client.", request.headers,
                                "mcp-consent-invalid")
        ask = AuthorizeAsk(str(payload["client_id"]), str(payload["redirect_uri"]),
                           str(payload["challenge"]), str(payload["resource"]),
                           str(payload["state"]), str(payload["scope"]))
        iss = issuer(request.scheme, request.host)
        # the client and the route as they are now (a reload, a changed document)
        checked = await self._client(request, ask.client_id, ask.redirect_uri)
        if isinstance(checked, Reply):
            return checked
        route = route_named(self.routes, request.scheme, request.host, ask.resource)
        if route is None or not self._admitted(request, route, people.caller(session)):
            return answers.redirect(error_response(ask.redirect_uri, RedirectError(
                "access_denied", "the MCP server is gone or does not let this account "
                "in"), ask.state, iss), status=303)
        if given.get("decision") != "allow":
            log.info("mcp: {user} denied {client} the use of {resource}",
                     user=session.user_id, client=ask.client_id, resource=ask.resource)
            return answers.redirect(error_response(ask.redirect_uri, RedirectError(
                "access_denied", "the person did not allow this client"), ask.state, iss),
                status=303)
        try:
            await self.grants.remember(session, ask.client_id, checked.name, ask.resource)
        except StorageUnavailable as exc:
            log.error("mcp: a consent could not be stored: {error}", error=str(exc))
            return people.error(503, "Your consent could not be saved right now; try "
                                "again shortly.", request.headers, "mcp-consent-not-saved")
        log.info("mcp: {user} allowed {client} the use of {resource}",
                 user=session.user_id, client=ask.client_id, resource=ask.resource)
        return await self._code(request, ask, session, iss, status=303)

    # -- the person's account page: revoking a consent

    def _forget(self, request: RequestInfo, body: bytes) -> Decision | Deferred[Decision]:
        people = self.people
        if request.method != b"POST":
            return people.error(405, "Use the button on your account page.",
                                request.headers, "method-not-allowed")
        given, _ = form(body[:MAX_FORM])

        def answer(session: Session | None) -> Decision | Deferred[Decision]:
            if session is None or not _same(given.get("csrf", ""),
                                            people.csrf_token(session)):
                return people.error(400, "CSRF token invalid.", request.headers,
                                    "csrf-invalid")

            async def run() -> Decision:
                client_id = given.get("client_id", "")
                ended = await self.grants.forget(session.provider, session.user_id,
                                                 client_id)
                log.info("mcp: {user} revoked {client}: {n} grant(s) ended",
                         user=session.user_id, client=client_id[:200], n=ended)
                return answers.redirect("/.gateway/", status=303)
            return ensureDeferred(run())
        return people.with_session(request, answer)

    # -- token, revoke, register

    async def _token(self, request: RequestInfo, body: bytes) -> Decision:
        given, twice = form(body[:MAX_FORM])
        if twice:
            return oauth_error(400, "invalid_request", f"{twice[0]} given more than once",
                               "mcp-token-refused")
        client_id = given.get("client_id", "")
        if not client_id:
            return oauth_error(401, "invalid_client", "client_id is required (public "
                               "clients: token_endpoint_auth_method none)",
                               "mcp-token-refused")
        grant_type = given.get("grant_type", "")
        session_of = self.people.session_of
        try:
            if grant_type == "authorization_code":
                issued = await self.grants.redeem(
                    given.get("code", ""), client_id, given.get("redirect_uri", ""),
                    given.get("code_verifier", ""), given.get("resource", ""), session_of)
            elif grant_type == "refresh_token":
                issued = await self.grants.refresh(given.get("refresh_token", ""),
                                                   client_id, given.get("resource", ""),
                                                   session_of)
            else:
                return oauth_error(400, "unsupported_grant_type", "grant_type must be "
                                   "authorization_code or refresh_token",
                                   "mcp-token-refused")
        except TokenError as exc:
            log.info("mcp: token request of {client} refused: {error}",
                     client=client_id[:200], error=exc.description, grant_type=grant_type,
                     peer=request.client_ip)
            return oauth_error(exc.status, exc.error, exc.description, "mcp-token-refused")
        except StorageUnavailable as exc:
            log.error("mcp: token storage unavailable: {error}", error=str(exc))
            return oauth_error(503, "temporarily_unavailable", "try again shortly",
                               "mcp-token-unavailable")
        return self._issued(issued)

    @staticmethod
    def _issued(issued: Issued) -> Reply:
        return _json(200, {"access_token": issued.access_token, "token_type": "Bearer",
                           "expires_in": issued.expires_in,
                           "refresh_token": issued.refresh_token, "scope": issued.scope},
                     "mcp-token")

    async def _revoke(self, body: bytes) -> Decision:
        given, _ = form(body[:MAX_FORM])
        token = given.get("token", "")
        if not token:
            return oauth_error(400, "invalid_request", "token is required",
                               "mcp-revoke-refused")
        try:
            await self.grants.revoke(token, given.get("client_id", ""))
        except StorageUnavailable:
            return oauth_error(503, "temporarily_unavailable", "try again shortly",
                               "mcp-revoke-unavailable")
        return Reply(200, b"", (*_CORS, (b"cache-control", b"no-store")),
                     reason="mcp-revoked")

    def _register(self, request: RequestInfo, body: bytes) -> Decision | Deferred[Decision]:
        """RFC 7591, handed to the client directory; off: 404, as not advertised."""
        if not self.registration:
            return oauth_error(404, "not_found", "dynamic client registration is off "
                               "(mcp_dynamic_client_registration)", "not-found")
        try:
            metadata = json.loads(body[:MAX_FORM])
        except ValueError:
            metadata = None
        if not isinstance(metadata, dict):
            return oauth_error(400, "invalid_client_metadata", "the body must be a JSON "
                               "object", "mcp-register-refused")

        async def run() -> Decision:
            try:
                client = await self.clients.register(metadata, request.client_ip)
            except ClientRefused as exc:
                status = {REGISTRATION_OFF: 404, RATE_LIMITED: 429}.get(exc.error, 400)
                return oauth_error(status, exc.error, exc.description,
                                   "mcp-register-refused")
            except StorageUnavailable as exc:  # the registration is kept in the databroker
                log.error("mcp: a registration could not be stored: {error}",
                          error=str(exc))
                return oauth_error(503, "temporarily_unavailable", "try again shortly",
                                   "mcp-register-unavailable")
            return _json(201, registration_response(client, self.clock()), "mcp-registered")
        return ensureDeferred(run())


def allowed_clients(grants: Grants, session: Session, csrf: str
                    ) -> Deferred[list[AllowedClient]]:
    """The MCP clients the session's person allowed, each with its revoke button, for
    the account page (none listed when the store cannot say: the page stands)."""
    async def run() -> list[AllowedClient]:
        try:
            consents = await grants.consents(session.provider, session.user_id)
        except Exception as exc:  # the page without the list, not no page
            log.warn("mcp: the consents of {user} could not be read: {error}",
                     user=session.user_id, error=str(exc))
            return []
        return [AllowedClient(c.name, c.client_id, c.resources, c.granted_at, Action(
            "Revoke", REVOKE_CONSENT, "post", (("client_id", c.client_id), ("csrf", csrf)),
            primary=False)) for c in sorted(consents.values(), key=lambda c: c.name)]
    return ensureDeferred(run())


def admitted(request: RequestInfo, route: Route, caller: Caller, now: float) -> bool:
    """Whether the route's policy lets the person in at all: whether it lets them send
    some message on the route (``any_message_allowed``, as the data plane decides the
    messages that only keep a session), asked as a request of the route's path from this
    address. Whatever the policy says of single messages is then decided message by
    message, and the lists are filtered."""
    probe = RequestInfo(b"GET", request.scheme, request.host,
                        resource_path(route) or "/", b"", [], request.client_ip)
    return any_message_allowed(route.policy, facts_of(caller, http_asked(probe, now))
                               ).allowed
