"""The reference's ``grpc_client_*`` and ``grpc_server_*`` metrics, in the process registry.

Observed on the gRPC thread (prometheus-client's metrics take their own locks). Labels:
the gRPC service and method, the status code's name, and ``service``: this process's
``Options.service_label`` (``gateway-databroker``, ``gateway-proxy``...), as every other family.
A server-streaming call is one request whose response size is the sum of its messages.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

from gateway.observability.metrics import REGISTRY

DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
SIZE_BUCKETS = (0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)

CLIENT_LABELS = ["grpc_service", "grpc_method", "grpc_client_status", "service"]
SERVER_LABELS = ["grpc_service", "grpc_method", "grpc_server_status", "service"]

CLIENT_DURATION = Histogram("grpc_client_request_duration_ms",
                            "Duration of outgoing gRPC calls.", CLIENT_LABELS,
                            registry=REGISTRY, buckets=DURATION_BUCKETS)
CLIENT_REQUEST_SIZE = Histogram("grpc_client_request_size_bytes",
                                "Size of outgoing gRPC requests.", CLIENT_LABELS,
                                registry=REGISTRY, buckets=SIZE_BUCKETS)
CLIENT_RESPONSE_SIZE = Histogram("grpc_client_response_size_bytes",
                                 "Size of gRPC responses received.", CLIENT_LABELS,
                                 registry=REGISTRY, buckets=SIZE_BUCKETS)
CLIENT_REQUESTS = Counter("grpc_client_requests", "Outgoing gRPC calls.", CLIENT_LABELS,
                          registry=REGISTRY)
SERVER_DURATION = Histogram("grpc_server_request_duration_ms",
                            "Duration of gRPC calls served.", SERVER_LABELS,
                            registry=REGISTRY, buckets=DURATION_BUCKETS)
SERVER_REQUEST_SIZE = Histogram("grpc_server_request_size_bytes",
                                "Size of gRPC requests served.", SERVER_LABELS,
                                registry=REGISTRY, buckets=SIZE_BUCKETS)
SERVER_RESPONSE_SIZE = Histogram("grpc_server_response_size_bytes",
                                 "Size of gRPC responses sent.", SERVER_LABELS,
                                 registry=REGISTRY, buckets=SIZE_BUCKETS)
SERVER_REQUESTS = Counter("grpc_server_requests", "gRPC calls served.", SERVER_LABELS,
                          registry=REGISTRY)


def split_method(full: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` → (``pkg.Service``, ``Method``)."""
    _, _, rest = full.partition("/")
    service, _, method = rest.partition("/")
    return service, method


def _size(message: Any) -> int:
    size = getattr(message, "ByteSize", None)
    return int(size()) if size is not None else 0


def observe_client(full_method: str, status: str, started: float, request: Any,
                   response: Any, service: str) -> None:
    labels = (*split_method(full_method), status, service)
    CLIENT_REQUESTS.labels(*labels).inc()
    CLIENT_DURATION.labels(*labels).observe((time.monotonic() - started) * 1000)
    CLIENT_REQUEST_SIZE.labels(*labels).observe(_size(request))
    CLIENT_RESPONSE_SIZE.labels(*labels).observe(_size(response))


def _observe_server(full_method: str, status: str, started: float, request_size: int,
                    response_size: int, service: str) -> None:
    labels = (*split_method(full_method), status, service)
    SERVER_REQUESTS.labels(*labels).inc()
    SERVER_DURATION.labels(*labels).observe((time.monotonic() - started) * 1000)
    SERVER_REQUEST_SIZE.labels(*labels).observe(request_size)
    SERVER_RESPONSE_SIZE.labels(*labels).observe(response_size)


def _status(context: Any, exc: BaseException | None) -> str:
    code = None
    try:
        code = context.code()
    except Exception:  # not every context can say
        code = None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if exc is None:
        return "OK"
    return "CANCELLED" if isinstance(exc, Exception) and "Cancel" in type(exc).__name__ \
        else "UNKNOWN"


class ServerMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times and sizes every call, refused ones included (it runs before the
    shared-secret check and wraps whatever handler that check returns)."""

    def __init__(self, service: str) -> None:
        self.service = service

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method or ""
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return handler

    def _unary(self, method: str, behaviour: Any) -> Any:
        async def observed(request: Any, context: Any) -> Any:
            started, failure, response = time.monotonic(), None, None
            try:
                response = await behaviour(request, context)
                return response
            except BaseException as exc:
                failure = exc
                raise
            finally:
                _observe_server(method, _status(context, failure), started, _size(request),
                                _size(response), self.service)
        return observed

    def _stream(self, method: str, behaviour: Any) -> Any:
        async def observed(request: Any, context: Any) -> AsyncIterator[Any]:
            started, failure, sent = time.monotonic(), None, 0
            try:
                async for message in behaviour(request, context):
                    sent += _size(message)
                    yield message
            except BaseException as exc:
                failure = exc
                raise
            finally:
                _observe_server(method, _status(context, failure), started, _size(request),
                                sent, self.service)
        return observed
