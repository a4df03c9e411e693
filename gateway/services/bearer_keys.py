"""The key sets of the bearer providers, kept current for as long as the tree runs, and
the HTTPS each provider's keys are fetched with.

The fetch is the OIDC client's (``authenticate/oidc.py``: its deadline, its bound on
what a provider may send, its client span when traced), with three differences that
are the provider's settings or this use's needs: TLS verified against the system store
(``SSL_CERT_FILE`` included, as OpenSSL reads it) or only the provider's ``ca_file``;
no redirect followed (a key set is fetched only from a URL the configuration named or
the issuer's discovery document listed); no pooled connection kept between fetches
minutes apart. The policy (what to fetch when, the last good keys, backoff) is
``gateway.bearer_jwt.source``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from treq.client import HTTPClient
from twisted.application.service import Service
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from gateway.authenticate.oidc import TIMEOUT, traced_request
from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.presets import preset
from gateway.bearer_jwt.source import Fetch, FileKeys, KeysUnusable, RemoteKeys, learned_issuer
from gateway.bearer_jwt.verifier import Verifier
from gateway.config.material import Reader
from gateway.config.snapshot import Snapshot
from gateway.tls.client import TLSClientConfig, connection_creator

_ACCEPT: dict[bytes | str, bytes | str] = {"Accept": "application/json"}


@implementer(IPolicyForHTTPS)
class ProviderTLS:
    """TLS toward one provider: its name checked against the system's CAs, or only
    against ``ca_pem``'s (a private CA, common for company IdPs and clusters)."""

    def __init__(self, ca_pem: bytes | None) -> None:
        self.ca_pem = ca_pem or None

    def creatorForNetloc(self, hostname: bytes, port: int
                         ) -> IOpenSSLClientConnectionCreator:
        host = hostname.decode("ascii")
        config = TLSClientConfig(server_name=host, skip_verify=False, custom_ca=self.ca_pem,
                                 client_cert=None, client_key=None)
        return connection_creator(config, host)


def origin(url: str) -> tuple[str, str, int]:
    """A URL's scheme, host and port: whom a request reaches."""
    parts = urlsplit(url)
    return (parts.scheme, (parts.hostname or "").lower(),
            parts.port or (443 if parts.scheme == "https" else 80))


def provider_fetch(reactor: Any, ca_pem: bytes | None = None, token_file: str = "", *,
                   api_url: str = "", api_ca: bytes | None = None,
                   client_for: Callable[[bytes | None], HTTPClient] | None = None
                   ) -> Fetch:
    """A ``Fetch`` for one provider, its HTTPS verified against ``ca_pem`` (its
    ``ca_file``), else the system store. ``token_file`` and ``api_ca``: a preset's
    bearer token (Kubernetes' service-account token, read each time: the kubelet rotates
    it) and CA, used only toward ``api_url``'s origin (the API server, whose discovery
    document this is). Anywhere else, the ``jwks_uri`` that discovery names included,
    no token is sent and the CA is the provider's or the system store's: EKS and GKE
    publish their key sets on public hosts with public certificates, and a pod's
    credential is for the API server alone. ``client_for``: the HTTP client for a CA
    (tests)."""
    def agent_client(ca: bytes | None) -> HTTPClient:
        return HTTPClient(Agent(reactor, contextFactory=ProviderTLS(ca),
                                pool=HTTPConnectionPool(reactor, persistent=False)))
    make = client_for or agent_client
    client = make(ca_pem)
    api_client = make(ca_pem or api_ca) if api_url else client
    api = origin(api_url) if api_url else None

    async def fetch(url: str) -> bytes:
        if not url.startswith("https://"):
            raise KeysUnusable(f"{url} is not https")
        headers = dict(_ACCEPT)
        to_api = api is not None and origin(url) == api
        if to_api and token_file:
            with open(token_file, encoding="ascii") as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        via = api_client if to_api else client
        response, body = await traced_request("GET", url, headers, lambda h: via.get(
            url, headers=h, timeout=TIMEOUT, allow_redirects=False, reactor=reactor))
        if response.code != 200:
            raise KeysUnusable(f"GET {url} answered {response.code}")
        return body

    return fetch


@dataclass(frozen=True, slots=True)
class BearerProvider:
    """One bearer provider as the key sources need it: what its tokens must say, and
    where its keys are (``jwks_file``, else ``jwks_url``, else discovery; ``ca_pem``:
    its ``ca_file``'s certificates)."""

    expect: BearerExpectations
    jwks_file: str = ""
    jwks_url: str = ""
    ca_pem: bytes | None = None

    @property
    def where(self) -> tuple[str, str, str, bytes | None]:
        """What decides the key source: equal across a reload, the source is kept."""
        return (self.expect.issuer, self.jwks_file, self.jwks_url, self.ca_pem)


class BearerKeys(Service):
    """Every bearer provider's key source, started and stopped with the tree; the
    verifiers read ``sources[provider].keys``. ``update`` follows a new configuration:
    a provider whose issuer and key settings are unchanged keeps its source (and its
    keys: a reload never leaves tokens without keys while they are fetched again)."""

    def __init__(self, sources: Mapping[str, RemoteKeys | FileKeys] | None = None) -> None:
        self.sources = dict(sources or {})
        self._where: dict[str, tuple[str, str, str, bytes | None]] = {}

    def startService(self) -> None:
        Service.startService(self)
        for source in self.sources.values():
            source.start()

    def stopService(self) -> None:
        for source in self.sources.values():
            source.stop()
        Service.stopService(self)

    def update(self, reactor: Any, providers: Sequence[BearerProvider]
               ) -> dict[str, Verifier]:
        """The verifiers of ``providers`` (each with a fresh cache: its expectations may
        have changed), their sources kept, made, or stopped when gone (``ValueError``
        from ``key_source`` for a preset file that cannot be read)."""
        wanted = {p.expect.provider: p for p in providers}
        made: dict[str, RemoteKeys | FileKeys] = {}
        for provider_id, provider in wanted.items():
            source = self.sources.get(provider_id)
            if source is None or self._where.get(provider_id) != provider.where:
                made[provider_id] = key_source(
                    reactor, provider_id, provider.expect.issuer,
                    jwks_file=provider.jwks_file, jwks_url=provider.jwks_url,
                    ca_pem=provider.ca_pem)
        for provider_id, source in list(self.sources.items()):
            if provider_id not in wanted or provider_id in made:
                source.stop()
                del self.sources[provider_id]
                self._where.pop(provider_id, None)
        for provider_id, source in made.items():
            self.sources[provider_id] = source
            self._where[provider_id] = wanted[provider_id].where
            if self.running:
                source.start()
        return {provider_id: Verifier(provider.expect, self.sources[provider_id],
                                      reactor.seconds)
                for provider_id, provider in wanted.items()}


def bearer_providers(snapshot: Snapshot) -> tuple[BearerProvider, ...]:
    """The bearer providers of a configuration (``identity_providers`` entries with
    ``bearer``): their expectations, their ``jwks_file`` resolved as the configuration
    reads its files (relative to the configuration file), their ``ca_file``'s
    certificates as validation read them."""
    source = snapshot.source
    base = os.path.dirname(os.path.abspath(source)) if source != "environment" \
        else os.getcwd()
    reader = Reader(base)
    found = []
    for entry in snapshot.options.identity_providers:
        rules = entry.bearer
        if rules is None:
            continue
        expect = BearerExpectations(entry.id, entry.issuer, tuple(rules.audiences),
                                    groups_claim=rules.groups_claim,
                                    trust_unverified_email=rules.allow_unverified_email)
        found.append(BearerProvider(
            expect, jwks_file=reader.resolve(entry.jwks_file) if entry.jwks_file else "",
            ca_pem=snapshot.material.provider_cas.get(entry.id)))
    return tuple(found)


def _read_ca(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"{what}: {path}: {exc.strerror} (kubernetes:/// reads the "
                         "cluster's issuer from the API server, from inside the cluster; "
                         "elsewhere give the cluster's issuer and a jwks_file)") from None


def key_source(reactor: Any, provider: str, issuer: str, *, jwks_file: str = "",
               jwks_url: str = "", ca_pem: bytes | None = None) -> RemoteKeys | FileKeys:
    """The key source a provider's settings describe: ``jwks_file`` (read again on
    change), else ``jwks_url``, else the issuer's discovery document; the presets
    (``presets.py``) say where GitHub Actions' and a cluster's are. ``ca_pem``: the
    provider's ``ca_file`` (else the system store, or the preset's CA). ``ValueError``
    names a preset file that cannot be read (``kubernetes:///`` outside a cluster)."""
    known = preset(issuer)
    token_file = known.token_file if known is not None else ""
    api_ca = None
    if ca_pem is None and known is not None and known.ca_file:
        api_ca = _read_ca(known.ca_file, f"bearer provider {provider} ({known.name})")
    fetch = provider_fetch(reactor, ca_pem, token_file, api_ca=api_ca,
                           api_url=known.discovery_url if known is not None else "")
    if jwks_file:
        learn = None
        if known is not None and known.learn_issuer:
            url = known.discovery_url
            learn = partial(learned_issuer, fetch, url)
        return FileKeys(provider, jwks_file, reactor, learn=learn)
    if jwks_url:
        return RemoteKeys(provider, issuer, fetch, reactor, jwks_url=jwks_url)
    if known is not None:
        return RemoteKeys(provider, issuer, fetch, reactor, discovery_url=known.discovery_url,
                          learn_issuer=known.learn_issuer)
    return RemoteKeys(provider, issuer, fetch, reactor)
