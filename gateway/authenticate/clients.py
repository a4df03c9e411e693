"""The interactive identity providers of a snapshot: one OpenID Connect client each
(``oidc.Provider``: its own discovery, keys and HTTPS trust), by id, and which of them
each route accepts.

A provider with ``ca_file`` is reached through an agent that trusts that file's CAs and
nothing else; the others through treq's default agent, which trusts the system store
(OpenSSL's default paths, so ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` keep working).
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.ssl import Certificate, optionsForClientTLS, trustRootFromCertificates
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from gateway.authenticate.oidc import Provider
from gateway.config.providers import IdentityProvider, accepted_by, accepted_by_default
from gateway.config.routes import Route
from gateway.config.snapshot import Snapshot


@implementer(IPolicyForHTTPS)
class TrustOnly:
    """HTTPS verified against ``pem``'s CAs only (a provider's ``ca_file``)."""

    def __init__(self, pem: bytes) -> None:
        self.root = trustRootFromCertificates(
            [Certificate.loadPEM(cert.public_bytes(Encoding.PEM))
             for cert in x509.load_pem_x509_certificates(pem)])

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return optionsForClientTLS(hostname.decode("idna"), trustRoot=self.root)


def https_agent(reactor: Any, ca_pem: bytes) -> Agent:
    """An agent for one provider whose HTTPS is verified against ``ca_pem``. Its
    connections are not kept: a provider is asked rarely (discovery, keys, a sign-in's
    code), and each snapshot makes its own agents, whose idle connections nothing would
    close after a reload."""
    return Agent(reactor, contextFactory=TrustOnly(ca_pem),
                 pool=HTTPConnectionPool(reactor, persistent=False))


class Clients:
    """Per snapshot: each interactive provider's client (``get``), in the order of
    ``identity_providers`` (the implicit ``default`` first), and the providers each
    route accepts (``accepted``)."""

    def __init__(self, reactor: Any, snapshot: Snapshot, redirect_uri: str) -> None:
        o, material = snapshot.options, snapshot.material
        self.entries = {p.id: p for p in o.identity_providers}
        self.clients: dict[str, Provider] = {}
        for entry in o.identity_providers:
            if not entry.interactive:
                continue
            secret = (material.idp_client_secret if entry.implicit
                      else material.provider_secrets.get(entry.id, ""))
            ca = material.provider_cas.get(entry.id)
            self.clients[entry.id] = Provider(
                reactor, entry.issuer, entry.client_id, secret, entry.scopes,
                dict(entry.request_params), redirect_uri,
                agent=https_agent(reactor, ca) if ca else None, provider_id=entry.id)
        self.providers = o.identity_providers
        self.interactive: tuple[str, ...] = accepted_by_default(o.identity_providers)
        self._accepted: dict[int, tuple[str, ...]] = {}

    def get(self, provider_id: str) -> Provider | None:
        return self.clients.get(provider_id)

    @property
    def any(self) -> bool:
        """Whether anyone can sign in here at all."""
        return bool(self.clients)

    def label(self, provider_id: str) -> str:
        """The provider's name as people are shown it."""
        entry = self.entries.get(provider_id)
        return entry.label if entry is not None else provider_id

    def accepted(self, route: Route) -> tuple[str, ...]:
        """The interactive providers whose sessions ``route`` accepts, in configuration
        order: its ``identity_providers`` (those of them that are interactive), or every
        interactive provider."""
        found = self._accepted.get(route.index)
        if found is None:
            found = accepted_by(route.identity_providers, self.providers)
            self._accepted[route.index] = found
        return found

    def entry(self, provider_id: str) -> IdentityProvider | None:
        return self.entries.get(provider_id)
