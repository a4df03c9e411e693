"""Shared-secret tokens of gRPC calls: what verifies, what does not, and the interceptor's
refusal (UNAUTHENTICATED, "shared_secret differs")."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import jwt
import pytest

from gateway.rpc import shared_secret

SECRET = b"k" * 32
OTHER = b"o" * 32
NOW = 1_800_000_000.0


def test_a_token_verifies_with_the_same_secret_only() -> None:
    token = shared_secret.mint(SECRET, NOW)
    assert shared_secret.verify(token, SECRET, NOW)
    assert not shared_secret.verify(token, OTHER, NOW)


def test_a_token_is_short_lived() -> None:
    token = shared_secret.mint(SECRET, NOW)
    assert shared_secret.verify(token, SECRET, NOW + shared_secret.TOKEN_SECONDS)
    late = NOW + shared_secret.TOKEN_SECONDS + shared_secret.LEEWAY_SECONDS + 1
    assert not shared_secret.verify(token, SECRET, late)
    assert not shared_secret.verify(token, SECRET, NOW - shared_secret.LEEWAY_SECONDS - 1)


def test_other_algorithms_and_audiences_are_refused() -> None:
    unsigned = jwt.encode({"aud": shared_secret.AUDIENCE, "iss": shared_secret.ISSUER,
                           "iat": int(NOW), "exp": int(NOW + 60)}, None, algorithm="none")
    assert not shared_secret.verify(unsigned, SECRET, NOW)
    other_aud = jwt.encode({"aud": "elsewhere", "iss": shared_secret.ISSUER, "iat": int(NOW),
                            "exp": int(NOW + 60)}, SECRET, algorithm="HS256")
    assert not shared_secret.verify(other_aud, SECRET, NOW)
    assert not shared_secret.verify("not a token", SECRET, NOW)


def test_credentials_reuse_a_token_then_mint_a_new_one() -> None:
    clock = [NOW]
    creds = shared_secret.CallCredentials(SECRET, clock=lambda: clock[0])
    first = creds.metadata()
    assert first[0][0] == "authorization" and first[0][1].startswith("Bearer ")
    clock[0] += 1
    assert creds.metadata() == first
    clock[0] += shared_secret.REUSE_SECONDS + 1
    second = creds.metadata()
    assert second != first
    assert shared_secret.verify(shared_secret.bearer(second), SECRET, clock[0])


def _details(method: str, metadata: tuple[tuple[str, str], ...]) -> Any:
    return SimpleNamespace(method=method, invocation_metadata=metadata)


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple[Any, str] | None = None

    async def abort(self, code: Any, detail: str) -> None:
        self.aborted = (code, detail)
        raise RuntimeError("aborted")


async def _handler(request: Any, context: Any) -> str:
    return "answered"


def _intercept(metadata: tuple[tuple[str, str], ...], method: str = "/x.Y/Get"
               ) -> tuple[Any, list[tuple[str, str]]]:
    refused: list[tuple[str, str]] = []
    interceptor = shared_secret.SharedSecretInterceptor(
        SECRET, lambda m, why: refused.append((m, why)), clock=lambda: NOW)
    real = grpc.unary_unary_rpc_method_handler(_handler)

    async def continuation(details: Any) -> Any:
        return real

    handler = asyncio.run(interceptor.intercept_service(continuation, _details(method, metadata)))
    return handler, refused


def test_the_interceptor_passes_a_good_token() -> None:
    handler, refused = _intercept((("authorization", f"Bearer {shared_secret.mint(SECRET, NOW)}"),))
    assert refused == []
    assert asyncio.run(handler.unary_unary(None, _Context())) == "answered"


@pytest.mark.parametrize("metadata, why", [
    ((), "missing token"),
    ((("authorization", f"Bearer {shared_secret.mint(OTHER, NOW)}"),), "bad token"),
])
def test_the_interceptor_refuses_a_missing_or_foreign_token(metadata: Any, why: str) -> None:
    handler, refused = _intercept(metadata)
    assert refused == [("/x.Y/Get", why)]
    context = _Context()
    with pytest.raises(RuntimeError):
        asyncio.run(handler.unary_unary(None, context))
    assert context.aborted is not None
    code, detail = context.aborted
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "shared_secret differs" in detail


def test_health_checks_need_no_token() -> None:
    handler, refused = _intercept((), method="/grpc.health.v1.Health/Check")
    assert refused == []
    assert asyncio.run(handler.unary_unary(None, _Context())) == "answered"
