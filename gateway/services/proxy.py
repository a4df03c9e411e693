"""The proxy service: the HTTP(S) listener on ``address`` and its data plane."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError

from gateway.authorize.hook import Authorizer, SignInApp
from gateway.autocert.challenge import PendingChallenges
from gateway.autocert.service import AutocertService
from gateway.config.snapshot import Snapshot
from gateway.config.source import ConfigSource
from gateway.dataplane.codecs.switch import HTTPFactory
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.health.manager import HealthManager
from gateway.dataplane.listeners.http_redirect import RedirectFactory
from gateway.dataplane.listeners.shared import AdoptedEndpoint
from gateway.dataplane.listeners.stack import LimitedFactory, listener_factory, server_endpoint
from gateway.dataplane.routing.plan import build_plan
from gateway.observability.tracing.service import TracingService
from gateway.services.base import SnapshotService
from gateway.tls.server import ServerTLS
from gateway.tls.store import CertificateStore, build_store

if TYPE_CHECKING:
    from gateway.observability.tracing.tracer import Tracer


class ProxyService(SnapshotService):
    """Owns the main listener; each reload compiles a new plan and, with TLS, swaps in
    the new certificates for connections made from then on."""

    label = "proxy"

    def __init__(self, source: ConfigSource, reactor: Any,
                 authorizer: Authorizer | None = None, sign_in_app: SignInApp | None = None,
                 inherited: Mapping[str, int] | None = None) -> None:
        """``inherited``: listening descriptors by address (a worker's, bound by its
        supervisor), adopted instead of binding."""
        super().__init__(source)
        fds = dict(inherited or {})

        def endpoint(address: str) -> Any:
            fd = fds.get(address)
            return server_endpoint(reactor, address) if fd is None else \
                AdoptedEndpoint(reactor, fd)

        snapshot = self.snapshot
        options = snapshot.options
        self.address = options.address
        self.core: ProxyCore | None = None
        self.tls: ServerTLS | None = None
        self.health = HealthManager(reactor)
        self.challenges: PendingChallenges | None = None
        self.autocert: AutocertService | None = None
        if options.autocert and not options.insecure_server:
            self.challenges = PendingChallenges()
            self.autocert = AutocertService(reactor, snapshot, self.challenges,
                                            self._certificates_changed)
            MultiService.addService(self, self.autocert)
        if not options.insecure_server:
            store = self._store(snapshot)
            if store is None:  # validation guarantees a TLS source; kept for safety
                self.log.error("no certificate to serve on {address}", address=self.address)
                return
            self.tls = ServerTLS(store)
        self.core = ProxyCore(reactor, build_plan(snapshot), tls=self.tls is not None,
                              authorizer=authorizer, sign_in_app=sign_in_app)
        self.tracing = TracingService(reactor, options, self._tracer_changed)
        MultiService.addService(self, self.tracing)
        factory = listener_factory(
            HTTPFactory(self.core, options.codec_type, self.tls is not None), self.tls,
            options.use_proxy_protocol, reactor, self.core.limit, self.core.penalties,
        )
        listener = StreamServerEndpointService(endpoint(self.address), factory)
        listener.name = "listener"
        # A port that cannot be bound must stop the daemon at start-up, not be logged.
        listener._raiseSynchronously = True
        MultiService.addService(self, listener)
        if options.http_redirect_addr:
            self.redirect_address = options.http_redirect_addr
            core = self.core
            redirects = RedirectFactory(lambda: core.plan.response_headers, reactor,
                                        lambda: core.timeout_handshake)
            core.limit.sources.append(redirects.live)  # one cap for the whole process
            redirect = StreamServerEndpointService(
                endpoint(options.http_redirect_addr),
                LimitedFactory(redirects, core.limit, reactor),
            )
            redirect.name = "http-redirect"
            redirect._raiseSynchronously = True
            MultiService.addService(self, redirect)

    def apply(self, snapshot: Snapshot) -> None:
        if snapshot.options.address != self.address:
            self.log.warn(
                "address changed from {old} to {new}: restart to listen on the new address",
                old=self.address, new=snapshot.options.address,
            )
        if self.core is not None and snapshot is not self.core.plan.snapshot:
            self.core.set_plan(build_plan(snapshot, self.core.plan))
            if self.autocert is not None:
                self.autocert.update(snapshot)
            if self.tls is not None:
                store = self._store(snapshot)
                if store is not None:
                    self.tls.swap(store)
        if self.core is not None and self.running:
            self.health.update(self.core.plan)
        if self.core is not None:
            self.tracing.apply(snapshot.options)
        super().apply(snapshot)

    def _tracer_changed(self, tracer: Tracer | None) -> None:
        if self.core is not None:
            self.core.tracer = tracer

    def _store(self, snapshot: Snapshot) -> CertificateStore | None:
        extra = self.autocert.pairs() if self.autocert is not None else []
        return build_store(snapshot, extra, self.challenges)

    def _certificates_changed(self) -> None:
        """Autocert obtained or renewed a certificate: serve it from now on."""
        if self.tls is not None:
            store = self._store(self.snapshot)
            if store is not None:
                self.tls.swap(store)

    def privilegedStartService(self) -> None:
        try:
            MultiService.privilegedStartService(self)
        except CannotListenError as exc:
            self.log.critical("cannot listen on {address}: {error}",
                              address=f"{exc.interface}:{exc.port}", error=str(exc.socketError))
            raise SystemExit(1) from None

    def startService(self) -> None:
        super().startService()
        if self.core is not None:
            self.health.update(self.core.plan)

    def stopService(self) -> Deferred[None] | None:
        self.health.stop()
        return SnapshotService.stopService(self)
