"""One unary call to a service that has several URLs: client-side failover within one
deadline (``grpc_client_timeout``), rounds over the URLs again while they are only
unreachable, the URL that answered kept first, and each URL's failures said once in a
while.

grpc's own reconnect backoff (``channels``) brings a restarted service back without a
restart here; this module only decides which URL to try and what to log. The caller
turns ``Unavailable`` into its own answer (a 503, never an allow).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
from twisted.logger import Logger

from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.channels import ServiceTarget, open_channel, parse_service_url
from gateway.rpc.metrics import observe_client
from gateway.rpc.shared_secret import CallCredentials

log = Logger(namespace="gateway.rpc")

FAILOVER_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                  grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.CANCELLED,
                  grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
REPORT_SECONDS = 10.0
RETRY_PAUSE = (0.1, 1.0)  # between rounds while every URL is unreachable
MAX_ROUNDS = 1_000


def is_transient(code: Any, details: str) -> bool:
    """Worth another round: the service is unreachable (restarting, a connection being
    re-made), but not because its certificate is refused, which no retry mends."""
    low = details.lower()
    return bool(code == grpc.StatusCode.UNAVAILABLE and not any(
        sign in low for sign in ("handshake", "verification")))


class Unavailable(Exception):
    """No URL of the service answered within the deadline."""


class FailoverClient:
    """Stubs for every URL of one service (``label``: how log lines name it); call
    ``invoke`` on the bridge's loop."""

    def __init__(self, bridge: AsyncioThread, label: str, service: str,
                 make_stub: Callable[[Any], Any], urls: tuple[str, ...], secret: bytes,
                 timeout: float, ca: bytes | None = None, override_name: str = "",
                 round_robin: bool = True, process: str = "gateway",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ValueError(f"no {label}_service_url")
        self.bridge = bridge
        self.label = label
        self.service = service  # full gRPC service name, for the metrics
        self.make_stub = make_stub
        self.targets: tuple[ServiceTarget, ...] = tuple(parse_service_url(u) for u in urls)
        self.credentials = CallCredentials(secret)
        self.timeout = timeout
        self.ca = ca
        self.override_name = override_name
        self.round_robin = round_robin
        self.process = process  # the metrics' service label (Options.service_label)
        self.clock = clock
        self.preferred = 0
        self._stubs: dict[int, Any] = {}
        self._channels: dict[int, Any] = {}
        self._reported: dict[str, float] = {}
        self._closed = False

    def stub(self, index: int) -> Any:
        """The stub of URL ``index`` (its channel opened on first use; never after
        ``close``: a call made while the process stops must not open a new one)."""
        if self._closed:
            raise Unavailable(f"{self.label} client closed")
        stub = self._stubs.get(index)
        if stub is None:
            channel = open_channel(self.targets[index], self.ca, self.override_name,
                                   self.round_robin)
            self._channels[index] = channel
            stub = self._stubs[index] = self.make_stub(channel)
        return stub

    async def invoke(self, method: str, request: Any,
                     metadata: tuple[tuple[str, str], ...] = ()) -> Any:
        """The call on the preferred URL, then on each other one, within one deadline
        (``grpc_client_timeout``). While every URL is only unreachable (UNAVAILABLE: a
        service restarting, a connection being re-made), the round is tried again after
        a pause until the deadline: the reference's "retries during transient failures
        for this duration". A refusal or an error answer ends the call at once.
        ``metadata`` goes beside the token (a traceparent)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        pause = RETRY_PAUSE[0]
        errors: list[str] = []
        for _ in range(MAX_ROUNDS):
            tried: list[str] = []
            answered, answer, transient = await self._round(method, request, deadline,
                                                            tried, metadata)
            if answered:
                return answer
            errors = tried or errors
            remaining = deadline - loop.time()
            if not transient or remaining <= 0:
                break
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, RETRY_PAUSE[1])
        raise Unavailable(f"no {self.label} answered: " + "; ".join(errors or ["timed out"]))

    async def _round(self, method: str, request: Any, deadline: float, errors: list[str],
                     metadata: tuple[tuple[str, str], ...] = ()) -> tuple[bool, Any, bool]:
        """(answered, answer, every failure transient) after trying each URL once."""
        loop = asyncio.get_running_loop()
        count = len(self.targets)
        transient = True
        for step in range(count):
            index = (self.preferred + step) % count
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False, None, False
            started = time.monotonic()
            try:
                answer = await getattr(self.stub(index), method)(
                    request, timeout=remaining,
                    metadata=self.credentials.metadata() + metadata)
            except grpc.aio.AioRpcError as exc:
                observe_client(f"/{self.service}/{method}", exc.code().name, started,
                               request, None, self.process)
                self.note_failure(index, exc.code(), exc.details() or "")
                errors.append(f"{self.targets[index].url}: {exc.code().name} "
                              f"{exc.details() or ''}".rstrip())
                transient = transient and is_transient(exc.code(), exc.details() or "")
                if exc.code() not in FAILOVER_CODES:
                    return False, None, False
                continue
            observe_client(f"/{self.service}/{method}", "OK", started, request, answer,
                           self.process)
            if index != self.preferred:
                self.bridge.report(log.info, "{label}: now using {url}", label=self.label,
                                   url=self.targets[index].url)
                self.preferred = index
            return True, answer, False
        return False, None, transient

    def note_failure(self, index: int, code: Any, details: str) -> None:
        """Say what failed, once per ``REPORT_SECONDS`` per URL and kind."""
        url = self.targets[index].url
        key = f"{url} {code}"
        now = self.clock()
        if now - self._reported.get(key, float("-inf")) < REPORT_SECONDS:
            return
        self._reported[key] = now
        if code == grpc.StatusCode.UNAUTHENTICATED:
            self.bridge.report(
                log.error, "{label} at {url} refused this process's calls: shared_secret "
                "differs between this process and the {label}; set the same shared_secret "
                "on every gateway process", label=self.label, url=url)
        else:
            self.bridge.report(log.warn, "{label} at {url} failed: {code} {details}",
                               label=self.label, url=url, code=code.name, details=details)

    async def close(self) -> None:
        self._closed = True
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            await channel.close()
