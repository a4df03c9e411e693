"""Bearer keys over real HTTPS (issue 42): a test issuer on 127.0.0.1 with its own CA,
the gateway's fetch (the OIDC client's helpers, the provider's ``ca_file``) and a
provider's verifier. Keys rotate mid-test; the endpoint goes down and answers garbage
(the last good keys stay); an unknown ``kid`` refreshes at most once a minute (a Clock
for the schedule, the real reactor for the sockets); nothing unconfigured is fetched."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.internet.task import Clock
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.source import REFRESH, UNKNOWN_KID_INTERVAL, RemoteKeys
from gateway.bearer_jwt.verifier import Verifier
from gateway.bearer_jwt.verify import SIGNATURE, UNKNOWN_KID, Refused, Verified
from gateway.services.bearer_keys import provider_fetch
from tests.support.bearer_issuer import BearerIssuer
from tests.support.bearer_tokens import ec_key, mint_now, rsa_key

pytestmark = pytest.mark.integration

AUDIENCE = "https://gateway.example.test"


class IssuerOverHTTPS(TestCase):
    def setUp(self) -> None:
        self.server = BearerIssuer([(rsa_key(), "k1")])
        self.issuer = self.server.start()
        self.addCleanup(self.server.stop)
        self.clock = Clock()
        self.expect = BearerExpectations("ci", self.issuer, (AUDIENCE,))

    def source(self, ca_pem: bytes | None = None) -> RemoteKeys:
        fetch = provider_fetch(reactor, self.server.ca_pem if ca_pem is None else ca_pem)
        source = RemoteKeys("ci", self.issuer, fetch, self.clock)
        self.addCleanup(source.stop)
        return source

    def token(self, private: object = None, kid: str = "k1", alg: str = "RS256") -> str:
        return mint_now(private, kid, alg, iss=self.issuer, aud=AUDIENCE)

    def verifier(self, source: RemoteKeys) -> Verifier:
        return Verifier(self.expect, source, reactor.seconds)

    async def test_rotation_down_garbage_and_unknown_kid(self) -> None:
        source = self.source()
        await source.start()
        verifier = self.verifier(source)
        self.assertIsInstance(verifier.check(self.token()), Verified)
        self.assertEqual(self.server.asked, ["/.well-known/openid-configuration",
                                             "/.well-known/jwks"])

        # The issuer starts signing with a new key: the first token naming it refreshes.
        self.server.rotate([(rsa_key(), "k1"), (ec_key(), "k2")])
        self.clock.advance(UNKNOWN_KID_INTERVAL)
        new = self.token(ec_key(), "k2", "ES256")
        refused = verifier.check(new)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, UNKNOWN_KID)
        await source.try_now()  # the refresh the unknown kid started
        self.assertIsInstance(verifier.check(new), Verified)
        self.assertEqual(self.server.asked[-1], "/.well-known/jwks")

        # More unknown kids within the minute: no request reaches the issuer.
        asked = len(self.server.asked)
        for n in range(20):
            verifier.check(self.token(ec_key(), f"k{n + 3}", "ES256"))
        self.assertEqual(len(self.server.asked), asked)

        # Down, then 503, then garbage: the last good keys stay, tokens keep verifying.
        for mode in ("down", "error", "garbage", "redirect"):
            self.server.set_mode(mode)
            self.clock.advance(REFRESH)
            await source.try_now()
            self.assertGreater(source.failures, 0, mode)
            self.assertIsInstance(verifier.check(new), Verified, mode)
        self.assertNotIn("/moved-jwks", self.server.asked)  # a redirect is not followed
        self.assertNotIn("k-moved", source.keys.keys)

        # Back up: the backoff's next try takes the rotated set (k1 withdrawn).
        self.server.set_mode("ok")
        self.server.rotate([(ec_key(), "k2")])
        await source.try_now()
        self.assertEqual(source.failures, 0)
        self.assertEqual(list(source.keys.keys), ["k2"])
        refused = verifier.check(self.token())
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, UNKNOWN_KID)

    async def test_tls_against_the_provider_ca_only(self) -> None:
        """Without the provider's ``ca_file`` the issuer's certificate is not trusted
        (it is not in the system store): no keys."""
        other = BearerIssuer([]).ca_pem
        source = self.source(ca_pem=other)
        await source.start()
        self.assertEqual((dict(source.keys.keys), source.failures), ({}, 1))
        self.assertEqual(self.server.asked, [])

    async def test_a_key_of_another_issuer_is_refused(self) -> None:
        source = self.source()
        await source.start()
        refused = self.verifier(source).check(self.token(rsa_key("stranger")))
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, SIGNATURE)


FETCH_ONCE = """
import sys
from twisted.internet.defer import ensureDeferred
from twisted.internet.task import react
from gateway.services.bearer_keys import provider_fetch

async def main(reactor):
    body = await provider_fetch(reactor)(sys.argv[1])  # no ca_file: the system store
    print(len(body))

react(lambda reactor: ensureDeferred(main(reactor)))
"""


class SystemStore(TestCase):
    """Without a ``ca_file`` the system store decides, and ``SSL_CERT_FILE`` is part of
    it (OpenSSL reads it when the store is loaded: a fresh process for each case)."""

    def setUp(self) -> None:
        self.server = BearerIssuer([(rsa_key(), "k1")])
        self.issuer = self.server.start()
        self.addCleanup(self.server.stop)
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.server.ca_pem)

    async def fetch(self, **env: str) -> tuple[bytes, int]:
        environ = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
        out, _, code = await getProcessOutputAndValue(
            sys.executable, ["-c", FETCH_ONCE, f"{self.issuer}/.well-known/jwks"],
            env={**environ, **env}, path=str(Path(__file__).resolve().parents[2]))
        return out, code

    async def test_ssl_cert_file_is_trusted(self) -> None:
        out, code = await self.fetch(SSL_CERT_FILE=str(self.ca_file))
        self.assertEqual((code, int(out) > 100), (0, True))

    async def test_without_it_the_test_ca_is_not(self) -> None:
        _, code = await self.fetch()
        self.assertNotEqual(code, 0)


class LikeAnApiServer(TestCase):
    """``kubernetes:///`` in a cluster: the discovery document and keys are fetched with
    the pod's service-account token (read at each fetch: the kubelet rotates it), and
    the cluster's issuer is learned from the document."""

    async def test_token_sent_and_reread_issuer_learned(self) -> None:
        server = BearerIssuer([(rsa_key("cluster"), "c1")])
        issuer = server.start()
        self.addCleanup(server.stop)
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        token_file = directory / "token"
        token_file.write_text("sa-token-1\n")
        server.require("sa-token-1")
        clock = Clock()
        discovery = f"{issuer}/.well-known/openid-configuration"
        # the API server (the discovery URL's origin) serves the keys too: token and CA
        fetch = provider_fetch(reactor, None, str(token_file), api_url=discovery,
                               api_ca=server.ca_pem)
        source = RemoteKeys("cluster", "kubernetes:///", fetch, clock,
                            discovery_url=discovery, learn_issuer=True)
        self.addCleanup(source.stop)
        await source.start()
        self.assertEqual((source.keys.issuer, list(source.keys.keys)), (issuer, ["c1"]))
        verifier = Verifier(BearerExpectations("cluster", "kubernetes:///", ("gateway",)),
                            source, reactor.seconds)
        token = mint_now(rsa_key("cluster"), "c1", iss=issuer, aud="gateway",
                         sub="system:serviceaccount:prod:deployer",
                         **{"kubernetes.io": {"namespace": "prod"}})
        verified = verifier.check(token)
        assert isinstance(verified, Verified), verified
        self.assertEqual(verified.claims["kubernetes.io.namespace"], ("prod",))
        # the kubelet rotates the token: the next fetch sends the new one
        server.require("sa-token-2")
        token_file.write_text("sa-token-2\n")
        server.rotate([(rsa_key("cluster"), "c1"), (ec_key(), "c2")])
        clock.advance(REFRESH)
        await source.try_now()
        self.assertEqual((source.failures, list(source.keys.keys)), (0, ["c1", "c2"]))
        # a fetch without the right token is refused: the last good keys stay
        server.require("sa-token-3")
        clock.advance(REFRESH)
        await source.try_now()
        self.assertEqual((source.failures, list(source.keys.keys)), (1, ["c1", "c2"]))
