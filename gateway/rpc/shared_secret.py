"""Shared-secret authentication of every gRPC call between the gateway's services.

The caller signs a short-lived JWT (HS256, keyed with ``shared_secret``) and sends it as
``authorization: Bearer …`` metadata; the server's interceptor checks it before any
handler runs. A process whose ``shared_secret`` differs from its peer's is the usual
cause of a refusal, so both sides say exactly that ("shared_secret differs") rather than
leaving a silent hang or a bare status code. Tokens are never logged.

The standard health service (``grpc.health.v1.Health``) is answered without a token:
load balancers and orchestrators probe it, and it tells nothing about the records.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import jwt

AUDIENCE = "gateway-grpc"
ISSUER = "gateway"
TOKEN_SECONDS = 60.0
LEEWAY_SECONDS = 30.0
REUSE_SECONDS = 20.0
HEADER = "authorization"
UNAUTHENTICATED_DETAIL = ("shared_secret differs: the call's token was missing or not "
                          "signed with this service's shared_secret")
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)


def mint(secret: bytes, now: float) -> str:
    """A token valid for ``TOKEN_SECONDS`` from ``now``."""
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "iat": int(now),
                       "exp": int(now + TOKEN_SECONDS)}, secret, algorithm="HS256")


def verify(token: str, secret: bytes, now: float) -> bool:
    """Whether ``token`` was signed with ``secret`` and is current at ``now``."""
    try:
        # Time is checked below against ``now`` (the caller's clock), not by PyJWT.
        claims = jwt.decode(token, secret, algorithms=["HS256"], audience=AUDIENCE,
                            issuer=ISSUER, options={"require": ["exp", "iat"],
                                                    "verify_exp": False, "verify_iat": False})
        issued, expires = float(claims["iat"]), float(claims["exp"])
    except (jwt.InvalidTokenError, TypeError, ValueError):
        return False
    return issued - LEEWAY_SECONDS <= now <= expires + LEEWAY_SECONDS

class CallCredentials:
    """The metadata a client sends: one token, re-minted when it nears its end."""

    def __init__(self, secret: bytes, clock: Callable[[], float] = time.time) -> None:
        self.secret = secret
        self.clock = clock
        self._token = ""
        self._minted = float("-inf")

    def metadata(self) -> tuple[tuple[str, str], ...]:
        now = self.clock()
        if now - self._minted > REUSE_SECONDS:
            self._token, self._minted = mint(self.secret, now), now
        return ((HEADER, f"Bearer {self._token}"),)


def bearer(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == HEADER and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):]
    return ""


Refused = Callable[[str, str], None]


class SharedSecretInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses, with ``UNAUTHENTICATED``, every call whose token does not verify with
    this process's ``shared_secret``; ``refused(method, peer)`` is told of each (the
    server logs it, rate-limited)."""

    def __init__(self, secret: bytes, refused: Refused,
                 clock: Callable[[], float] = time.time) -> None:
        self.secret = secret
        self.refused = refused
        self.clock = clock

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = details.method or ""
        if method.startswith(OPEN_PREFIXES):
            return await continuation(details)
        token = bearer(details.invocation_metadata)
        if token and verify(token, self.secret, self.clock()):
            return await continuation(details)
        self.refused(method, "missing token" if not token else "bad token")
        handler = await continuation(details)
        return _refusal(handler)


def _refusal(handler: Any) -> Any:
    """A handler of the same shape as ``handler`` that aborts with UNAUTHENTICATED."""

    async def abort_unary(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAIL)

    async def abort_stream(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAIL)
        yield  # pragma: no cover - abort raises

    if handler is None:
        return None
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            abort_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        abort_unary, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)
