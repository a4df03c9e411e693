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
from gateway.config.running import ConfigSource
from gateway.config.snapshot import Snapshot
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
from gateway.twisted_ext.listen import raise_at_start

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
        self.listeners: list[StreamServerEndpointService] = []  # stopped first by a drain
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
        raise_at_start(listener)
        MultiService.addService(self, listener)
        self.listeners.append(listener)
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
            raise_at_start(redirect)
            MultiService.addService(self, redirect)
            self.listeners.append(redirect)

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

    # -- the gateway's stop (``services.drain``)

    def drain_begin(self) -> None:
        """Stop accepting on every listener (the HTTP one and the redirect listener; a
        redirect connection open now ends with its answer), say not-ready on ``/ping``,
        and ask each connection to wind down."""
        for listener in self.listeners:
            listener.stopService()  # (again at the service's stop: then a no-op)
        if self.core is not None:
            self.core.draining = True
        self.drain_poll()

    def drain_poll(self) -> int:
        if self.core is None:
            return 0
        for conn in list(self.core.connections):
            conn.drain()
        return len(self.core.connections)

    def drain_cut(self, reason: str) -> int:
        """Close whatever is still open (tunnels, websockets, responses still going)."""
        if self.core is None:
            return 0
        left = list(self.core.connections)
        for conn in left:
            if conn.transport is not None:
                conn.transport.abortConnection()
        self.core.connections.clear()
        return len(left)
