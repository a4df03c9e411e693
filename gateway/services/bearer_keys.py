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

from collections.abc import Mapping
from typing import Any

from treq.client import HTTPClient
from twisted.application.service import Service
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from gateway.authenticate.oidc import TIMEOUT, _traced
from gateway.bearer_jwt.source import Fetch, FileKeys, KeysUnusable, RemoteKeys
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


def provider_fetch(reactor: Any, ca_pem: bytes | None = None, token_file: str = ""
                   ) -> Fetch:
    """A ``Fetch`` for one provider. ``token_file``: a bearer token sent with every
    fetch, read each time (Kubernetes' service-account token, which the kubelet
    rotates, for the API server's discovery document)."""
    client = HTTPClient(Agent(reactor, contextFactory=ProviderTLS(ca_pem),
                              pool=HTTPConnectionPool(reactor, persistent=False)))

    async def fetch(url: str) -> bytes:
        if not url.startswith("https://"):
            raise KeysUnusable(f"{url} is not https")
        headers = dict(_ACCEPT)
        if token_file:
            with open(token_file, encoding="ascii") as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        response, body = await _traced("GET", url, headers, lambda h: client.get(
            url, headers=h, timeout=TIMEOUT, allow_redirects=False))
        if response.code != 200:
            raise KeysUnusable(f"GET {url} answered {response.code}")
        return body

    return fetch


class BearerKeys(Service):
    """Every bearer provider's key source, started and stopped with the tree; the
    verifiers read ``sources[provider].keys``."""

    def __init__(self, sources: Mapping[str, RemoteKeys | FileKeys]) -> None:
        self.sources = dict(sources)

    def startService(self) -> None:
        Service.startService(self)
        for source in self.sources.values():
            source.start()

    def stopService(self) -> None:
        for source in self.sources.values():
            source.stop()
        Service.stopService(self)
