"""The HTTP entrance: every request to a route that is not public, decided (the data
plane's ``Authorizer`` call, for the proxy and forward auth), per configuration snapshot.

The decision is ``decide.decide``: the route's compiled policy (its ``policy`` rules and
its allow fields, one engine for every route) over the caller (``Caller``: the session's
person as decisions see them, made once per session record and directory version,
``caller``) and what the request asks (``decide.http_asked``, built in ``_verdict``
only). Around it are the session's lookup, its fetch from another process or its token
refresh when needed, and caches that keep the answer while nothing it rests on changes
(a policy that reads the request, ``REQUEST_FACTS``, is asked again for every request):

- the decision per (session record, route, programmatic token or not), for
  ``DECISION_TTL`` (the record object changes when the session is refreshed or ended);
- a browser's next request to a route it was allowed on, per exact Cookie header and
  route (``_allowed_again``), answered without opening its cookie or deciding again (a
  policy that reads the request: specialised for the caller, ``policy.specialize``);
- the caller, per session record and directory version (``caller``).

A route with only the allow fields logs their codes (``allow_fields``). Sign-in is not
decided here: a request without a caller gets what ``SignIn`` answers (the authenticate
layer's redirect or 401), and tokens are refreshed through it.

A bearer token from an outside issuer (``Authorization: Bearer <JWT>``) on a route that
accepts a bearer provider is the caller instead of any session (``BearerTokens``: the
authenticate layer's ``bearer_callers``, which verifies it or answers the refusal); the
same ``decide`` decides, and its caller never gets a sign-in answer: denied is 403, a
token that expired is 401. Its ``Allow`` is remembered per (caller, route) while the
policy does not read the request.

A request to an MCP route carries its JSON-RPC messages (``RequestInfo.mcp``): whoever the
caller is (a session's, a bearer token's, an MCP client's token), ``decide_caller`` then
decides each message (``_decide_mcp``), never from a cache, and answers a refusal as the
JSON-RPC errors of ``gateway.mcp.errors`` instead of the 403 page.

A route with ``mcp`` takes only the tokens the gateway issued its MCP clients
(``McpTokens``: ``gateway.mcp_oauth.resource_server``): the grant's session is the
caller, with the client's id; no token or a bad one is the RFC 9728 challenge (401),
never a sign-in redirect; the token never goes upstream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authorize import allow_fields, answers
from gateway.authorize.answers import denial_message
from gateway.authorize.assertion import AssertionSigner, claim_headers
from gateway.authorize.caller import Caller, caller_of
from gateway.authorize.certificates import presented_cert
from gateway.authorize.decide import (
    Asked,
    caller_facts,
    decide,
    decide_message,
    http_asked,
    mcp_asked,
    method_text,
)
from gateway.authorize.email import REFUSAL_TEXT
from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.caches import FifoCache
from gateway.config.routes import Route
from gateway.config.snapshot import Snapshot
from gateway.mcp.errors import JSON_HEADERS, denied_answer
from gateway.mcp.messages import McpCall, McpVerdict
from gateway.observability.request_metrics import route_label
from gateway.observability.tracing.active import start_child
from gateway.pages.layout import Action, look_of
from gateway.pages.rules import admits
from gateway.policy import CLIENT_CERT, CertFacts, Specialized, Verdict, specialize
from gateway.policy.unsigned import admits_without_sign_in
from gateway.sessions.lookup import COOKIE_CACHE, SessionLookup, cookie_and_authorization
from gateway.sessions.model import Session
from gateway.sessions.store import DirectoryGroups, SessionStore

log = Logger()
DECISION_CACHE = 20_000
DECISION_TTL = 30.0  # well inside the assertion's reuse window


class SignIn(Protocol):
    """What deciding needs from sign-in (``gateway.authenticate.sign_in.SignInFlow``)."""

    def sign_in_answer(self, request: RequestInfo, route: Route | None = None) -> Reply:
        """No session: a redirect to sign in (browsers) or 401."""
        ...

    def accepted(self, route: Route) -> tuple[str, ...]:
        """The identity providers whose sessions ``route`` accepts."""
        ...

    def refused_provider(self, request: RequestInfo, route: Route, session: Session) -> Reply:
        """A session of a provider ``route`` does not accept, where the policy needs
        someone signed in: the page offering the ones it does."""
        ...

    def switch_action(self, request: RequestInfo, uri: str = "") -> Action | None: ...

    def refresh_due(self, session: Session) -> float:
        """When the session's tokens must be refreshed (infinity: never)."""
        ...

    def refresh(self, session: Session) -> Awaitable[Session | None]: ...


class BearerTokens(Protocol):
    """Outside bearer tokens (``gateway.authenticate.bearer_callers.BearerCallers``)."""

    def of(self, route: Route) -> tuple[object, ...]:
        """The bearer providers ``route`` accepts (empty: none)."""
        ...

    def caller(self, request: RequestInfo, route: Route, raw_cookie: bytes
               ) -> Caller | Reply | None:
        """The verified token's caller, the answer refusing it, or ``None``: no token."""
        ...

    def expired(self, request: RequestInfo, caller: Caller) -> Reply: ...

    def offered(self, request: RequestInfo) -> Reply | None:
        """A route taking no bearer token would answer sign-in: 401 when one is offered."""
        ...

    def challenge(self, route: Route, answer: Reply) -> Reply:
        """The sign-in answer of a route that accepts bearer tokens, with the Bearer
        challenge when it is a 401."""
        ...

    def counted(self, provider: str, result: str) -> None: ...


class McpHolder(Protocol):
    """Who holds an MCP client's good token: the grant's session and client."""

    @property
    def session_id(self) -> str: ...

    @property
    def client_id(self) -> str: ...


class McpTokens(Protocol):
    """MCP clients' tokens (``gateway.mcp_oauth.resource_server.McpResourceServer``)."""

    def holder(self, request: RequestInfo, route: Route
               ) -> McpHolder | Reply | Deferred[McpHolder | Reply | None] | None:
        """The grant behind the request's token, the 401 refusing it, or ``None``: no
        credential at all."""
        ...

    def challenge(self, request: RequestInfo, route: Route) -> Reply:
        """401 with the RFC 9728 challenge: nobody, where the policy needs someone."""
        ...

    def refused(self, request: RequestInfo, route: Route, description: str) -> Reply:
        """401 ``invalid_token``."""
        ...


class Decided(NamedTuple):
    """A decision remembered per (session, route, token): ``decide_caller``."""

    caller: Caller  # who the decision saw (``caller``: one object per record)
    until: float
    allow: Allow


class Remembered(NamedTuple):
    """An allow remembered per (Cookie header, route): ``_allowed_again``."""

    sid: str
    session: Session  # the record (not the view): ``store.get`` returns this object
    until: float
    allow: Allow
    directory_version: int
    # the route's policy for the person the decision saw, when it reads the request and
    # so decides again
    judge: Specialized | None


class Known(NamedTuple):
    """The caller a session record is, per directory version: ``caller``."""

    record: Session
    directory_version: int
    caller: Caller


class Decider:
    """The HTTP entrance: the per-snapshot ``Authorizer.authorize`` (the proxy's and
    forward auth's); one per ``Identity``. It also makes the caller a session is for
    the SSH entrance (``caller``, ``renewed``)."""

    def __init__(self, snapshot: Snapshot, sessions: SessionLookup, store: SessionStore,
                 signer: AssertionSigner, sign_in: SignIn, clock: Callable[[], float],
                 directory: DirectoryGroups | None = None,
                 bearer: BearerTokens | None = None, mcp: McpTokens | None = None
                 ) -> None:
        o = snapshot.options
        self.options = o
        self.look = look_of(o)
        self.sessions = sessions
        self.store = store
        self.signer = signer
        self.sign_in = sign_in
        self.clock = clock
        self.directory = directory
        self.groups_available = bool(o.idp_service_account)
        self.allow_unverified_email = o.idp_allow_unverified_email
        # (session id, route index, programmatic token): ``decide_caller``
        self._decisions: FifoCache[tuple[str, int, bool], Decided] = \
            FifoCache(DECISION_CACHE)
        # (Cookie header, route index): ``_allowed_again``
        self._allowed: FifoCache[tuple[bytes, int], Remembered] = FifoCache(COOKIE_CACHE)
        self._callers: FifoCache[str, Known] = FifoCache(DECISION_CACHE)
        self._refusals_logged: set[str] = set()
        self.bearer = bearer
        # (id of a bearer caller, route index): ``_bearer_decide`` (the caller is kept in
        # the value, so its id is not reused while the entry is here)
        self._bearer_allowed: FifoCache[tuple[int, int], Decided] = \
            FifoCache(DECISION_CACHE)
        self.mcp = mcp
        # (session id, client id): ``_mcp_caller``
        self._mcp_callers: FifoCache[tuple[str, str], tuple[Caller, Caller]] = \
            FifoCache(DECISION_CACHE)
        # route index -> whether its policy may let in someone not signed in
        # (``_admit_mcp``)
        self._admits_unsigned: dict[int, bool] = {}

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        if route.mcp is not None and self.mcp is not None:
            return self._mcp_authorize(request, route, self.mcp)
        raw, authorization = cookie_and_authorization(request.headers)
        if authorization and self.bearer is not None and self.bearer.of(route):
            found = self.bearer.caller(request, route, raw)
            if found is not None:
                if isinstance(found, Reply):
                    return found
                return self._bearer_decide(request, route, found)
        span = start_child("session lookup", client=False)  # None unless traced
        if span is None and raw and not authorization and request.mcp is None:
            allowed = self._allowed_again(request, route, raw)
            if allowed is not None:
                return allowed
        session, sid, token = self.sessions.find(request.headers, raw, authorization)
        if span is not None:
            span.set("gateway.session.found", session is not None)
            span.set("gateway.session.fetch", session is None and bool(sid)
                     and self.store.needs_fetch)
            span.end()
        own_token = bool(token)
        if session is None and sid and self.store.needs_fetch:
            # A session another process created, or this one has not read yet.
            return ensureDeferred(self._fetch_then_decide(request, route, sid, own_token))
        if session is not None and self._due_for_refresh(session):
            return ensureDeferred(self._refresh_then_decide(request, route, session,
                                                            own_token))
        decision = self._decide(request, route, session, own_token)
        if session is not None and sid and not own_token and isinstance(decision, Allow):
            self._remember_allowed(request, route, raw, sid, session, decision)
        return decision

    def _due_for_refresh(self, session: Session) -> bool:
        return self.sign_in.refresh_due(session) <= self.clock()

    async def renewed(self, session: Session, now: float) -> Session | None:
        """``session`` with new tokens when they are due at ``now`` (``None``: the
        refresh failed, which ended it), else ``session`` itself: what another entrance
        (SSH's, for an open connection) asks before deciding again."""
        if self.sign_in.refresh_due(session) > now:
            return session
        return await self.sign_in.refresh(session)

    def _allowed_again(self, request: RequestInfo, route: Route, raw: bytes) -> Allow | None:
        """The decision remembered for this exact Cookie header ``raw`` on this route,
        while nothing it rests on has changed: the session record is the same object (not
        ended, refreshed or replaced), and neither the cookie, the session, the tokens
        (refresh) nor the decision cache has expired. (Requests with an Authorization
        header take the full path: it may be a programmatic token.)"""
        if request.method == b"OPTIONS":
            return None
        hit = self._allowed.get((raw, route.index))
        if hit is None:
            return None
        now = self.clock()
        if now < hit.until and self.store.get(hit.sid) is hit.session and (
                self.directory is None or self.directory.version == hit.directory_version):
            judge = hit.judge
            if judge is None:
                return hit.allow
            # the identity is the same; the request is another: its policy, specialised
            # for the caller, decides again on what the request asks, as ``http_asked``
            # has it but passed as arguments (no value made on the remembered path);
            # not a CORS preflight: an OPTIONS request, the only kind one is, never
            # comes here
            verdict = judge.decide(method_text(request.method), request.path,
                                   request.client_ip,
                                   self._cert(request) if request.client_cert else None,
                                   False, now)
            if verdict.allowed:
                return self._with_reason(hit.allow, verdict)
        return None

    def _remember_allowed(self, request: RequestInfo, route: Route, raw: bytes, sid: str,
                          session: Session, allow: Allow) -> None:
        """Keep ``allow`` for ``_allowed_again``, valid as long as each thing that made
        the full path answer it is: the cookie's seal, the session, the tokens before
        their refresh, the decision cache's entry."""
        if request.method == b"OPTIONS":
            return
        # (a header too long to cache has no remembered token: nothing is kept for it)
        sealed_until = self.sessions.cookie_sealed_until(raw, sid)
        decided = self._decisions.get((session.id, route.index, False))
        if sealed_until is None or decided is None or decided.allow is not allow:
            return
        until = min(sealed_until, decided.until, session.expires_at,
                    self.sign_in.refresh_due(session))
        version = self.directory.version if self.directory is not None else 0
        judge = None
        if route.policy_document is not None and route.policy.per_request:
            judge = specialize(route.policy, caller_facts(decided.caller, self.clock()))
        self._allowed.put((raw, route.index),
                          Remembered(sid, session, until, allow, version, judge))

    async def _fetch_then_decide(self, request: RequestInfo, route: Route, sid: str,
                                 own_token: bool) -> Decision:
        try:
            session = await self.store.fetch(sid)
        except Exception as exc:  # storage down or unreadable: never a false "allowed"
            log.error("session storage unavailable: {error}", error=str(exc))
            return self.error(503, "Sessions cannot be read right now; try again shortly.",
                              request.headers, "session-storage-unavailable")
        if session is not None and not session.valid(self.clock()):
            session = None
        if session is not None and self._due_for_refresh(session):
            return await self._refresh_then_decide(request, route, session, own_token)
        return self._decide(request, route, session, own_token)

    async def _refresh_then_decide(self, request: RequestInfo, route: Route,
                                   session: Session, own_token: bool) -> Decision:
        refreshed = await self.sign_in.refresh(session)
        return self._decide(request, route, refreshed, own_token)

    def caller(self, session: Session) -> Caller:
        """The session's person as every decision and what it hands on see them
        (``caller_of``: no e-mail the provider did not vouch for, the directory's groups
        when ``idp_service_account`` describes a directory).

        One object per session record and directory version, so that decision caches
        keyed on the object see a change of either. A refused e-mail is logged once per
        session."""
        version = self.directory.version if self.directory is not None else 0
        hit = self._callers.get(session.id)
        if hit is not None and hit.record is session and hit.directory_version == version:
            return hit.caller
        caller = caller_of(session, allow_unverified_email=self.allow_unverified_email,
                           groups_available=self.groups_available, directory=self.directory)
        refusal = caller.email_refusal
        if refusal and session.id not in self._refusals_logged:
            if len(self._refusals_logged) >= DECISION_CACHE:
                self._refusals_logged.clear()
            self._refusals_logged.add(session.id)
            log.warn("the e-mail {claimed!r} of user {user_id} is not used for access "
                     "decisions: {why} ({reason}); rules that need an e-mail address do "
                     "not match", claimed=session.email, user_id=session.user_id,
                     why=REFUSAL_TEXT[refusal], reason=refusal)
        self._callers.put(session.id, Known(session, version, caller))
        return caller

    def _decide(self, request: RequestInfo, route: Route, session: Session | None,
                own_token: bool) -> Decision:
        """``own_token``: the request carries a programmatic token (``Authorization:
        Gateway``), which the upstream must not see."""
        if session is not None and session.provider not in self.sign_in.accepted(route):
            return self._other_provider(request, route, session, own_token)
        caller = self.caller(session) if session is not None else None
        return self.decide_caller(request, route, caller, own_token, self.clock())

    def _other_provider(self, request: RequestInfo, route: Route, session: Session,
                        own_token: bool) -> Decision:
        """A session of a provider the route does not accept is no one here: let in
        only as someone not signed in would be; where that needs sign-in, the page
        offering the accepted providers (a sign-in redirect would come straight back)."""
        now = self.clock()
        if session.valid(now) and not self._verdict(request, route, None, now).allowed:
            return self.sign_in.refused_provider(request, route, session)
        return self.decide_caller(request, route, None, own_token, now)

    def decide_caller(self, request: RequestInfo, route: Route, caller: Caller | None,
                      own_token: bool, now: float) -> Decision:
        """``decide`` for ``caller`` (a session's, or one with no session behind it:
        issue 42's bearer tokens come in here), its answer remembered per session: the
        identity headers per (session record, route); the verdict too unless the policy
        reads the request (method, path, address, certificate, clock), when it is made
        again for each request. A caller with no session is decided on every request
        (its assertion is still the signer's, cached per caller). Nobody signed in gets
        ``SignIn``'s answer; someone refused, the 403 page. A route with only the allow
        fields names their codes (``allow_fields``) in the log. ``own_token``: the
        request's ``Authorization`` is the caller's credential, which the upstream must
        not see."""
        if request.mcp is not None:
            return self._decide_mcp(request, route, caller, own_token, now)
        key: tuple[str, int, bool] | None = None
        hit: Decided | None = None
        if caller is not None and caller.session_id and request.method != b"OPTIONS":
            key = (caller.session_id, route.index, own_token)
            hit = self._decisions.get(key)
            if hit is not None and (hit.caller is not caller or now >= hit.until):
                hit = None
            if hit is not None and not route.policy.per_request:
                return hit.allow
        verdict = self._verdict(request, route, caller, now)
        if verdict.allowed:
            if hit is not None:
                return self._with_reason(hit.allow, verdict)
            reason = (verdict.reason if route.policy_document is not None
                      else allow_fields.allowed_code(verdict))
            allow = self._allow(route, caller, own_token, reason)
            if key is not None and caller is not None:
                self._decisions.put(key, Decided(caller, now + DECISION_TTL, allow))
            return allow
        if caller is None or not caller.signed_in(now):
            bearer = self.bearer
            if bearer is None:
                return self.sign_in.sign_in_answer(request, route)
            return bearer.offered(request) or bearer.challenge(
                route, self.sign_in.sign_in_answer(request, route))
        if route.policy_document is None:
            return self._denied(request, route, caller, allow_fields.refused_codes(
                route, self.groups_available, caller.email_refusal))
        return self._denied(request, route, caller, (verdict.reason,), verdict)

    def _bearer_decide(self, request: RequestInfo, route: Route, caller: Caller
                       ) -> Decision:
        """``decide`` for a verified bearer token's ``caller``: the same policy, the
        same ``Allow`` (its assertion and claim headers naming the provider), without
        the token unless the route passes it (``pass_bearer_token``). Never a sign-in
        answer: denied is 403, a token past its ``exp`` (within the clock skew the
        verifier allows) that the policy does not let in as no one is 401."""
        bearer = self.bearer
        assert bearer is not None
        now = self.clock()
        if request.mcp is not None:
            return self._decide_mcp(request, route, caller, not route.pass_bearer_token, now,
                                    bearer=True)
        key = (id(caller), route.index)
        hit = self._bearer_allowed.get(key)
        if hit is not None and hit.caller is caller and now < hit.until:
            bearer.counted(caller.provider, "allowed")
            return hit.allow
        verdict = self._verdict(request, route, caller, now)
        if verdict.allowed:
            reason = (verdict.reason if route.policy_document is not None
                      else allow_fields.allowed_code(verdict))
            allow = self._allow(route, caller, not route.pass_bearer_token, reason)
            if not route.policy.per_request and request.method != b"OPTIONS" and \
                    caller.signed_in(now):
                self._bearer_allowed.put(key, Decided(
                    caller, min(now + DECISION_TTL, caller.expires_at), allow))
            bearer.counted(caller.provider, "allowed")
            return allow
        if not caller.signed_in(now):
            return bearer.expired(request, caller)
        bearer.counted(caller.provider, "denied")
        reasons = (allow_fields.refused_codes(route, True, caller.email_refusal)
                   if route.policy_document is None else (verdict.reason,))
        return self._denied(request, route, caller, reasons,
                            verdict if route.policy_document is not None else None,
                            bearer=True)

    def _decide_mcp(self, request: RequestInfo, route: Route, caller: Caller | None,
                    own_token: bool, now: float, *, bearer: bool = False) -> Decision:
        """Each JSON-RPC message of an MCP route's request decided for ``caller``, as
        the HTTP request it came in with and the message (``mcp_asked``): allowed when
        every one is (its ``Allow`` naming each verdict); otherwise, for someone signed
        in, the JSON-RPC errors refusing the whole request (``denied_answer``: nothing
        of it is forwarded), and for nobody the sign-in answer (a bearer token's caller
        past its expiry: 401). Never cached: the messages differ from request to
        request."""
        mcp = request.mcp
        assert mcp is not None
        if not mcp.calls:
            return self._admit_mcp(request, route, caller, now, bearer=bearer)
        cert = self._cert(request) if CLIENT_CERT in route.policy.reads else None
        asked = http_asked(request, now, client_cert=cert)
        verdicts = tuple(self._mcp_verdict(route, caller, asked, call) for call in mcp.calls)
        refused = [v for v in verdicts if not v.allowed]
        if not refused:
            reason = "; ".join(dict.fromkeys(r for v in verdicts for r in v.reasons))
            allow = self._allow(route, caller, own_token, reason)
            return replace(allow, mcp=verdicts)
        if caller is None or not caller.signed_in(now):
            if bearer and caller is not None and self.bearer is not None:
                return self.bearer.expired(request, caller)
            answer = self.sign_in.sign_in_answer(request, route)
            if self.bearer is not None and not bearer:
                answer = self.bearer.offered(request) or self.bearer.challenge(route, answer)
            return replace(answer, mcp=verdicts)
        if bearer and self.bearer is not None:
            self.bearer.counted(caller.provider, "denied")
        text = "; ".join(dict.fromkeys(r for v in refused for r in v.reasons))
        log.info("MCP request denied on {host}{path} for {user}: {methods}: {reasons}",
                 host=request.host, path=request.path, user=caller.who,
                 methods=", ".join(f"{v.call.method} {v.call.name}".strip() for v in refused),
                 reasons=text, user_id=caller.user_id, provider=caller.provider,
                 route=route_label(route), client=request.client_ip)
        status, body = denied_answer(mcp, verdicts)
        return Reply(status, body, JSON_HEADERS, f"denied: {text}", caller, mcp=verdicts)

    def _admit_mcp(self, request: RequestInfo, route: Route, caller: Caller | None,
                   now: float, *, bearer: bool) -> Decision:
        """Whether anyone asking as ``caller`` may send MCP messages to the route at all,
        asked before its body is read (a request with no message): someone signed in
        may (each message is decided once the body is read), and so may nobody where
        the policy can let in someone not signed in; anyone else gets the sign-in
        answer now, before the gateway reads and parses up to ``max_request_bytes``
        for them. The ``Allow`` only lets the body be read: it carries nothing
        upstream."""
        if caller is not None and caller.signed_in(now):
            return Allow(caller=caller, reason="mcp-admitted")
        if bearer and caller is not None and self.bearer is not None:
            return self.bearer.expired(request, caller)
        admits = self._admits_unsigned.get(route.index)
        if admits is None:
            admits = self._admits_unsigned[route.index] = bool(
                admits_without_sign_in(route.policy))
        if admits:
            return Allow(reason="mcp-admitted")
        answer = self.sign_in.sign_in_answer(request, route)
        if self.bearer is not None and not bearer:
            answer = self.bearer.offered(request) or self.bearer.challenge(route, answer)
        return answer

    def _mcp_verdict(self, route: Route, caller: Caller | None, asked: Asked,
                     call: McpCall) -> McpVerdict:
        """One message decided (``decide_message``: one that only keeps the session is
        the person's whatever they use it for), with the reasons the log names."""
        verdict = decide_message(route.policy, caller, mcp_asked(asked, call))
        if route.policy_document is not None:
            reasons: tuple[str, ...] = (verdict.reason,)
        elif verdict.allowed:
            reasons = (allow_fields.allowed_code(verdict),)
        else:
            reasons = allow_fields.refused_codes(route, self.groups_available,
                                                 caller.email_refusal if caller else "")
        return McpVerdict(call, verdict.allowed, verdict.rule, reasons)

    def _mcp_authorize(self, request: RequestInfo, route: Route, mcp: McpTokens
                       ) -> Decision | Deferred[Decision]:
        """An MCP route: the client's token is the only credential (the cookie and
        other tokens are not looked at)."""
        found = mcp.holder(request, route)
        if isinstance(found, Deferred):
            return found.addCallback(lambda f: self._mcp_holder(request, route, mcp, f))
        return self._mcp_holder(request, route, mcp, found)

    def _mcp_holder(self, request: RequestInfo, route: Route, mcp: McpTokens,
                    found: McpHolder | Reply | None) -> Decision | Deferred[Decision]:
        if isinstance(found, Reply):
            return found
        if found is None:
            # decided as no one (each message, when it carries some); refused: the
            # challenge, never a sign-in answer (keeping the messages' verdicts)
            decision = self.decide_caller(request, route, None, False, self.clock())
            if isinstance(decision, Allow):
                return decision
            return replace(mcp.challenge(request, route), mcp=decision.mcp)
        session = self.store.get(found.session_id)
        if session is None and self.store.needs_fetch:
            async def fetched() -> Decision:
                try:
                    read = await self.store.fetch(found.session_id)
                except Exception as exc:  # never a false "allowed"
                    log.error("session storage unavailable: {error}", error=str(exc))
                    return self.error(503, "Sessions cannot be read right now; try again "
                                      "shortly.", request.headers,
                                      "session-storage-unavailable")
                result = self._mcp_session(request, route, mcp, read, found.client_id)
                return await result if isinstance(result, Deferred) else result
            return ensureDeferred(fetched())
        return self._mcp_session(request, route, mcp, session, found.client_id)

    def _mcp_session(self, request: RequestInfo, route: Route, mcp: McpTokens,
                     session: Session | None, client_id: str
                     ) -> Decision | Deferred[Decision]:
        """The token's grant rests on ``session``: ended (sign-out, back-channel logout,
        expiry, revocation) is an invalid token; its tokens at the provider refreshed
        when due, as for a browser."""
        now = self.clock()
        if session is None or not session.valid(now):
            return mcp.refused(request, route, "the sign-in behind this token has ended")
        if session.provider not in self.sign_in.accepted(route):
            return mcp.refused(request, route, "the sign-in behind this token is not one "
                               "this route accepts")
        if self._due_for_refresh(session):
            async def refreshed() -> Decision:
                renewed = await self.sign_in.refresh(session)
                result = self._mcp_session(request, route, mcp, renewed, client_id)
                return await result if isinstance(result, Deferred) else result
            return ensureDeferred(refreshed())
        caller = self._mcp_caller(session, client_id)
        return self.decide_caller(request, route, caller, True, now)

    def _mcp_caller(self, session: Session, client_id: str) -> Caller:
        """The session's caller with the client acting for the person: one object per
        session caller and client (decision caches compare callers by identity)."""
        person = self.caller(session)
        key = (session.id, client_id)
        hit = self._mcp_callers.get(key)
        if hit is not None and hit[0] is person:
            return hit[1]
        caller = replace(person, client_id=client_id)
        self._mcp_callers.put(key, (person, caller))
        return caller

    def _verdict(self, request: RequestInfo, route: Route, caller: Caller | None,
                 now: float) -> Verdict:
        """The route's policy on this request, for ``caller``: what the request asks is
        described here, and only here."""
        cert = self._cert(request) if CLIENT_CERT in route.policy.reads else None
        return decide(route.policy, caller, http_asked(request, now, client_cert=cert))

    @staticmethod
    def _cert(request: RequestInfo) -> CertFacts | None:
        return presented_cert(request.client_cert)

    @staticmethod
    def _with_reason(allow: Allow, verdict: Verdict) -> Allow:
        """``allow`` (its identity headers made once) naming the rule that let this
        request in (a policy reading the request may match another rule each time)."""
        reason = verdict.reason
        return allow if allow.reason == reason else replace(allow, reason=reason)

    def _denied(self, request: RequestInfo, route: Route, caller: Caller,
                reasons: tuple[str, ...], verdict: Verdict | None = None, *,
                bearer: bool = False) -> Reply:
        """403. ``bearer``: the caller is a bearer token's, to whom signing in as
        someone else means nothing (no actions offered)."""
        text = ", ".join(reasons)
        who = caller.who
        log.info("access denied to {host}{path} for {user}: {reasons}", host=request.host,
                 path=request.path, user=who, reasons=text, user_id=caller.user_id,
                 provider=caller.provider, route=route_label(route),
                 client=request.client_ip)
        message = denial_message(who, reasons, caller.email_refusal, caller.claimed_email,
                                 verdict)
        actions = () if bearer else tuple(
            a for a in (self.sign_in.switch_action(request),
                        Action("Who am I?", "/.gateway/", "get", primary=False))
            if a is not None)
        denied = self.error(403, message, request.headers, f"denied: {text}", who=who,
                            admits=admits(route, self.groups_available),
                            actions=actions, host=request.host)
        return replace(denied, caller=caller)

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str, extra: tuple[tuple[bytes, bytes], ...] = (), **more: Any) -> Reply:
        """An error page of the family with this snapshot's look."""
        return answers.error(status, message, headers, reason, extra, look=self.look,
                             **more)

    def _allow(self, route: Route, caller: Caller | None, own_token: bool,
               reason: str = "") -> Allow:
        headers: list[tuple[bytes, bytes]] = []
        if route.pass_identity_headers and caller is not None:
            headers.append((b"x-gateway-jwt-assertion",
                            self.signer.sign(caller, route.host).encode()))
            headers.extend(claim_headers(self.options.jwt_claims_headers, caller))
        return Allow(tuple(headers), frozenset({b"authorization"}) if own_token
                     else frozenset(), strip_cookie=self.options.cookie_name, reason=reason,
                     caller=caller)
