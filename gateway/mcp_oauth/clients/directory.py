"""The client directory (``client_types.Clients``): a client id is a metadata document
URL (fetched, checked, cached per process) or a registration's id (read from the
databroker); ``check_redirect_uri`` applies ``redirect_uris``' rules.

One directory lives as long as the process's authorization server; ``reconfigure``
takes a new snapshot's settings and forgets the cached documents when what decides
about them (hosts, networks, trust) changed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger

from gateway.config.snapshot import Snapshot
from gateway.config.validate_mcp import allowed_hosts, allowed_networks
from gateway.databroker.records import RecordStore
from gateway.mcp_oauth.client_types import ClientRefused, Clients, McpClient
from gateway.mcp_oauth.clients import client_ids, registration
from gateway.mcp_oauth.clients.addresses import Network
from gateway.mcp_oauth.clients.document import client_of_document
from gateway.mcp_oauth.clients.fetch import (
    FETCH_BOUNDS,
    FetchBounds,
    Fetched,
    Resolver,
    fetch,
    system_resolver,
    trust,
)
from gateway.mcp_oauth.clients.freshness import lifetime
from gateway.mcp_oauth.clients.rate import RegistrationBuckets
from gateway.mcp_oauth.clients.redirect_uris import request_problem

log = Logger()

# what ``ClientRefused.error`` is when registration is off (the endpoint answers 404)
# and when a peer registers too often (429)
REGISTRATION_OFF = "registration_not_supported"
RATE_LIMITED = "rate_limited"

MAX_CACHED = 512
MAX_FETCHES = 32  # metadata documents being fetched at once, per process
REGISTRATIONS_PER_ADDRESS = 20
REGISTRATIONS_TOTAL = 500
REGISTRATION_WINDOW = 3600.0


@dataclass(frozen=True, slots=True)
class Settings:
    """What decides about metadata documents and registrations, from a snapshot."""

    hosts: frozenset[str]
    networks: tuple[Network, ...]
    ca_pem: bytes | None
    registration: bool

    @classmethod
    def of(cls, snapshot: Snapshot) -> Settings:
        o = snapshot.options
        return cls(allowed_hosts(o), allowed_networks(o),
                   snapshot.material.mcp_client_id_metadata_ca,
                   o.mcp_dynamic_client_registration)


class ClientDirectory:
    """``Clients`` for one process. ``resolve``/``bounds``/``buckets`` are the tests'
    seams (a fixed name table, a short deadline, a small bucket)."""

    def __init__(self, reactor: Any, records: RecordStore, settings: Settings, *,
                 resolve: Resolver | None = None, bounds: FetchBounds = FETCH_BOUNDS,
                 buckets: RegistrationBuckets | None = None,
                 max_fetches: int = MAX_FETCHES) -> None:
        self.reactor = reactor
        self.records = records
        self.resolver = resolve if resolve is not None else system_resolver(reactor)
        self.bounds = bounds
        self.buckets = buckets if buckets is not None else RegistrationBuckets(
            reactor.seconds, REGISTRATIONS_PER_ADDRESS, REGISTRATIONS_TOTAL,
            REGISTRATION_WINDOW)
        self._cache: OrderedDict[str, tuple[McpClient, float]] = OrderedDict()
        # the URLs being fetched, each with its waiters; at most ``max_fetches`` (a
        # client id costs nothing to invent: the fetches it causes are bounded)
        self._pending: dict[str, list[Deferred[McpClient]]] = {}
        self.max_fetches = max_fetches
        self.settings = settings
        self._trust = trust(settings.ca_pem)

    def reconfigure(self, settings: Settings) -> None:
        if (settings.hosts, settings.networks, settings.ca_pem) != (
                self.settings.hosts, self.settings.networks, self.settings.ca_pem):
            self._cache.clear()
            self._trust = trust(settings.ca_pem)
        self.settings = settings

    # --- Clients ---------------------------------------------------------------------

    def resolve(self, client_id: str) -> Deferred[McpClient]:
        if client_ids.is_metadata_url(client_id):
            return self._document(client_id)
        return Deferred.fromCoroutine(self._registered(client_id))

    def check_redirect_uri(self, client: McpClient, redirect_uri: str) -> str | None:
        return request_problem(client.redirect_uris, redirect_uri)

    def register(self, metadata: Mapping[str, Any], peer: str) -> Deferred[McpClient]:
        return Deferred.fromCoroutine(self._register(metadata, peer))

    # --- metadata documents ----------------------------------------------------------

    def _refused(self, client_id: str, refusal: ClientRefused) -> ClientRefused:
        log.warn("MCP client {client_id} refused: {reason}", client_id=client_id[:300],
                 reason=refusal.description, error=refusal.error)
        return refusal

    def _document(self, url: str) -> Deferred[McpClient]:
        parts, problem = client_ids.url_problem(url)
        if parts is None or problem is not None:
            return fail(self._refused(url, ClientRefused(
                "invalid_client", f"the client_id {url[:200]} {problem}")))
        problem = client_ids.host_refusal(parts, self.settings.hosts)
        if problem is not None:
            return fail(self._refused(url, ClientRefused(
                "invalid_client", f"the client_id {url}: {problem}")))
        now = self.reactor.seconds()
        cached = self._cache.get(url)
        if cached is not None:
            if now < cached[1]:
                return succeed(cached[0])
            del self._cache[url]
        mine: Deferred[McpClient] = Deferred()
        waiting = self._pending.get(url)
        if waiting is not None:  # one fetch per URL at a time; the others wait for it
            waiting.append(mine)
            return mine
        if len(self._pending) >= self.max_fetches:
            return fail(self._refused(url, ClientRefused(
                "temporarily_unavailable", f"the client metadata document at {url} was "
                f"not fetched: {self.max_fetches} documents are being fetched already; "
                "try again shortly")))
        self._pending[url] = [mine]
        fetching = fetch(self.reactor, url, parts, self.resolver, self.settings.networks,
                         self._trust, self.bounds)
        fetching.addCallbacks(lambda fetched: self._fetched(url, fetched),
                              lambda failure: self._failed(url, failure))
        return mine

    def _fetched(self, url: str, fetched: Fetched) -> None:
        try:
            client = client_of_document(url, fetched.body)
        except ClientRefused as refusal:
            self._failed(url, refusal)
            return
        keep = lifetime(fetched.cache_control, fetched.expires, fetched.date)
        if keep > 0:
            self._cache[url] = (client, self.reactor.seconds() + keep)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        for waiter in self._pending.pop(url, []):
            waiter.callback(client)

    def _failed(self, url: str, failure: Any) -> None:
        value = getattr(failure, "value", failure)
        if isinstance(value, ClientRefused):
            self._refused(url, value)
        else:
            log.failure("fetching the MCP client metadata document {url}", failure, url=url)
            value = ClientRefused("invalid_client", f"the client metadata document at {url} "
                                  "was not fetched: an internal error (see the gateway's log)")
        for waiter in self._pending.pop(url, []):
            waiter.errback(value)

    # --- registrations ---------------------------------------------------------------

    def _off(self) -> ClientRefused:
        return ClientRefused(REGISTRATION_OFF, "dynamic client registration is turned off "
                             "(mcp_dynamic_client_registration)")

    async def _registered(self, client_id: str) -> McpClient:
        if not self.settings.registration:
            raise self._refused(client_id, ClientRefused(
                "invalid_client", "the client_id is neither an allowed metadata document "
                "URL nor registered (dynamic client registration is turned off)"))
        client = None
        if client_ids.is_registered_id(client_id):
            client = await registration.lookup(self.records, client_id, self.reactor.seconds())
        if client is None:
            raise self._refused(client_id, ClientRefused(
                "invalid_client", "the client_id is not registered here"))
        return client

    async def _register(self, metadata: Mapping[str, Any], peer: str) -> McpClient:
        if not self.settings.registration:
            raise self._off()
        client = registration.client_of_registration(registration.new_client_id(), metadata)
        limited = self.buckets.take(peer)
        if limited is not None:
            log.warn("MCP client registration from {peer} refused: {reason}", peer=peer,
                     reason=limited)
            raise ClientRefused(RATE_LIMITED, limited)
        await registration.store(self.records, client, self.reactor.seconds())
        log.info("MCP client {client_id} registered from {peer}: {name}",
                 client_id=client.client_id, peer=peer, name=client.name)
        return client


def directory_for(reactor: Any, snapshot: Snapshot, records: RecordStore) -> ClientDirectory:
    """The directory a snapshot describes, over the process's record store."""
    return ClientDirectory(reactor, records, Settings.of(snapshot))


def _is_clients(directory: ClientDirectory) -> Clients:
    return directory  # mypy holds the directory to the protocol mcpauth calls
