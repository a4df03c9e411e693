"""What the MCP authorization server (``gateway.mcp_oauth.server``) needs of sign-in,
from the snapshot's ``Identity``: the request's session, the sign-in answer of a
route, the person's caller as decisions see them, the CSRF token of their forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred

from gateway.authorize.caller import Caller
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.sessions.model import Session

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity


class McpPeople:
    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.look = identity.look

    def with_session(self, request: RequestInfo,
                     answer: Callable[[Session | None], Decision | Deferred[Decision]]
                     ) -> Decision | Deferred[Decision]:
        return self.identity.with_session(request, answer)

    def sign_in_answer(self, request: RequestInfo, route: Route) -> Reply:
        return self.identity.flow.sign_in_answer(request, route)

    def accepted(self, route: Route) -> tuple[str, ...]:
        return self.identity.flow.accepted(route)

    def refused_provider(self, request: RequestInfo, route: Route, session: Session
                         ) -> Reply:
        return self.identity.flow.refused_provider(request, route, session)

    def caller(self, session: Session) -> Caller:
        return self.identity.decider.caller(session)

    def csrf_token(self, session: Session) -> str:
        return self.identity.csrf_token(session)

    async def session_of(self, session_id: str) -> Session | None:
        """The session as the store holds it now (``None``: ended or expired)."""
        store = self.identity.store
        session = store.get(session_id)
        if session is None and store.needs_fetch:
            session = await store.fetch(session_id)
        if session is not None and not session.valid(self.identity.clock()):
            return None
        return session

    def error(self, status: int, message: str, headers: list[tuple[bytes, bytes]],
              reason: str) -> Reply:
        return self.identity.error(status, message, headers, reason)
