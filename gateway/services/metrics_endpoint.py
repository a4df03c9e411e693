"""The metrics endpoint on ``metrics_address``: the process's registry in the Prometheus
text format, on any path.

``metrics_basic_auth`` requires HTTP Basic credentials (compared in constant time; 401
with a challenge otherwise). ``metrics_certificate`` (+ key) serves it over TLS, and
``metrics_client_ca`` then also requires a client certificate that CA signed. The
address is read at start (a change is logged and needs a restart); credentials and TLS
material follow reloads, for connections made from then on.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from typing import Any

from cryptography import x509
from OpenSSL import SSL
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from gateway.config.running import ConfigSource
from gateway.config.settings import Options
from gateway.config.snapshot import Snapshot
from gateway.dataplane.listeners.stack import server_endpoint
from gateway.observability.metrics import REGISTRY, watch_config
from gateway.observability.request_metrics import REQUESTS
from gateway.services.base import SnapshotService
from gateway.tls.pem import add_pem_certs
from gateway.tls.store import server_context
from gateway.twisted_ext.listen import raise_at_start
from gateway.workers.merge import MergedCollector, merge_expositions

log = Logger(namespace="gateway.metrics")


def tls_context(certificate: tuple[bytes, bytes], client_ca: bytes | None) -> SSL.Context:
    chain_pem, key_pem = certificate
    ctx = server_context(x509.load_pem_x509_certificates(chain_pem), key_pem)
    if client_ca:
        store = ctx.get_cert_store()
        assert store is not None
        add_pem_certs(store, client_ca)
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT)
    ctx.set_session_id(b"gateway-metrics")
    return ctx


@implementer(IOpenSSLServerConnectionCreator)
class SwappableTLS:
    """New connections use the newest context (material reloaded)."""

    def __init__(self, context: SSL.Context) -> None:
        self.context = context

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self.context, None)


Gather = Callable[[], Deferred[list[str]]]


class MetricsResource(Resource):
    isLeaf = True

    def __init__(self, gather: Gather | None = None) -> None:
        """``gather``: the expositions of other processes to merge with this one's
        (a supervisor's workers)."""
        super().__init__()  # type: ignore[no-untyped-call]
        self.credentials: tuple[str, str] | None = None
        self.gather = gather

    def render_GET(self, request: Request) -> bytes | int:
        if self.credentials is not None and not self._authorized(request):
            request.setResponseCode(401)
            request.setHeader(b"www-authenticate", b'Basic realm="metrics"')
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"metrics_basic_auth: credentials required\n"
        # the text format, or OpenMetrics when the scraper asks for it
        encoder, content_type = choose_encoder(
            (request.getHeader(b"accept") or b"").decode("latin-1"))
        request.setHeader(b"content-type", content_type.encode())
        if self.gather is None:
            return encoder(REGISTRY)
        gathering = self.gather()

        def write(texts: list[str]) -> None:
            merged = CollectorRegistry(auto_describe=False)
            own = generate_latest(REGISTRY).decode()
            merged.register(MergedCollector(merge_expositions([own, *texts])))
            request.write(encoder(merged))
            request.finish()

        def failed(failure: Failure) -> None:
            log.failure("metrics: merging the workers' metrics failed", failure)
            request.setResponseCode(500)
            request.write(b"metrics could not be gathered\n")
            request.finish()

        gathering.addCallback(write).addErrback(failed)
        return NOT_DONE_YET

    def _authorized(self, request: Request) -> bool:
        assert self.credentials is not None
        header = request.getHeader(b"authorization") or b""
        scheme, _, value = header.partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except ValueError:
            return False
        user, password = self.credentials
        expected = f"{user}:{password}".encode()
        return hmac.compare_digest(given, expected)


def count_requests(options: Options) -> None:
    """Count requests from now on if this process answers HTTP through its data plane
    (a process without one shows no empty request families)."""
    if options.runs("proxy") or options.services == "authenticate":
        REQUESTS.enable(options.service_label)


class MetricsEndpointService(SnapshotService):
    label = "metrics"

    def __init__(self, source: ConfigSource, reactor: Any, *,
                 gather: Gather | None = None) -> None:
        super().__init__(source)
        snapshot = self.snapshot
        self.address = snapshot.options.metrics_address
        self.resource = MetricsResource(gather)
        self.tls: SwappableTLS | None = None
        material = snapshot.material
        factory: Any = Site(self.resource)
        factory.noisy = False
        factory.log = lambda request: None  # scrapes are not access-logged
        if material.metrics_certificate is not None:
            self.tls = SwappableTLS(tls_context(material.metrics_certificate,
                                                material.metrics_client_ca))
            factory = TLSMemoryBIOFactory(self.tls, False, factory)
        o = snapshot.options
        watch_config(lambda: source.status, o.service_label)
        if gather is None:  # (a supervisor's data plane is its workers')
            count_requests(o)
        listener = StreamServerEndpointService(
            server_endpoint(reactor, snapshot.options.metrics_address), factory)
        raise_at_start(listener)
        MultiService.addService(self, listener)

    def apply(self, snapshot: Snapshot) -> None:
        o, m = snapshot.options, snapshot.material
        if o.metrics_address != self.address:
            self.log.warn("metrics_address changed from {old} to {new}: restart to listen "
                          "on the new address", old=self.address, new=o.metrics_address)
        self.resource.credentials = m.metrics_basic_auth
        if self.tls is not None and m.metrics_certificate is not None:
            self.tls.context = tls_context(m.metrics_certificate, m.metrics_client_ca)
        elif (self.tls is None) != (m.metrics_certificate is None):
            self.log.warn("metrics TLS turned on or off: restart to apply it")
        super().apply(snapshot)

    def privilegedStartService(self) -> None:
        try:
            MultiService.privilegedStartService(self)
        except CannotListenError as exc:
            self.log.critical("metrics_address: cannot listen on {address}: {error}",
                              address=f"{exc.interface}:{exc.port}",
                              error=str(exc.socketError))
            raise SystemExit(1) from None
