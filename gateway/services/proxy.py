"""The proxy service: the HTTP(S) listener on ``address``."""

from __future__ import annotations

from typing import Any

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import MultiService

from gateway.config.snapshot import Snapshot
from gateway.config.source import ConfigSource
from gateway.dataplane.interim import AccessLoggingSite, InterimProxy
from gateway.dataplane.listener import server_endpoint, tls_options
from gateway.services.base import SnapshotService


class ProxyService(SnapshotService):
    """Owns the main listener; routes come from the current snapshot on every request."""

    label = "proxy"

    def __init__(self, source: ConfigSource, reactor: Any) -> None:
        super().__init__(source)
        snapshot = source.current
        self.address = snapshot.options.address
        tls = None if snapshot.options.insecure_server else tls_options(snapshot)
        if tls is None and not snapshot.options.insecure_server:
            self.log.error(
                "autocert certificates are not available yet: the listener on {address} "
                "cannot serve TLS without certificates", address=self.address,
            )
            return
        site = AccessLoggingSite(InterimProxy(lambda: self.snapshot, reactor, tls is not None))
        site.displayTracebacks = False
        site.noisy = False
        listener = StreamServerEndpointService(
            server_endpoint(reactor, self.address, snapshot, tls), site
        )
        listener.name = "listener"
        MultiService.addService(self, listener)

    def apply(self, snapshot: Snapshot) -> None:
        if snapshot.options.address != self.address:
            self.log.warn(
                "address changed from {old} to {new}: restart to listen on the new address",
                old=self.address, new=snapshot.options.address,
            )
        super().apply(snapshot)
