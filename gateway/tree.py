"""The service tree a configuration asks for: the config source (and its SIGHUP
hook), then the services that ``services`` selects, or with ``workers`` > 1 the
supervisor's tree. Shared by ``twistd gateway`` (``gateway.tap``) and each worker
process (``gateway.worker``); nothing here touches the global reactor.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from twisted.application.service import MultiService, Service
from twisted.logger import Logger

from gateway import __version__
from gateway.authenticate.holder import IdentityHolder
from gateway.authorize.hook import Authorizer
from gateway.config import Snapshot
from gateway.config.running import ConfigSource
from gateway.databroker.broker import Databroker
from gateway.observability import logging as gateway_logging
from gateway.observability.audit_service import AuditService
from gateway.observability.metrics_push import MetricsPushService
from gateway.services.bearer_providers import BearerVerifiers
from gateway.services.drain import Drain, Drainable, DrainingRoot
from gateway.services.logical import AuthenticateService, AuthorizeService, DataBrokerService
from gateway.services.metrics_endpoint import MetricsEndpointService, count_requests
from gateway.services.proxy import ProxyService
from gateway.services.ready import ReadyService
from gateway.workers.role import WorkerRole
from gateway.workers.supervisor import SharedListeners, WorkerSupervisor

log = Logger(namespace="gateway")


class SighupService(Service):
    """Turns SIGHUP into a configuration reload on the reactor thread (and whatever else
    ``also`` holds: the audit file's reopening)."""

    def __init__(self, source: ConfigSource, reactor: Any) -> None:
        self.source = source
        self.reactor = reactor
        self._previous: Any = None
        self.also: list[Callable[[], None]] = []

    def startService(self) -> None:
        Service.startService(self)
        self._previous = signal.signal(signal.SIGHUP, self._handle)

    def stopService(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGHUP, self._previous)
        Service.stopService(self)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        for call in self.also:
            self.reactor.callFromThread(call)
        self.reactor.callFromThread(self.source.reload, "SIGHUP")


def build_service_tree(
    snapshot: Snapshot, path: str | None, reactor: Any, poll_interval: float = 1.0,
    *, worker: WorkerRole | None = None,
) -> MultiService:
    """The ``MultiService`` for ``services``: config source first, then the services;
    with ``workers`` > 1 the supervisor's instead (``worker``: the tree of one of its
    workers)."""
    if worker is None and snapshot.options.workers > 1:
        return build_supervisor_tree(snapshot, path, reactor, poll_interval)
    draining = DrainingRoot(reactor)  # its stop drains the listeners below first (services.drain)
    root: MultiService = draining
    drained: list[Drainable] = []
    source = ConfigSource(path, snapshot, reactor,
                          poll_interval=0 if worker is not None else poll_interval)
    source.name = "config"
    root.addService(source)
    source.subscribe(apply_logging)
    sighup = None
    if worker is None:
        sighup = SighupService(source, reactor)
        root.addService(sighup)
    options = snapshot.options
    needs_identity = options.runs("proxy") or options.services in ("authenticate",
                                                                    "authorize")
    split = None
    if not options.all_in_one:  # all-in-one never imports grpc nor starts its thread
        from gateway.rpc.split import split_rpc

        split = split_rpc(snapshot, reactor, root)
    broker = None
    if options.runs("databroker") or needs_identity:
        # In-process: the services of this process share one databroker (whose records
        # may live in a databroker process: split.remote_store).
        broker = Databroker(reactor, snapshot, store=split.store if split else None)
        source.subscribe(broker.apply)
    # Split: what uses the gRPC thread runs under it, so the thread outlives its stop.
    parent: MultiService = split.service if split is not None else root
    if options.runs("databroker"):
        databroker = DataBrokerService(source)
        parent.addService(databroker)
        assert broker is not None
        MultiService.addService(databroker, broker)
        if split is not None:
            MultiService.addService(split.service, split.server(broker, source))
    elif broker is not None:
        parent.addService(broker)
    if options.runs("authorize"):
        root.addService(AuthorizeService(source))
    if options.runs("authenticate"):
        root.addService(AuthenticateService(source))
    if needs_identity:
        assert broker is not None
        bearer = None
        if (options.runs("proxy") or options.services == "authorize") \
                and not options.remote_authorize:  # where routes' requests are decided
            bearer = BearerVerifiers(reactor)
            root.addService(bearer)
        identity = IdentityHolder(reactor, snapshot, broker,
                                  bearer.verifiers if bearer is not None else None)
        source.subscribe(identity.apply)
        if split is not None:
            split.signing_check(identity)
        if options.services == "authorize":  # decisions over gRPC, no HTTP listener
            assert split is not None
            MultiService.addService(split.service, split.authorize_server(identity, source))
        else:
            authorizer = split.authorizer(identity) if split is not None else identity
            drained += _add_proxy(root, source, reactor, identity, authorizer, broker,
                                  sighup, worker)
    push = MetricsPushService(reactor, snapshot)  # otel_metrics_exporter: otlp
    source.subscribe(push.apply)
    root.addService(push)
    if worker is not None:
        if options.metrics_address:  # served by the supervisor, from every worker's counts
            count_requests(options)
        ready = ReadyService(reactor, options.services, announce=worker.announce)
    else:
        if options.metrics_address:
            root.addService(MetricsEndpointService(source, reactor))
        ready = ReadyService(reactor, options.services)
        _log_startup(snapshot)
    root.addService(ready)
    draining.drain = Drain(reactor, lambda: source.current.options.shutdown_drain_timeout,
                           drained, on_begin=[ready.stopping])
    return root


def _add_proxy(root: MultiService, source: ConfigSource, reactor: Any,
               identity: IdentityHolder, authorizer: Authorizer, broker: Databroker,
               sighup: SighupService | None, worker: WorkerRole | None) -> list[Drainable]:
    """The proxy's listeners, the audit stream of the decisions it ends with, and the SSH
    server beside it (``ssh_address``); returns what a stop drains."""
    audit = AuditService(reactor, source.current)
    source.subscribe(audit.apply)
    root.addService(audit)
    if sighup is not None:
        sighup.also.append(audit.reopen)
    proxy = ProxyService(source, reactor, authorizer=authorizer, sign_in_app=identity,
                         inherited=worker.inherited if worker else None)
    if proxy.core is not None:  # tunnels and upgrades end with their session
        proxy.core.live = identity
    root.addService(proxy)
    drained: list[Drainable] = [proxy]
    if source.current.options.ssh_address:
        ssh = _add_ssh(root, source, reactor, identity, broker, worker)
        if ssh is not None:
            drained.append(ssh)
    return drained


def _add_ssh(root: MultiService, source: ConfigSource, reactor: Any,
             identity: IdentityHolder, broker: Databroker, worker: WorkerRole | None
             ) -> Drainable | None:
    """Native SSH (imported only when configured). A worker serves it on the socket
    its supervisor bound for ``ssh_address``, like the HTTP listener: connections are
    spread over the workers by the kernel, and what a connection's life needs (key
    bindings, sign-ins, host-key pins, sessions and their sign-outs) is in the kvstore
    every worker shares."""
    from gateway.ssh.service import SshService

    address = source.current.options.ssh_address
    fd = worker.inherited.get(address) if worker is not None else None
    if worker is not None and fd is None:
        # set or changed by a reload since the supervisor bound its sockets
        log.warn("ssh_address {address} is not served: restart the gateway to listen "
                 "on it", address=address)
        return None
    ssh = SshService(source, reactor, identity, broker.store, broker.follower, inherited=fd,
                     live=broker.live)
    root.addService(ssh)
    return ssh


def build_supervisor_tree(
    snapshot: Snapshot, path: str | None, reactor: Any, poll_interval: float = 1.0
) -> MultiService:
    """``workers`` > 1: this process binds the listeners and runs the workers, the
    config source (they reload with its snapshots) and the metrics endpoint (theirs,
    merged); the data plane runs in the workers only."""
    options = snapshot.options
    root: MultiService = DrainingRoot(reactor)  # (the workers drain: exit status only)
    source = ConfigSource(path, snapshot, reactor, poll_interval=poll_interval)
    source.name = "config"
    root.addService(source)
    source.subscribe(apply_logging)
    root.addService(SighupService(source, reactor))
    addresses = [options.address]
    if options.http_redirect_addr:
        addresses.append(options.http_redirect_addr)
    if options.ssh_address:  # the workers serve SSH too, each on its own socket
        addresses.append(options.ssh_address)
    workers = WorkerSupervisor(source, reactor, options.workers,
                               SharedListeners(addresses, options.workers))
    root.addService(workers)
    if options.metrics_address:
        root.addService(MetricsEndpointService(source, reactor, gather=workers.gather_metrics))
    root.addService(ReadyService(reactor, options.services, wait=workers.ready))
    _log_startup(snapshot)
    return root


def apply_logging(snapshot: Snapshot) -> None:
    o = snapshot.options
    gateway_logging.configure(
        debug=o.gateway_debug, log_level=o.log_level, proxy_log_level=o.proxy_log_level
    )


def _log_startup(snapshot: Snapshot) -> None:
    o = snapshot.options
    log.info(
        "gateway {version} starting: services={services} address={address} "
        "routes={routes} config={source}",
        version=__version__, services=o.services, address=o.address, workers=o.workers,
        routes=len(snapshot.routes), source=snapshot.source, checksum=snapshot.checksum,
    )
    for warning in snapshot.warnings:
        log.warn("config: {warning}", warning=str(warning))
    if o.gateway_debug:
        log.warn("gateway_debug is on: logs are human-readable, not JSON, and may show "
                 "sensitive information; do not run production like this")
    for name in snapshot.material.generated:
        log.warn(
            "{setting} is not set: using a random key for this process only "
            "(sessions end when it restarts)", setting=name,
        )
