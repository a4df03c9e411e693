"""``/.gateway/ssh/TICKET`` on the authenticate host: where a person whose SSH key is not
bound yet signs in (the SSH server shows the link), confirms that the connection is
theirs, and so binds the key to their session (``gateway.databroker.ssh_records``).

The confirmation is a POST with the session's CSRF token: a link someone else sends
cannot bind their key to a person's identity by being opened alone. The POST must also
come from this page itself (``same_origin``, checked in ``Endpoints.internal`` before
it gets here): a page elsewhere that got hold of the token cannot post it.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate.targets import form_params
from gateway.authorize import answers
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.databroker.records import RecordStore
from gateway.databroker.ssh_records import confirm_sign_in, read_sign_in
from gateway.pages.layout import Action
from gateway.pages.ssh import confirm_ssh, ssh_signed_in
from gateway.sessions.model import Session

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity

log = Logger()
SSH_SIGN_IN = "/.gateway/ssh/"


class SshSignIn:
    def __init__(self, identity: Identity, records: RecordStore) -> None:
        self.identity = identity
        self.records = records

    def answer(self, request: RequestInfo, body: bytes) -> Decision | Deferred[Decision]:
        def signed_in(session: Session | None) -> Decision | Deferred[Decision]:
            if session is None:
                return ensureDeferred(self._sign_in(request))  # back here once signed in
            return ensureDeferred(self._answer(request, body, session))
        return self.identity.with_session(request, signed_in)

    async def _sign_in(self, request: RequestInfo) -> Decision:
        """The sign-in, offering the providers the ticket's route accepts (any, for a
        ticket that cannot be read: the page after the sign-in says what is wrong)."""
        ident = self.identity
        accepted: tuple[str, ...] = ()
        try:
            pending = await read_sign_in(self.records, request.path[len(SSH_SIGN_IN):],
                                         ident.clock())
        except Exception:  # (storage down: the page after the sign-in answers 503)
            pending = None
        route = ident.ssh_routes.get(pending.route) if pending is not None else None
        if route is not None:
            accepted = ident.flow.accepted(route)
        return ident.flow.sign_in(request, accepted)

    def _error(self, status: int, message: str, request: RequestInfo, reason: str) -> Reply:
        return answers.error(status, message, request.headers, reason, look=self.identity.look)

    async def _answer(self, request: RequestInfo, body: bytes, session: Session) -> Decision:
        ident = self.identity
        ticket = request.path[len(SSH_SIGN_IN):]
        try:
            pending = await read_sign_in(self.records, ticket, ident.clock())
        except Exception as exc:  # storage down: never a guess
            log.error("ssh sign-in: storage unavailable: {error}", error=str(exc))
            return self._error(503, "Sign-in data cannot be read right now; try again "
                                    "shortly.", request, "session-storage-unavailable")
        if pending is None:
            return self._error(400, "This SSH sign-in link is invalid or has expired; "
                                    "connect again for a new one.", request,
                               "bad-ssh-sign-in")
        who = ident.decider.caller(session).who
        if pending.session_id:
            body_html, page = ssh_signed_in(who, ident.look)
            return answers.answer(200, body_html, page, "ssh-sign-in-done")
        token = ident.csrf_token(session)
        if request.method == b"POST":
            given = form_params(body).get("csrf", "")
            if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()):
                return self._error(400, "CSRF token invalid.", request, "csrf-invalid")
            await confirm_sign_in(self.records, pending, session.id, session.expires_at)
            log.info("ssh key {fingerprint} bound to the session of {email} for route "
                     "{route}", fingerprint=pending.fingerprint, email=session.email,
                     user=session.user_id, route=pending.route, ssh_client=pending.client,
                     client=request.client_ip)
            body_html, page = ssh_signed_in(who, ident.look)
            return answers.answer(200, body_html, page, "ssh-sign-in-done")
        action = Action("Allow", SSH_SIGN_IN + ticket, "post", (("csrf", token),))
        body_html, page = confirm_ssh(who, pending.client, pending.fingerprint,
                                      pending.route, pending.login or "(none)", action,
                                      ident.look)
        return answers.answer(200, body_html, page, "ssh-sign-in-confirm")
