"""The signed-in person's own pages: ``/.gateway/`` (who am I), ``/.gateway/routes`` (the
routes they may open now) and the sign-out confirmation. The identity layer finds the
session and decides; ``gateway.pages`` renders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred

from gateway.authenticate.targets import ROUTES, SIGN_OUT, query_params
from gateway.authorize import answers
from gateway.authorize.caller import Caller
from gateway.authorize.decide import decide, facts_of, http_asked
from gateway.authorize.email import REFUSAL_TEXT
from gateway.authorize.hook import Decision, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.routing.router import path_matches, route_host_keys
from gateway.pages.layout import Action, Look, origin
from gateway.pages.routes import Portal, PortalRoute, entry_path, portal_route, render_portal
from gateway.pages.signout import confirm_sign_out, signed_out
from gateway.pages.whoami import AllowedClient, Group, Profile, render_profile
from gateway.policy.any_message import any_message_allowed
from gateway.sessions.lookup import cookie_and_authorization
from gateway.sessions.model import Session

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity

WHO_AM_I = ("/.gateway/", "/.gateway")
PORTAL = (ROUTES, ROUTES + "/")
# A page for a signed-in person, given the session (``_signed_in``).
Page = Callable[[Session], Decision | Deferred[Decision]]


def who_am_i(ident: Identity, request: RequestInfo) -> Decision | Deferred[Decision]:
    """The page, its JSON, or (not signed in) the sign-in redirect for browsers and 401
    for everything else."""
    return _signed_in(ident, request, lambda s: _profile(ident, request, s),
                      "Sign in to see who you are signed in as.")


def bearer_profile(ident: Identity, routes: tuple[Route, ...], request: RequestInfo
                   ) -> Decision | None:
    """``/.gateway/`` for a bearer token from an outside issuer, on the host of a route
    that accepts its provider: who the token is to that route (``None``: no such token
    or route; a token the route refuses gets its 401). No session, so no sign-out."""
    callers = ident.bearer
    if callers is None or not any(len(n) == 13 and n.lower() == b"authorization"
                                  for n, _ in request.headers):
        return None
    host = request.host.lower()
    route = next((r for r in routes if not r.tcp and callers.of(r) and host in (
        r.host, f"{r.host}:{r.port}") and path_matches(r, "/")), None)
    if route is None:
        return None
    raw, _ = cookie_and_authorization(request.headers)
    found = callers.caller(request, route, raw)
    if found is None or not isinstance(found, Caller):
        return found
    entry = ident.clients.entry(found.provider)
    iat = found.claims.get("iat", ("0",))[0]
    profile = Profile(
        email=found.email, user_id=found.user_id, name=found.name,
        groups=tuple(Group(g) for g in found.groups), claims=found.claims,
        started=float(iat) if iat.isdigit() else 0.0, expires=found.expires_at,
        identity_provider=f"{entry.label} ({entry.issuer})" if entry else found.provider,
        host=request.host)
    body, page = render_profile(profile, ident.look, (), as_json=wants_json(request))
    return answers.answer(200, body, page, "who-am-i")


def routes_portal(ident: Identity, routes: tuple[Route, ...], request: RequestInfo
                  ) -> Decision | Deferred[Decision]:
    """The routes of ``routes`` this person may open now, as the daemon decides them;
    not signed in: as ``who_am_i``."""
    return _signed_in(ident, request, lambda s: _portal(ident, routes, request, s),
                      "Sign in to see the routes you can open.")


def wants_json(request: RequestInfo) -> bool:
    """JSON for ``?format=json``, or an Accept that asks for JSON and not HTML."""
    if query_params(request).get("format") == "json":
        return True
    return answers.wants_json(request.headers) and not answers.wants_html(request.headers)


def _signed_in(ident: Identity, request: RequestInfo, page: Page, stranger: str
               ) -> Decision | Deferred[Decision]:
    """``page`` for the request's session; without one, the sign-in redirect (browsers)
    or 401 saying ``stranger``."""
    return ident.with_session(request,
                              lambda session: _answer(ident, request, session, page, stranger))


def _answer(ident: Identity, request: RequestInfo, session: Session | None, page: Page,
            stranger: str) -> Decision | Deferred[Decision]:
    if session is None:
        if answers.wants_html(request.headers):
            return ident.sign_in(request)
        return ident.error(401, stranger, request.headers, "user-unauthenticated")
    return page(session)


def _profile(ident: Identity, request: RequestInfo, session: Session
             ) -> Decision | Deferred[Decision]:
    """The page; with the MCP clients the person allowed, when there are MCP routes."""
    consents = ident.mcp_consents
    if consents is None:
        return _profile_with(ident, request, session, ())

    def listed(found: list[AllowedClient]) -> Decision:
        return _profile_with(ident, request, session, tuple(found))
    return consents(session, ident.csrf_token(session)).addCallback(listed)


def _profile_with(ident: Identity, request: RequestInfo, session: Session,
                  clients: tuple[AllowedClient, ...]) -> Decision:
    caller = ident.decider.caller(session)  # what routes see of it
    refusal = caller.email_refusal
    profile = Profile(
        email=caller.email, user_id=caller.user_id, name=caller.name,
        groups=_groups(ident, caller), claims=caller.claims, started=session.issued_at,
        expires=caller.expires_at, identity_provider=_provider_text(ident, session),
        host=request.host, email_claimed=session.email if refusal else "",
        email_refused=refusal, email_refused_text=REFUSAL_TEXT.get(refusal, ""),
        clients=clients)
    actions = [Action("Sign out", SIGN_OUT, "post", (("csrf", ident.csrf_token(session)),))]
    switch = ident.switch_action(request, f"{request.scheme}://{request.host}/.gateway/")
    if switch is not None:
        actions.append(switch)
    actions.append(Action("Your routes", ROUTES, "get", primary=False))
    look = _with_targets(ident, session, ident.options.signout_redirect_url)
    body, page = render_profile(profile, look, tuple(actions),
                                as_json=wants_json(request))
    return answers.answer(200, body, page, "who-am-i")


def _portal(ident: Identity, routes: tuple[Route, ...], request: RequestInfo,
            session: Session) -> Decision:
    """Each route decided as the daemon decides it: the route's policy, for the session
    as decisions see it, now, on a GET of the route's entry path (a CONNECT with no
    path for a TCP route) from this client's address (an MCP route's GET carries no
    message: listed when the person may send some). No client certificate: the
    gateway's own endpoints belong to no route, so none checked one against a CA (and a
    certificate nobody checked is not one a policy may read); a route whose policy reads
    one is listed only if it allows without. Listed only if allowed; public routes are,
    marked; redirects are no place to open; a route whose entry address routing gives
    to an earlier route (the same address, or a broader path) is left out."""
    caller = ident.decider.caller(session)
    now = ident.clock()
    gateway_url = _gateway_url(request)
    shown: list[PortalRoute] = []
    for route in routes:
        if route.redirect is not None:
            continue
        method, path = ("CONNECT", "") if route.tcp else ("GET", entry_path(route))
        if serving_route(routes, route, path) is not route:
            continue
        if route.allow_public_unauthenticated_access:
            shown.append(portal_route(route, public=True, gateway_url=gateway_url))
            continue
        probe = RequestInfo(method.encode(), request.scheme, route.host, path, b"", [],
                            request.client_ip)
        if session.provider not in ident.flow.accepted(route):
            continue  # (its page would offer another provider's sign-in)
        asked = http_asked(probe, now)
        # an MCP route's GET carries no message: it is let in when some message would be
        # (as the data plane decides it, ``policy.any_message``)
        if (any_message_allowed(route.policy, facts_of(caller, asked)) if route.mcp
                else decide(route.policy, caller, asked)).allowed:
            shown.append(portal_route(route, method=method, path=path,
                                      gateway_url=gateway_url))
    portal = Portal(caller.who, now, tuple(shown), request.host)
    actions = (Action("Who am I?", "/.gateway/", "get", primary=False),)
    body, page = render_portal(portal, ident.look, actions, as_json=wants_json(request))
    return answers.answer(200, body, page, "routes-portal")


def serving_route(routes: tuple[Route, ...], route: Route, path: str) -> Route | None:
    """The route that routing gives ``route``'s entry (``path``; a CONNECT for a TCP
    route) to: the first of ``routes`` of its kind on its address whose path matches,
    as the data plane's lookup picks it."""
    key = route_host_keys(route)[0]
    for candidate in routes:
        if candidate.tcp == route.tcp and key in route_host_keys(candidate) and (
                route.tcp or path_matches(candidate, path)):
            return candidate
    return None


def _gateway_url(request: RequestInfo) -> str:
    """The ``--gateway-url`` of TCP commands: this page's origin, unless it is https on
    the default port, where a TCP route's own name is expected to lead to the gateway
    (``gateway tcp``'s default)."""
    try:
        port = urlsplit(f"//{request.host}").port
    except ValueError:  # no port number: an https default it is not
        port = -1
    if request.scheme == "https" and port in (None, 443):
        return ""
    return f"{request.scheme}://{request.host}"


def _provider_text(ident: Identity, session: Session) -> str:
    """The provider that signed the session in: its issuer, and for one of
    ``identity_providers`` its name (the implicit provider of the idp_* settings has
    only the URL, as before there were several)."""
    entry = ident.clients.entry(session.provider)
    if entry is None:
        return session.provider
    return entry.issuer if entry.implicit else f"{entry.label} ({entry.issuer})"


def _with_targets(ident: Identity, session: Session, destination: str) -> Look:
    """The look of a page with the sign-out form: its submission is redirected to the
    provider's end-session endpoint, then to ``destination``; browsers check each hop
    against form-action, so their origins are listed beside the authenticate host."""
    targets = [origin(destination)]
    client = ident.clients.get(session.provider)
    if client is not None and session.id_token:
        targets.append(origin(client.end_session_url(session.id_token, "") or ""))
    return replace(ident.look, form_targets=tuple(t for t in targets if t))


def _groups(ident: Identity, caller: Caller) -> tuple[Group, ...]:
    """Directory groups (name and id) when a directory is synced, else the groups claim."""
    directory: Any = ident.directory
    if directory is not None and hasattr(directory, "group_details"):
        return tuple(Group(name or gid, gid) for gid, name in
                     directory.group_details(caller.user_id, caller.email))
    return tuple(Group(g) for g in caller.groups)


def sign_out_confirmation(ident: Identity, session: Session, target: str) -> Decision:
    """Who is signed out and where they go: ``target`` (already checked) or the
    ``signout_redirect_url``; and whether the provider's session ends too."""
    destination = target or ident.options.signout_redirect_url
    client = ident.clients.get(session.provider)
    provider_too = bool(client is not None and session.id_token and
                        client.end_session_url(session.id_token, destination))
    fields = [("csrf", ident.csrf_token(session))]
    if target:
        fields.append(("gateway_redirect_uri", target))
    body, page = confirm_sign_out(_who(ident, session), destination, provider_too,
                                  Action("Sign out", SIGN_OUT, "post", tuple(fields)),
                                  _with_targets(ident, session, destination))
    return answers.answer(200, body, page, "page")


def signed_out_page(ident: Identity, session: Session,
                    extra: tuple[tuple[bytes, bytes], ...]) -> Decision:
    body, page = signed_out(_who(ident, session), ident.look)
    return answers.answer(200, body, page, "page", extra)


def _who(ident: Identity, session: Session) -> str:
    """Who a page says is signed in: the e-mail routes may use, else the user id."""
    return ident.decider.caller(session).who
