"""The signed-in person's own pages: ``/.gateway/`` (who am I) and the sign-out
confirmation. The identity layer finds the session; ``gateway.pages`` renders."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, ensureDeferred

from gateway.authenticate.targets import SIGN_OUT
from gateway.authorize import answers
from gateway.authorize.email import REFUSAL_TEXT
from gateway.authorize.hook import Decision, RequestInfo
from gateway.pages.layout import Action, Look, origin
from gateway.pages.signout import confirm_sign_out, signed_out
from gateway.pages.whoami import Group, Profile, render_profile
from gateway.sessions.model import Session

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity

WHO_AM_I = ("/.gateway/", "/.gateway")


def who_am_i(ident: Identity, request: RequestInfo) -> Decision | Deferred[Decision]:
    """The page, its JSON, or (not signed in) the sign-in redirect for browsers and 401
    for everything else."""
    session, sid, _ = ident.lookup(request)
    if session is None and sid and ident.store.needs_fetch:
        return ensureDeferred(_fetched(ident, request, sid))
    return _answer(ident, request, session)


async def _fetched(ident: Identity, request: RequestInfo, sid: str) -> Decision:
    try:
        session = await ident.store.fetch(sid)
    except Exception:  # storage down: the same answer as a route's
        return ident.error(503, "Sessions cannot be read right now; try again shortly.",
                            request.headers, "session-storage-unavailable")
    if session is not None and not session.valid(ident.clock()):
        session = None
    return _answer(ident, request, session)


def _answer(ident: Identity, request: RequestInfo, session: Session | None) -> Decision:
    if session is None:
        if answers.wants_html(request.headers):
            return ident.sign_in(request)
        return ident.error(401, "Sign in to see who you are signed in as.",
                            request.headers, "user-unauthenticated")
    view, refusal = ident.decider.decision_session(session)  # what routes see of it
    profile = Profile(
        email=view.email, user_id=view.user_id, name=view.name,
        groups=_groups(ident, view), claims=view.claims, started=view.issued_at,
        expires=view.expires_at, identity_provider=ident.options.idp_provider_url,
        host=request.host, email_claimed=session.email if refusal else "",
        email_refused=refusal, email_refused_text=REFUSAL_TEXT.get(refusal, ""))
    actions = [Action("Sign out", SIGN_OUT, "post", (("csrf", ident.csrf_token(session)),))]
    switch = ident.switch_action(request, f"{request.scheme}://{request.host}/.gateway/")
    if switch is not None:
        actions.append(switch)
    look = _with_targets(ident, session, ident.options.signout_redirect_url)
    body, page = render_profile(profile, look, tuple(actions),
                                as_json=answers.wants_json(request.headers)
                                and not answers.wants_html(request.headers))
    return answers.answer(200, body, page, "who-am-i")


def _with_targets(ident: Identity, session: Session, destination: str) -> Look:
    """The look of a page with the sign-out form: its submission is redirected to the
    provider's end-session endpoint, then to ``destination``; browsers check each hop
    against form-action, so their origins are listed beside the authenticate host."""
    targets = [origin(destination)]
    if ident.provider is not None and session.id_token:
        targets.append(origin(ident.provider.end_session_url(session.id_token, "") or ""))
    return replace(ident.look, form_targets=tuple(t for t in targets if t))


def _groups(ident: Identity, session: Session) -> tuple[Group, ...]:
    """Directory groups (name and id) when a directory is synced, else the groups claim."""
    directory: Any = ident.directory
    if directory is not None and hasattr(directory, "group_details"):
        return tuple(Group(name or gid, gid) for gid, name in
                     directory.group_details(session.user_id, session.email))
    return tuple(Group(g) for g in session.groups)


def sign_out_confirmation(ident: Identity, session: Session, target: str) -> Decision:
    """Who is signed out and where they go: ``target`` (already checked) or the
    ``signout_redirect_url``; and whether the provider's session ends too."""
    destination = target or ident.options.signout_redirect_url
    provider_too = bool(ident.provider is not None and session.id_token and
                        ident.provider.end_session_url(session.id_token, destination))
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
    return ident.decider.decision_session(session)[0].email or session.user_id
