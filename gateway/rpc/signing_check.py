"""Do the split processes publish the key authorize signs identity assertions with?

In split mode authorize signs the ``X-Gateway-Jwt-Assertion`` (its ``signing_key``), but
upstreams verify it with the key set that the proxy or authenticate process serves on
the JWKS endpoint (theirs). When the two ``signing_key`` settings differ (or one is
unset: an ephemeral key is published nowhere) every assertion fails verification
upstream, and nothing said so. Both sides now compare key ids (``kid``, the RFC 7638
thumbprint; "" for no ``signing_key``):

- per request, in the proxy (``RemoteAuthorizer``): every ``Check`` answer carries
  authorize's ``signing_kid``; an allow that passes an assertion while the kids differ
  becomes a 503 with a body that says so (fails closed; routes without
  ``pass_identity_headers`` carry no assertion and are unaffected). This also covers a
  reconnect to an authorize restarted with another key.
- at start and every ``RECHECK_SECONDS`` (``SigningKeyCheck``, in a proxy with
  ``authorize_service_url(s)`` and in authenticate when it is given them): one
  ``SigningKey`` call; the outcome is logged when it changes, an error naming
  ``signing_key`` on both sides when they differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Allow
from gateway.rpc.aio_thread import AsyncioThread
from gateway.rpc.failover import FailoverClient
from gateway.rpc.log_limit import MismatchLog
from gateway.rpc.protos import authorize_pb2 as pb

log = Logger(namespace="gateway.rpc")

ASSERTION = b"x-gateway-jwt-assertion"
RECHECK_SECONDS = 30.0
RETRY_SECONDS = (0.5, 10.0)

MISMATCH_BODY = ("This gateway's proxy and authorize services have different signing keys "
                 "(signing_key), so the identity passed to this application could not be "
                 "verified; ask an administrator.")


def published_kid(signer: AssertionSigner) -> str:
    """The kid of the key this process serves on its JWKS endpoint; "" for none."""
    return "" if signer.ephemeral else signer.kid


def describe(kid: str) -> str:
    return f"kid {kid}" if kid else "none (signing_key not set: an ephemeral key)"


def carries_assertion(decision: Allow) -> bool:
    return any(name.lower() == ASSERTION for name, _ in decision.headers)


def mismatch_message(process: str, ours: str, theirs: str) -> str:
    return (f"signing_key differs: authorize signs identity assertions with "
            f"{describe(theirs)}, this process ({process}) publishes "
            f"{describe(ours)} on its JWKS endpoint; upstreams cannot verify the "
            f"assertions, so routes that pass identity answer 503: give authorize and "
            f"every proxy and authenticate process the same signing_key (or "
            f"signing_key_file)")


class MismatchNotice:
    """One error line per pair of kids per ``log_limit.SECONDS`` (every request finds it)."""

    def __init__(self, process: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.process = process
        self.limit = MismatchLog(clock)

    def __call__(self, ours: str, theirs: str) -> None:
        if self.limit.due(ours, theirs):
            log.error("{message}", message=mismatch_message(self.process, ours, theirs),
                      ours=ours, theirs=theirs)


def authorize_mismatch_message(process: str, theirs: str, ours: str) -> str:
    """Authorize's side of the same line."""
    return (f"signing_key differs: a {process} process publishes {describe(theirs)} on "
            f"its JWKS endpoint, this authorize signs identity assertions with "
            f"{describe(ours)}; upstreams cannot verify them: give authorize and every "
            f"proxy and authenticate process the same signing_key (or signing_key_file)")


class AskedNotice:
    """Authorize's line for a process whose key differs: once per pair of kids and
    process per ``log_limit.SECONDS`` (every such process asks every ``RECHECK_SECONDS``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = MismatchLog(clock)

    def __call__(self, process: str, theirs: str, ours: str) -> None:
        if theirs != ours and self.limit.due(process, theirs, ours):
            log.error("{message}", message=authorize_mismatch_message(process or "gateway",
                                                                      theirs, ours),
                      ours=ours, theirs=theirs)


class SigningKeyCheck(Service):
    """Asks authorize for its key at start, retrying with backoff until it answers, then
    every ``RECHECK_SECONDS``; logs the outcome whenever it changes."""

    def __init__(self, reactor: Any, bridge: AsyncioThread, client: FailoverClient,
                 ours: Callable[[], str], process: str) -> None:
        self.reactor = reactor
        self.bridge = bridge
        self.client = client
        self.ours = ours  # this process's published kid, now (it follows reloads)
        self.process = process
        self.agreed: bool | None = None  # None until authorize has answered
        self._said: tuple[str, str] | None = None
        self._retry = RETRY_SECONDS[0]
        self._call: Deferred[Any] | None = None
        self._later: Any = None

    def startService(self) -> None:
        Service.startService(self)
        self._ask()

    def stopService(self) -> None:
        Service.stopService(self)
        if self._later is not None and self._later.active():
            self._later.cancel()
        if self._call is not None:
            self._call.cancel()

    def _ask(self) -> None:
        self._later = None
        request = pb.SigningKeyRequest(kid=self.ours(), process=self.process)
        d: Deferred[pb.SigningKeyResponse] = self.bridge.submit(
            lambda: self.client.invoke("SigningKey", request))
        self._call = d
        d.addCallbacks(self._answered, self._failed)

    def _answered(self, answer: pb.SigningKeyResponse) -> None:
        self._call = None
        self._retry = RETRY_SECONDS[0]
        ours, theirs = self.ours(), answer.kid
        self.agreed = ours == theirs
        if (ours, theirs) != self._said:
            self._said = (ours, theirs)
            if self.agreed:
                log.info("signing_key: this process and authorize use the same key "
                         "({published})", published=describe(ours))
            else:
                log.error("{message}", message=mismatch_message(self.process, ours, theirs),
                          ours=ours, theirs=theirs)
        self._schedule(RECHECK_SECONDS)

    def _failed(self, failure: Failure) -> None:
        self._call = None
        if not self.running:
            return
        # FailoverClient has said why (rate-limited); ask again, backing off.
        self._schedule(self._retry)
        self._retry = min(self._retry * 2, RETRY_SECONDS[1])

    def _schedule(self, seconds: float) -> None:
        if self.running:
            self._later = self.reactor.callLater(seconds, self._ask)
