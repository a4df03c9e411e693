"""What the gateway reads from an identity provider is bounded: a discovery document
(or any answer) past ``MAX_PROVIDER_BODY`` is an error naming the request, not a buffer
that grows with whatever the other side sends. Real sockets, trial's reactor."""

from __future__ import annotations

import json

import pytest
from treq.api import get_global_pool
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from gateway.authenticate.oidc import MAX_PROVIDER_BODY, OIDCError, Provider

pytestmark = pytest.mark.integration


class Discovery(Resource):
    isLeaf = True

    def __init__(self, padding: int) -> None:
        super().__init__()
        self.padding = padding
        self.issuer = ""

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"connection", b"close")  # no pooled connection left behind
        return json.dumps({
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/auth",
            "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
            "pad": "x" * self.padding}).encode()


def close_pool() -> object:
    pool = get_global_pool()
    return pool.closeCachedConnections() if pool is not None else None


class ProviderBodyLimitTests(TestCase):
    def serve(self, padding: int) -> str:
        resource = Discovery(padding)
        port = reactor.listenTCP(0, Site(resource), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.addCleanup(close_pool)
        resource.issuer = f"http://127.0.0.1:{port.getHost().port}"
        return resource.issuer

    def provider(self, issuer: str) -> Provider:
        return Provider(reactor, issuer, "client", "secret", ("openid",), {},
                        "https://auth.example.com/oauth2/callback")

    async def test_normal_document_read(self) -> None:
        metadata = await self.provider(self.serve(1000)).metadata()
        self.assertEqual(len(metadata["pad"]), 1000)

    async def test_oversized_document_refused(self) -> None:
        issuer = self.serve(MAX_PROVIDER_BODY + 1)
        with self.assertRaises(OIDCError) as caught:
            await self.provider(issuer).metadata()
        self.assertIn("larger than 1024 KiB", str(caught.exception))
        self.assertIn("/.well-known/openid-configuration", str(caught.exception))
