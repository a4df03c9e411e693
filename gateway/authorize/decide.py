"""The decision: ``decide(policy, caller, asked) -> Verdict``, and its facts.

Pure: no I/O, no cache, no clock of its own. Every entrance calls it (the HTTP
entrance ``http_requests.Decider``, the SSH entrance ``ssh_logins.AuthorizeSsh``, the
routes portal, ``gateway policy check`` through ``facts_of``), each describing what is
asked in one place (``http_asked``, ``ssh_asked``); the caches are the entrances'
business, around it. ``facts_of`` is the one place a caller and what they ask become
the policy's ``Facts``.

A caller that is missing, has no user id or has expired is decided as someone not signed
in: no criterion about the person matches them (``Caller.signed_in``).

    verdict = decide(route.policy, caller, http_asked(request, now))
    trace = route.policy.explain(facts_of(caller, asked))   # gateway policy check
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from gateway.authorize.caller import Caller
from gateway.mcp.messages import McpCall
from gateway.policy import CertFacts, Facts, Policy, Verdict
from gateway.policy.any_message import any_message_allowed
from gateway.policy.facts import is_session_keeping

# what policies see as the method of an SSH login
SSH_METHOD = "SSH"
# The methods requests use, as text without decoding each time.
_METHODS = {m.encode(): m for m in (
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE")}


@dataclass(slots=True)
class Asked:
    """What is asked, from where, when: the request's side of a decision. ``method``
    upper case (``CONNECT`` for tunnels, ``SSH`` for a login); ``path`` as routing sees
    it (empty for CONNECT and SSH); ``client_ip`` as the gateway determined it;
    ``client_cert`` a certificate the route verified; ``cors_preflight``; ``internal``:
    the gateway's own endpoints; ``ssh_username``: the login asked for (``None`` on
    HTTP); ``now``: epoch seconds; ``mcp``: the JSON-RPC message of an MCP route
    decided (``None`` for any other request: the MCP criteria are false). (Not frozen:
    one is made per decision.)"""

    now: float
    method: str = "GET"
    path: str = "/"
    client_ip: str = ""
    client_cert: CertFacts | None = None
    cors_preflight: bool = False
    internal: bool = False
    ssh_username: str | None = None
    mcp: McpCall | None = None


def decide(policy: Policy, caller: Caller | None, asked: Asked) -> Verdict:
    """Whether ``policy`` lets ``caller`` (``None``: nobody signed in) do what is
    ``asked``, and which rule and criterion decided."""
    return policy.evaluate(facts_of(caller, asked))


def decide_message(policy: Policy, caller: Caller | None, asked: Asked) -> Verdict:
    """One JSON-RPC message of an MCP route's request (``asked.mcp``) decided. One that
    only keeps the session (``is_session_keeping``: no method, ``initialize``, ``ping``,
    a notification) belongs to a signed-in person's session whatever they use it for:
    allowed when the policy lets them send some message on the route
    (``any_message_allowed``); every other message is decided as the rules say."""
    mcp = asked.mcp
    if mcp is not None and is_session_keeping(mcp.method) and caller is not None and \
            caller.signed_in(asked.now):
        return any_message_allowed(policy, facts_of(caller, asked))
    return decide(policy, caller, asked)


def facts_of(caller: Caller | None, asked: Asked) -> Facts:
    """The policy's facts for ``caller`` asking ``asked``: the one place they are made."""
    mcp = asked.mcp
    if caller is None or not caller.signed_in(asked.now):
        if mcp is not None:
            return Facts(method=asked.method, path=asked.path, client_ip=asked.client_ip,
                         client_cert=asked.client_cert, now=asked.now,
                         mcp_method=mcp.method, mcp_name=mcp.name)
        return Facts(method=asked.method, path=asked.path, client_ip=asked.client_ip,
                     client_cert=asked.client_cert, cors_preflight=asked.cors_preflight,
                     internal=asked.internal, ssh_username=asked.ssh_username,
                     now=asked.now)
    if mcp is not None:
        return Facts(authenticated=True, user_id=caller.user_id, provider=caller.provider,
                     email=caller.email, groups=caller.groups,
                     groups_available=caller.groups_available, claims=caller.claims,
                     method=asked.method, path=asked.path, client_ip=asked.client_ip,
                     client_cert=asked.client_cert, now=asked.now,
                     mcp_method=mcp.method, mcp_name=mcp.name)
    return Facts(authenticated=True, user_id=caller.user_id, provider=caller.provider,
                 email=caller.email,
                 groups=caller.groups, groups_available=caller.groups_available,
                 claims=caller.claims, method=asked.method, path=asked.path,
                 client_ip=asked.client_ip, client_cert=asked.client_cert,
                 cors_preflight=asked.cors_preflight, internal=asked.internal,
                 ssh_username=asked.ssh_username, now=asked.now)


def caller_facts(caller: Caller | None, now: float) -> Facts:
    """Who ``caller`` is at ``now``, with no request: what an entrance keeps beside a
    remembered decision (``gateway.policy.specialize`` decides with it)."""
    return facts_of(caller, Asked(now))


class HttpRequest(Protocol):
    """What of an HTTP request a decision reads (``gateway.authorize.hook.RequestInfo``)."""

    @property
    def method(self) -> bytes: ...
    @property
    def path(self) -> str: ...
    @property
    def headers(self) -> list[tuple[bytes, bytes]]: ...
    @property
    def client_ip(self) -> str: ...


def http_asked(request: HttpRequest, now: float, *, client_cert: CertFacts | None = None,
               internal: bool = False, path: str | None = None) -> Asked:
    """What an HTTP ``request`` (or CONNECT, or forward auth's) asks. ``path`` replaces
    the request's (forward auth decides the forwarded one)."""
    return Asked(now, method_text(request.method),
                 request.path if path is None else path, request.client_ip, client_cert,
                 is_cors_preflight(request.method, request.headers), internal)


def mcp_asked(asked: Asked, call: McpCall) -> Asked:
    """What one JSON-RPC message ``call`` of an MCP route's request asks: the HTTP
    request's ``asked`` with the message (a CORS preflight carries none)."""
    return replace(asked, mcp=call)


def ssh_asked(login: str, client_ip: str, now: float) -> Asked:
    """What an SSH login as ``login`` asks: no path, the method ``SSH`` (no
    ``http_method`` rule matches it)."""
    return Asked(now, SSH_METHOD, "", client_ip, ssh_username=login)


def is_cors_preflight(method: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    """``OPTIONS`` with non-empty ``Origin`` and ``Access-Control-Request-Method``.

    Exactly ``OPTIONS``: methods are case-sensitive (RFC 9110 9.1), and the decision
    caches skip exactly ``OPTIONS``; an ``options`` request (HTTP/2 lets one through)
    taken for a preflight would leave an allow for the session's next requests."""
    if method != b"OPTIONS":
        return False
    present = {name.lower() for name, value in headers if value.strip()}
    return b"origin" in present and b"access-control-request-method" in present


def method_text(method: bytes) -> str:
    """The method as ``http_method`` compares it: text, upper case (a lower-case
    ``delete`` is refused by a rule about ``DELETE``, not let past it)."""
    text = _METHODS.get(method)
    return text if text is not None else method.decode("latin-1").upper()
