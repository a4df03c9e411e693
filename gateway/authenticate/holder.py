"""The data plane's authorizer and sign-in web app across reloads (two protocols,
``Authorizer`` and ``SignInApp``): a new ``Identity`` and ``Endpoints`` per snapshot, with
the databroker's session store and directory and the signing key kept (sessions survive
reloads); and the SSH service's entrance (``authorize_ssh``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.mcp_people import McpPeople
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Decision, RequestInfo
from gateway.authorize.ssh_logins import AuthorizeSsh
from gateway.bearer_jwt.verifier import Verifier
from gateway.config.routes import Route
from gateway.config.snapshot import Snapshot
from gateway.databroker.broker import Databroker
from gateway.mcp_oauth import directory
from gateway.mcp_oauth.client_types import Clients
from gateway.mcp_oauth.grants import Grants
from gateway.mcp_oauth.resource_server import McpResourceServer
from gateway.mcp_oauth.server import McpAuthorizationServer, allowed_clients
from gateway.mcp_oauth.upstream import UpstreamVault
from gateway.sessions.live import Ender, Unwatch
from gateway.sessions.spent import SpentTokens
from gateway.sessions.store import SessionStore

log = Logger()


def _signer(snapshot: Snapshot, previous: AssertionSigner | None) -> AssertionSigner:
    o = snapshot.options
    issuer = urlsplit(o.authenticate_service_url).netloc if o.authenticate_service_url else ""
    key = snapshot.material.signing_key
    if previous is not None and previous.ephemeral and key is None and \
            previous.algorithm == o.signing_key_algorithm and previous.issuer == issuer:
        return previous  # keep the ephemeral key across reloads
    signer = AssertionSigner(key, o.signing_key_algorithm, issuer)
    if signer.ephemeral and o.signs_assertions:
        log.warn("signing_key is not set: identity assertions are signed with an ephemeral "
                 "{alg} key (public key {public}); it is not served on the JWKS endpoint",
                 alg=o.signing_key_algorithm, public=signer.public_key_b64())
    elif signer.ephemeral:  # split: authorize signs; this key would sign nothing
        log.info("signing_key is not set: this process (services: {services}) signs no "
                 "identity assertions (the authorize service does) and its JWKS endpoint "
                 "serves an empty key set", services=o.services)
    return signer


Verifiers = Callable[[Snapshot], Mapping[str, Verifier]]


class IdentityHolder:
    """``bearer``: the verifiers of a snapshot's bearer providers
    (``gateway.services.bearer_providers``), where this process decides."""

    def __init__(self, reactor: Any, snapshot: Snapshot, broker: Databroker,
                 bearer: Verifiers | None = None) -> None:
        self.reactor = reactor
        self.broker = broker
        self.store: SessionStore = broker.sessions
        self.signer = _signer(snapshot, None)
        self.spent = SpentTokens()  # kept across reloads, as sessions are
        self.bearer = bearer
        # MCP clients' grants and tokens (records shared by every process) and the
        # resource server's cache of them, kept across reloads
        self.grants = Grants(broker.store, reactor, time.time)
        self.mcp_tokens = McpResourceServer(self.grants, broker.sessions.follower, time.time)
        self.clients: Clients | None = None
        # MCP routes' upstream token vault (``mcp.upstream_oauth2``)
        self.vault = UpstreamVault(reactor, broker.store, snapshot.material.shared_secret)
        self.identity, self.endpoints = self._build(snapshot)
        # the SSH service's entrance, deciding with the snapshot in force
        self.authorize_ssh = AuthorizeSsh(lambda: self.identity.decider, self.store)

    def apply(self, snapshot: Snapshot) -> None:
        """After the databroker's ``apply`` (it may start or stop directory data)."""
        self.signer = _signer(snapshot, self.signer)
        if snapshot.material.shared_secret != self.vault.shared_secret:
            self.vault = UpstreamVault(self.reactor, self.broker.store,
                                       snapshot.material.shared_secret)
        self.identity, self.endpoints = self._build(snapshot)

    def _build(self, snapshot: Snapshot) -> tuple[Identity, Endpoints]:
        """The snapshot's sign-in state and endpoints; with MCP routes, the
        authorization server of their clients and the check of their tokens."""
        broker = self.broker
        has_mcp = any(r.mcp is not None for r in snapshot.routes)
        grants = self.grants
        identity = Identity(self.reactor, snapshot, self.store, self.signer,
                            directory=broker.directory, spent=self.spent,
                            bearer=self.bearer(snapshot) if self.bearer else None,
                            mcp=self.mcp_tokens if has_mcp else None,
                            mcp_consents=(lambda s, csrf: allowed_clients(grants, s, csrf))
                            if has_mcp else None)
        server = None
        if has_mcp:
            self.clients = directory.client_directory(self.reactor, snapshot, broker.store,
                                                      self.clients)
            server = McpAuthorizationServer(
                snapshot.routes, grants, self.clients, McpPeople(identity),
                identity.shared, time.time,
                registration=snapshot.options.mcp_dynamic_client_registration,
                vault=self.vault)
        return identity, Endpoints(identity, snapshot.routes, broker.store, broker.ends,
                                   server, self.vault)

    def watch(self, headers: list[tuple[bytes, bytes]], end: Ender) -> Unwatch:
        """``SessionWatch``: a tunnel or upgraded connection, closed at once when the
        session its request names ends (the databroker's ``live`` registry)."""
        sid = self.identity.sessions.find_in(headers).sid
        return self.broker.live.add(sid or "", end)

    def authorize(self, request: RequestInfo, route: Route) -> Decision | Deferred[Decision]:
        decision = self.identity.decider.authorize(request, route)
        if route.mcp is not None and route.mcp.upstream_oauth2 is not None:
            # the person's upstream token toward the MCP server (the vault)
            return self.vault.decorate(decision, route)
        return decision

    # -- SignInApp

    def handles(self, host: str, path: str) -> bool:
        return self.endpoints.handles(host, path)

    def internal(self, request: RequestInfo, body: bytes = b""
                 ) -> Decision | Deferred[Decision] | None:
        return self.endpoints.internal(request, body)

    def sign_in(self, request: RequestInfo) -> Decision:
        return self.identity.sign_in(request)
