"""Each identity provider's HTTPS trust (issue 42): a provider with ``ca_file`` is
verified against that file's CAs and nothing else; one without it against the system
store, which ``SSL_CERT_FILE`` changes as for any OpenSSL client. A real TLS listener
with a test CA's certificate, trial's reactor."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from twisted.internet import reactor, ssl
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from gateway.authenticate.clients import https_agent
from gateway.authenticate.oidc import OIDCError, Provider
from tests.support.otlp_receivers import make_tls

pytestmark = pytest.mark.integration


class Discovery(Resource):
    isLeaf = True
    issuer = ""

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"connection", b"close")  # no pooled connection left behind
        return json.dumps({
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/auth",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks"}).encode()


class ProviderTrustTests(TestCase):
    def setUp(self) -> None:
        # (not trial's mktemp: under pytest it is relative to the repository)
        directory = Path(tempfile.mkdtemp(prefix="gw-provider-tls-"))
        self.addCleanup(shutil.rmtree, directory, True)
        self.tls = make_tls(directory)
        other = directory / "other"
        other.mkdir()
        self.other_ca = make_tls(other).ca
        resource = Discovery()
        key = ssl.PrivateCertificate.loadPEM(self.tls.server_cert.read_text()
                                             + self.tls.server_key.read_text())
        port = reactor.listenSSL(0, Site(resource), key.options(), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        resource.issuer = self.issuer = f"https://127.0.0.1:{port.getHost().port}"

    def provider(self, ca: Path | None) -> Provider:
        # the system store: the agent treq makes without one (Twisted's browser-like
        # policy), its connections not kept (nothing left open after the test)
        agent = https_agent(reactor, ca.read_bytes()) if ca is not None else Agent(
            reactor, pool=HTTPConnectionPool(reactor, persistent=False))
        return Provider(reactor, self.issuer, "client", "secret", ("openid",), {},
                        "https://auth.example.com/oauth2/callback", agent=agent,
                        provider_id="corp")

    async def test_ca_file_is_trusted(self) -> None:
        metadata = await self.provider(self.tls.ca).metadata()
        self.assertEqual(metadata["issuer"], self.issuer)

    async def test_another_ca_is_not(self) -> None:
        with self.assertRaises(OIDCError) as caught:
            await self.provider(self.other_ca).metadata()
        self.assertIn("/.well-known/openid-configuration", str(caught.exception))

    async def test_the_system_store_does_not_know_the_test_ca(self) -> None:
        with self.assertRaises(OIDCError):
            await self.provider(None).metadata()

    async def test_ssl_cert_file_keeps_working(self) -> None:
        """Without ``ca_file``, OpenSSL's default paths: ``SSL_CERT_FILE`` names them."""
        self.patch(os, "environ", {**os.environ, "SSL_CERT_FILE": str(self.tls.ca)})
        os.putenv("SSL_CERT_FILE", str(self.tls.ca))
        self.addCleanup(os.unsetenv, "SSL_CERT_FILE")
        metadata = await self.provider(None).metadata()
        self.assertEqual(metadata["issuer"], self.issuer)
