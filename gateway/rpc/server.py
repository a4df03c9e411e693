"""The gRPC server of a split process, as a Twisted service: served on ``grpc_address``,
plaintext with ``grpc_insecure`` or TLS with the process's certificates (with
``autocert`` and none of its own: those in ``autocert_dir``, autocert_tls), every call
checked against ``shared_secret``, and the standard health service beside ours.

Start-up waits (bounded) for the port to be bound, so a taken ``grpc_address`` stops
the process at once with a message naming the setting, as a taken ``address`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.autocert.service import wanted_domains
from gateway.config.snapshot import Snapshot
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.autocert_tls import AutocertCertificates
from gateway.rpc.channels import listen_address, server_credentials, server_options
from gateway.rpc.metrics import ServerMetricsInterceptor
from gateway.rpc.shared_secret import SharedSecretInterceptor

log = Logger(namespace="gateway.rpc")

START_SECONDS = 10.0
GRACE_SECONDS = 2.0
REFUSAL_LOG_SECONDS = 10.0

# (servicer, add_to_server, service name for health) of each service this server offers.
Offer = tuple[Any, Callable[[Any, Any], None], str]


class RefusalLog:
    """One log line per ``REFUSAL_LOG_SECONDS`` for refused calls (a misconfigured peer
    calls every half second), with the count of those not logged."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last = float("-inf")
        self._quiet = 0

    def __call__(self, method: str, why: str) -> None:
        now = self.clock()
        if now - self._last < REFUSAL_LOG_SECONDS:
            self._quiet += 1
            return
        log.error("gRPC call {method} refused ({why}): shared_secret differs between this "
                  "service and its caller (or the caller sent no token); set the same "
                  "shared_secret on every gateway process", method=method, why=why,
                  unlogged=self._quiet)
        self._last, self._quiet = now, 0


class GrpcServerService(Service):
    def __init__(self, bridge: AsyncioThread, snapshot: Snapshot, offers: list[Offer]) -> None:
        self.bridge = bridge
        self.snapshot = snapshot
        self.offers = offers
        self.port = 0
        self._server: Any = None
        self._health: Any = None
        self._refusals = RefusalLog()

    def startService(self) -> None:
        o = self.snapshot.options
        address = listen_address(o.grpc_address)
        try:
            self.port = self.bridge.run(lambda: self._start(address), START_SECONDS)
        except Exception as exc:  # as a taken ``address``: one line, exit 1
            log.critical("grpc_address: cannot serve gRPC on {address}: {error}",
                         address=o.grpc_address, error=str(exc) or repr(exc))
            raise SystemExit(1) from None
        Service.startService(self)
        security = "insecure" if o.grpc_insecure else "TLS" if self.snapshot.material.certificates \
            else f"TLS, autocert certificates from {o.autocert_dir}"
        log.info("gRPC: serving {services} on {address} ({security})",
                 services=", ".join(name for _, _, name in self.offers),
                 address=o.grpc_address, port=self.port, security=security)

    async def _start(self, address: str) -> int:
        o, m = self.snapshot.options, self.snapshot.material
        interceptor = SharedSecretInterceptor(
            m.shared_secret, lambda method, why: self.bridge.report(
                self._refusals, method, why))
        metrics = ServerMetricsInterceptor(o.service_label)  # first: it sees refusals too
        server = grpc.aio.server(interceptors=[metrics, interceptor], options=server_options(
            o.grpc_server_max_connection_age, o.grpc_server_max_connection_age_grace))
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        for servicer, add, _name in self.offers:
            add(servicer, server)
        if o.grpc_insecure:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, self._credentials())
        if not port:
            raise OSError(f"could not bind {address}")
        await server.start()
        serving = health_pb2.HealthCheckResponse.SERVING
        await health.set("", serving)
        for _servicer, _add, name in self.offers:
            await health.set(name, serving)
        self._server, self._health = server, health
        return int(port)

    def _credentials(self) -> Any:
        """This process's certificates, else (``autocert``) those in ``autocert_dir``."""
        o, m = self.snapshot.options, self.snapshot.material
        if m.certificates:
            return server_credentials(m.certificates)
        if o.autocert:
            return AutocertCertificates(o.autocert_dir,
                                        wanted_domains(self.snapshot)).credentials()
        raise ValueError("grpc_insecure is false but no certificate is configured")

    async def _stop(self) -> None:
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(GRACE_SECONDS)
        self._server = self._health = None

    def stopService(self) -> Deferred[None]:
        """Not blocking: calls in flight may still need the reactor to finish."""
        Service.stopService(self)

        def failed(failure: Failure) -> None:
            log.warn("gRPC: stopping the server failed: {error}",
                     error=failure.getErrorMessage())
        return self.bridge.submit(self._stop).addErrback(failed)
