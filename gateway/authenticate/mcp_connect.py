"""``/.gateway/mcp/connect/callback`` on an MCP route's host: where a route's upstream
authorization server sends the person back after they authorized it (the upstream
token vault, ``gateway.mcp_oauth.upstream``). The consent flow sent them there
(``UpstreamVault.connect_step``); here the code becomes tokens for the person's own
session only, and the flow goes on where it left off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate.targets import query_params
from gateway.authorize import answers
from gateway.authorize.hook import Decision, RequestInfo
from gateway.config.routes import Route
from gateway.mcp_oauth.upstream import CALLBACK_PATH, ConnectRefused, UpstreamVault
from gateway.mcp_oauth.upstream.oauth import UpstreamUnavailable
from gateway.sessions.model import Session

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity

log = Logger()

__all__ = ["CALLBACK_PATH", "McpConnect"]


class McpConnect:
    def __init__(self, identity: Identity, vault: UpstreamVault,
                 routes: tuple[Route, ...]) -> None:
        self.identity = identity
        self.vault = vault
        self.routes = tuple(r for r in routes
                            if r.mcp is not None and r.mcp.upstream_oauth2 is not None)

    def answer(self, request: RequestInfo) -> Decision | Deferred[Decision]:
        def signed_in(session: Session | None) -> Decision | Deferred[Decision]:
            if session is None:
                return self._error(401, "Your session ended before the upstream answered. "
                                   "Connect again from your MCP client.", request,
                                   "mcp-connect-no-session")
            return ensureDeferred(self._answer(request, session))
        return self.identity.with_session(request, signed_in)

    def _error(self, status: int, message: str, request: RequestInfo,
               reason: str) -> Decision:
        return answers.error(status, message, request.headers, reason,
                             look=self.identity.look)

    async def _answer(self, request: RequestInfo, session: Session) -> Decision:
        try:
            target = await self.vault.callback(self.routes, session.provider,
                                               session.user_id, session.id,
                                               query_params(request))
        except ConnectRefused as exc:
            return self._error(400, str(exc), request, "mcp-connect-refused")
        except UpstreamUnavailable as exc:
            log.warn("MCP upstream authorization: the upstream is unavailable: {why}",
                     why=str(exc))
            return self._error(503, "The upstream cannot be reached right now; try again "
                               "shortly.", request, "mcp-upstream-unavailable")
        return answers.redirect(target)
