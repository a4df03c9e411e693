"""OTLP collectors on loopback, plain or TLS requiring a client certificate
(``make_tls``): one over HTTP (protobuf bodies POSTed to ``/v1/traces``, ``/v1/metrics``,
``/v1/logs``) and one over gRPC (the ``TraceService``, ``MetricsService`` and
``LogsService`` of ``opentelemetry.proto.collector``), each decoding the real protobuf
messages with the ``opentelemetry-proto`` package: nothing of the gateway's exporters is
mocked or reused to read what they send.

Both record every request (path or gRPC method, headers, decoded message) and can be
told to answer slowly (``delay``, a hung collector) or to refuse (``refuse``: HTTP 503 /
gRPC ``UNAVAILABLE``). ``spans()``, ``metrics()`` and ``logs()`` flatten what arrived
into plain values for assertions; spans as ``trace_collectors.Span``.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import ssl
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.support.processes import free_port
from tests.support.trace_collectors import Span

_KINDS = {1: None, 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_REQUESTS: dict[str, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
}


@dataclass
class Tls:
    """PEM files of a test CA, a server certificate for 127.0.0.1 and a client
    certificate, all signed by the CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls(directory: Path) -> Tls:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "otlp test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(name: str, usage: x509.ObjectIdentifier, san: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    files = {}
    server = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, True)
    client = leaf("gateway", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    for name, data in (("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
                       ("server.pem", server[0]), ("server.key", server[1]),
                       ("client.pem", client[0]), ("client.key", client[1])):
        path = directory / name
        path.write_bytes(data)
        files[name] = path
    return Tls(files["ca.pem"], files["server.pem"], files["server.key"], files["client.pem"],
               files["client.key"])


@dataclass
class Export:
    signal: str  # traces, metrics, logs
    headers: dict[str, str]
    message: Any  # the decoded Export*ServiceRequest


@dataclass
class Point:
    """One metric data point: the metric's name and kind, its attributes and value
    (a number, or for a histogram its count)."""

    name: str
    kind: str  # sum, gauge, histogram, summary
    attributes: dict[str, str]
    value: float
    resource: dict[str, str] = field(default_factory=dict)


@dataclass
class LogRecord:
    body: Any
    attributes: dict[str, Any]
    severity: str
    trace_id: int
    resource: dict[str, str]
    scope: str


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    return getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = any_value(kv.value)
    return out


class _Receiver:
    """``tls``: serve TLS with its server certificate and require a client certificate
    its CA signed."""

    def __init__(self, delay: float = 0.0, refuse: bool = False, tls: Tls | None = None
                 ) -> None:
        self.delay = delay
        self.refuse = refuse
        self.tls = tls
        self.exports: list[Export] = []
        self.lock = threading.Lock()

    def record(self, signal: str, headers: dict[str, str], message: Any) -> None:
        with self.lock:
            self.exports.append(Export(signal, headers, message))

    def received(self, signal: str) -> list[Export]:
        with self.lock:
            return [e for e in self.exports if e.signal == signal]

    def spans(self) -> list[Span]:
        out = []
        for export in self.received("traces"):
            for rs in export.message.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        tags = {k: _text(v) for k, v in attributes(s.attributes).items()}
                        start = s.start_time_unix_nano // 1000
                        out.append(Span(
                            trace_id=int.from_bytes(s.trace_id, "big"),
                            span_id=int.from_bytes(s.span_id, "big"),
                            parent_id=int.from_bytes(s.parent_span_id, "big")
                            if s.parent_span_id else 0,
                            name=s.name, kind=_KINDS.get(s.kind), start_us=start,
                            duration_us=s.end_time_unix_nano // 1000 - start, tags=tags,
                            error=s.status.code == 2))
        return out

    def span_resources(self) -> list[dict[str, Any]]:
        return [attributes(rs.resource.attributes) for export in self.received("traces")
                for rs in export.message.resource_spans]

    def metrics(self) -> list[Point]:
        out = []
        for export in self.received("metrics"):
            for rm in export.message.resource_metrics:
                resource = {k: str(v) for k, v in attributes(rm.resource.attributes).items()}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        data = getattr(m, kind)
                        for p in data.data_points:
                            labels = {k: str(v) for k, v in attributes(p.attributes).items()}
                            if kind in ("sum", "gauge"):
                                value = p.as_double if p.WhichOneof("value") == "as_double" \
                                    else float(p.as_int)
                            else:
                                value = float(p.count)
                            out.append(Point(m.name, kind, labels, value, resource))
        return out

    def logs(self) -> list[LogRecord]:
        out = []
        for export in self.received("logs"):
            for rl in export.message.resource_logs:
                resource = {k: str(v) for k, v in attributes(rl.resource.attributes).items()}
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        out.append(LogRecord(any_value(r.body), attributes(r.attributes),
                                             r.severity_text, int.from_bytes(r.trace_id, "big")
                                             if r.trace_id else 0, resource, sl.scope.name))
        return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class HttpReceiver(_Receiver):
    """OTLP/HTTP with protobuf bodies."""

    def __enter__(self) -> HttpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                signal = self.path.rsplit("/", 1)[-1]
                headers = {k.lower(): v for k, v in self.headers.items()}
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.refuse or signal not in _REQUESTS or \
                        headers.get("content-type") != "application/x-protobuf":
                    self.send_response(503 if receiver.refuse else 400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                message = _REQUESTS[signal]()
                message.ParseFromString(body)
                receiver.record(signal, headers, message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.server_cert, self.tls.server_key)
            context.load_verify_locations(self.tls.ca)
            context.verify_mode = ssl.CERT_REQUIRED
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver(_Receiver):
    """OTLP/gRPC, plain text on loopback."""

    def _answer(self, signal: str, request: Any, context: grpc.ServicerContext,
                response: Any) -> Any:
        headers = {k: v for k, v in context.invocation_metadata()
                   if isinstance(v, str)}
        if self.delay:
            time.sleep(self.delay)
        if self.refuse:
            context.abort(grpc.StatusCode.UNAVAILABLE, "refusing")
        self.record(signal, headers, request)
        return response

    def __enter__(self) -> GrpcReceiver:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
                return receiver._answer("traces", request, context,
                                        trace_service_pb2.ExportTraceServiceResponse())

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
                return receiver._answer("metrics", request, context,
                                        metrics_service_pb2.ExportMetricsServiceResponse())

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
                return receiver._answer("logs", request, context,
                                        logs_service_pb2.ExportLogsServiceResponse())

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        self.port = free_port()
        if self.tls is not None:
            credentials = grpc.ssl_server_credentials(
                [(self.tls.server_key.read_bytes(), self.tls.server_cert.read_bytes())],
                root_certificates=self.tls.ca.read_bytes(), require_client_auth=True)
            self.server.add_secure_port(f"127.0.0.1:{self.port}", credentials)
        else:
            self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0)
