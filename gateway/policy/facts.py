"""What a policy decision may look at: who (as decisions see them), which request, when.

Built once per decision (``gateway.authorize.decide.facts_of`` builds it from who is
asking and what they ask), so its constructor does the little normalising there is: the
e-mail lower-cased and its domain taken once, instead of in every criterion.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

NO_CLAIMS: Mapping[str, tuple[str, ...]] = MappingProxyType({})
# The MCP methods a session needs whatever tools it may call: connecting (2026-07-28:
# ``server/discover``, which every server MUST answer and a client sends first), keeping
# alive, its notifications, the lists (whose results are filtered entry by entry), the
# 2026-07-28 change stream, and ``""`` (no method: a client's response, or the
# body-less GET and DELETE of the 2025 transports; for a signed-in person those are
# decided by ``any_message`` instead). ``mcp_tool`` does not stand in
# their way (``predicates``).
MCP_HOUSEKEEPING = frozenset({
    "", "initialize", "server/discover", "ping", "tools/list", "prompts/list",
    "resources/list", "resources/templates/list", "subscriptions/listen"})


# The MCP messages that only keep a session: connecting, keeping alive, notifications,
# and ``""`` (no method). They belong to the person's session whatever they use it for,
# so a signed-in person's are decided by ``any_message`` (allowed when the policy lets the
# person send some message on the route), not against the rules as written: a rule of
# ``mcp_method: {in: [tools/call, tools/list]}`` lets its people connect too.
MCP_SESSION_KEEPING = frozenset({"", "initialize", "server/discover", "ping"})


def is_session_keeping(method: str) -> bool:
    """Whether the MCP ``method`` only keeps a session (``MCP_SESSION_KEEPING``, and every
    notification)."""
    return method in MCP_SESSION_KEEPING or method.startswith("notifications/")


def is_housekeeping(method: str) -> bool:
    """Whether the MCP ``method`` is one every session needs (``MCP_HOUSEKEEPING``, and
    every notification)."""
    return method in MCP_HOUSEKEEPING or method.startswith("notifications/")


@dataclass(frozen=True, slots=True)
class CertFacts:
    """The client certificate the connection presented (verified against the route's or
    the listener's CA by the TLS layer)."""

    fingerprint: str  # SHA-256 of the DER, lower-case hex
    spki_hash: str  # SHA-256 of the SubjectPublicKeyInfo, base64
    san_email: tuple[str, ...] = ()
    san_dns: tuple[str, ...] = ()
    san_uri: tuple[str, ...] = ()


class Facts:
    """One decision's inputs.

    Identity (all empty unless ``authenticated``): ``user_id``; ``provider``, the id of
    the identity provider the person signed in (or their token came) through; ``email``,
    the address usable for decisions (``gateway.authorize.caller.Caller.email``; ``""``
    when there is none or it was refused), lower-cased here, and its ``domain``;
    ``groups`` and whether group data
    exists at all (``groups_available``); ``claims`` flattened as
    ``gateway.authorize.claims.flatten_claims`` gives them.

    Request: ``method`` (upper case; ``CONNECT`` for tunnels), ``path`` (normalised, as
    routing sees it; empty for CONNECT), ``client_ip`` (as the gateway determined it;
    text that is no address matches no ``source_ip``), ``client_cert``, whether it is a
    CORS preflight, whether it is for the gateway's own endpoints (``internal``), the
    SSH user name asked for (``None`` on HTTP). ``now``: epoch seconds.

    MCP (one JSON-RPC message of a request to an MCP route; ``None`` for any other
    request): ``mcp_method``, its method; ``mcp_tool``, the tool a ``tools/call`` names
    (``None`` for every other method); ``mcp_housekeeping``, whether the method is one
    every MCP session needs (``is_housekeeping``).
    """

    __slots__ = ("authenticated", "claims", "client_cert", "client_ip", "cors_preflight",
                 "domain", "email", "groups", "groups_available", "internal", "mcp_housekeeping",
                 "mcp_method", "mcp_tool", "method", "now", "path", "provider",
                 "ssh_username", "user_id")

    def __init__(self, *, authenticated: bool = False, user_id: str = "", email: str = "",
                 groups: Collection[str] = (), groups_available: bool = False,
                 claims: Mapping[str, tuple[str, ...]] = NO_CLAIMS, method: str = "GET",
                 path: str = "/", client_ip: str = "", client_cert: CertFacts | None = None,
                 cors_preflight: bool = False, internal: bool = False,
                 ssh_username: str | None = None, now: float = 0.0,
                 provider: str = "", mcp_method: str | None = None,
                 mcp_name: str = "") -> None:
        self.authenticated = authenticated
        self.user_id = user_id
        self.provider = provider
        self.email = email.lower()
        local, at, domain = self.email.rpartition("@")
        self.domain = domain if at and local and "@" not in local else ""
        self.groups = groups
        self.groups_available = groups_available
        self.claims = claims
        self.method = method
        self.path = path
        self.client_ip = client_ip
        self.client_cert = client_cert
        self.cors_preflight = cors_preflight
        self.internal = internal
        self.ssh_username = ssh_username
        self.now = now
        self.mcp_method = mcp_method
        self.mcp_tool = mcp_name if mcp_method == "tools/call" else None
        self.mcp_housekeeping = mcp_method is not None and is_housekeeping(mcp_method)

    def for_request(self, method: str, path: str, client_ip: str,
                    client_cert: CertFacts | None, cors_preflight: bool, internal: bool,
                    now: float, ssh_username: str | None = None) -> Facts:
        """These identity facts with another request's. A decider that remembers a
        person's facts builds each request's from them: a copy of the slots, without
        the keyword call and the e-mail's normalising again. (No MCP message: a
        decider remembers no decision on one.)"""
        facts = _new_facts(Facts)
        facts.authenticated = self.authenticated
        facts.user_id = self.user_id
        facts.provider = self.provider
        facts.email = self.email
        facts.domain = self.domain
        facts.groups = self.groups
        facts.groups_available = self.groups_available
        facts.claims = self.claims
        facts.method = method
        facts.path = path
        facts.client_ip = client_ip
        facts.client_cert = client_cert
        facts.cors_preflight = cors_preflight
        facts.internal = internal
        facts.ssh_username = ssh_username
        facts.now = now
        facts.mcp_method = None
        facts.mcp_tool = None
        facts.mcp_housekeeping = False
        return facts

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Facts({fields})"


_new_facts = object.__new__
