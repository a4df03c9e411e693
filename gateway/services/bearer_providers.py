"""The bearer providers of the configuration in force, as verifiers: one ``Verifier`` per
provider with ``bearer`` settings in ``identity_providers`` (``bearer_providers``: its
``jwks_file`` found beside the configuration), per snapshot, over key sources that run
with the service tree (``BearerKeys``) and are kept across a reload that does not change
where a provider's keys come from (its keys with them: a reload never leaves its tokens
refused while keys are fetched again).

Wherever decisions are made on HTTP requests (``Decider``: an all-in-one gateway, a proxy
deciding in process, the authorize service), ``tree`` adds a ``BearerVerifiers`` and hands
its ``verifiers`` to the identity layer; a proxy that asks a remote authorize fetches no
keys.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.logger import Logger

from gateway.bearer_jwt.expect import KUBERNETES
from gateway.bearer_jwt.keys import KeySet
from gateway.bearer_jwt.presets import preset
from gateway.bearer_jwt.verifier import Verifier
from gateway.config.snapshot import Snapshot
from gateway.observability.bearer_metrics import watch_bearer_keys
from gateway.services.bearer_keys import BearerKeys, BearerProvider, bearer_providers

log = Logger()


class _NoKeys:
    """The key source of a provider whose keys cannot be fetched from here at all
    (``kubernetes:///`` outside a cluster): its tokens are refused (``unknown_kid``)."""

    def __init__(self, provider: str) -> None:
        self.keys = KeySet(provider)

    def unknown_kid(self) -> None:
        return None


def unreachable(provider: BearerProvider) -> str:
    """Why ``provider``'s keys cannot be had from this machine at all (``""``: they
    can): a preset that reads a file that is not here (``kubernetes:///`` outside a
    cluster, without its own ``ca_file``)."""
    known = preset(provider.expect.issuer)
    if known is None or not known.ca_file or provider.ca_pem is not None:
        return ""
    if os.access(known.ca_file, os.R_OK):
        return ""
    return (f"{known.ca_file} cannot be read: {KUBERNETES} reads the cluster's issuer "
            "from the API server, inside the cluster; outside it, give the cluster's "
            "issuer and a jwks_file")


class BearerVerifiers(BearerKeys):
    """``BearerKeys`` for the snapshots in force: ``verifiers(snapshot)`` for each."""

    def __init__(self, reactor: Any) -> None:
        super().__init__()
        self.reactor = reactor
        watch_bearer_keys(lambda: self.sources)

    def verifiers(self, snapshot: Snapshot) -> dict[str, Verifier]:
        """One verifier per bearer provider of ``snapshot`` (each with a fresh cache);
        the sources of unchanged providers kept."""
        providers: list[BearerProvider] = []
        missing: dict[str, Verifier] = {}
        for provider in bearer_providers(snapshot):
            name = provider.expect.provider
            why = unreachable(provider)
            if why:
                log.error("bearer provider {provider}: no keys, its tokens are refused: "
                          "{why}", provider=name, why=why)
                missing[name] = Verifier(provider.expect, _NoKeys(name),
                                         self.reactor.seconds)
                continue
            providers.append(provider)
        return {**self.update(self.reactor, providers), **missing}
