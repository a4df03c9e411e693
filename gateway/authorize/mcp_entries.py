"""The decision on each entry of an MCP list result: would the route's policy let this
caller make the call that uses it (a tool as ``tools/call`` of its name, a prompt as
``prompts/get``, a resource as ``resources/read`` of its URI)?

The pure ``decide_message`` the calls themselves are decided with, on what the request
asked (``decide.http_asked``: its method, path, address and verified client certificate)
and the entry's call as the MCP facts (``entry_asked``): a list is filtered by the very
rules that decide the calls. Decisions are remembered for the response (a stream may
list the same entries more than once).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.authorize.caller import Caller
from gateway.authorize.certificates import presented_cert
from gateway.authorize.decide import Asked, decide_message, http_asked, mcp_asked
from gateway.authorize.hook import RequestInfo
from gateway.config.routes import Route
from gateway.mcp.messages import McpCall
from gateway.policy import CLIENT_CERT

Allowed = Callable[[str, str], bool]


def entry_asked(asked: Asked, method: str, name: str) -> Asked:
    """What the request asked, as the call ``method`` about ``name`` would ask it."""
    return mcp_asked(asked, McpCall(None, method, name))


def entry_predicate(route: Route, caller: Caller | None, request: RequestInfo,
                    now: float) -> Allowed:
    """``allowed(method, name)`` for entries of a list answered on ``route`` to
    ``caller``'s ``request``."""
    cert = presented_cert(request.client_cert) if CLIENT_CERT in route.policy.reads else None
    asked = http_asked(request, now, client_cert=cert)
    policy = route.policy
    known: dict[tuple[str, str], bool] = {}

    def allowed(method: str, name: str) -> bool:
        key = (method, name)
        answer = known.get(key)
        if answer is None:
            answer = known[key] = decide_message(policy, caller,
                                                 entry_asked(asked, method, name)).allowed
        return answer

    return allowed
