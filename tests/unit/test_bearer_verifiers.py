"""The snapshot's bearer verifiers (``gateway.services.bearer_providers``): one per
provider with ``bearer`` settings, its ``jwks_file`` found beside the configuration, its
key source kept across a reload that leaves the provider's keys where they were, a
``kubernetes:///`` provider outside a cluster refusing its tokens (and saying why), and
the key sources' health in the metrics."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.bearer_jwt.verify import UNKNOWN_KID, Refused, Verified
from gateway.config.snapshot import Snapshot, load_snapshot
from gateway.observability.metrics import REGISTRY
from gateway.services.bearer_providers import BearerVerifiers
from tests.support.bearer_tokens import NOW, jwks_bytes, mint, rsa_key

from .config.helpers import IDENTITY

ISSUER = "https://ci.example.test"


class VerifiersTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        (self.directory / "ci-jwks.json").write_bytes(jwks_bytes((rsa_key(), "k1")))
        self.reactor = MemoryReactorClock()
        self.reactor.advance(NOW)
        self.service = BearerVerifiers(self.reactor)
        self.service.startService()
        self.addCleanup(self.service.stopService)

    def snapshot(self, *providers: dict[str, Any]) -> Snapshot:
        path = self.directory / "gateway.yaml"
        path.write_text(yaml.safe_dump({
            **IDENTITY, "insecure_server": True,
            "shared_secret": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=",
            "cookie_secret": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=",
            "identity_providers": list(providers),
            "policy": [{"from": "https://app.test", "to": "http://127.0.0.1:9",
                        "identity_providers": [p["id"] for p in providers],
                        "policy": [{"allow": {"or": [{"accept": True}]}}]}]}))
        return load_snapshot(str(path), {})

    def ci(self, audience: str = "gw") -> dict[str, Any]:
        return {"id": "ci", "issuer": ISSUER, "jwks_file": "ci-jwks.json",
                "bearer": {"audiences": [audience]}}

    def test_a_verifier_per_provider_keys_kept_across_a_reload(self) -> None:
        verifiers = self.service.verifiers(self.snapshot(self.ci()))
        self.assertEqual(list(verifiers), ["ci"])
        token = mint(rsa_key(), "k1", iss=ISSUER, aud="gw")
        self.assertIsInstance(verifiers["ci"].check(token), Verified)
        source = self.service.sources["ci"]
        # a reload that changes the audience only: a new verifier, the same keys
        again = self.service.verifiers(self.snapshot(self.ci("other")))
        self.assertIsNot(again["ci"], verifiers["ci"])
        self.assertIs(self.service.sources["ci"], source)
        self.assertIsInstance(again["ci"].check(mint(rsa_key(), "k1", iss=ISSUER,
                                                     aud="other")), Verified)
        # the provider gone: its source stopped
        self.service.verifiers(self.snapshot({"id": "corp", "issuer": ISSUER,
                                              "client_id": "gw", "client_secret": "s"}))
        self.assertEqual(self.service.sources, {})

    def test_kubernetes_outside_a_cluster(self) -> None:
        logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, logged.append)
        verifiers = self.service.verifiers(self.snapshot(
            {"id": "cluster", "issuer": "kubernetes:///", "bearer": {"audiences": ["gw"]}}))
        refused = verifiers["cluster"].check(mint(rsa_key(), "k1", iss=ISSUER, aud="gw"))
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, UNKNOWN_KID)
        self.assertTrue(any("outside it, give the cluster's issuer" in str(e.get("why"))
                            for e in logged))

    def test_key_source_health_in_the_metrics(self) -> None:
        self.service.verifiers(self.snapshot(self.ci()))
        labels = {"provider": "ci"}
        self.assertEqual(REGISTRY.get_sample_value("gateway_bearer_keys", labels), 1)
        self.assertEqual(REGISTRY.get_sample_value(
            "gateway_bearer_keys_consecutive_failures", labels), 0)
        self.assertEqual(REGISTRY.get_sample_value(
            "gateway_bearer_keys_last_success_timestamp_seconds", labels), NOW)
        # the file turns to garbage: the last good keys stay, the failures show, the
        # last success is still the first read
        (self.directory / "ci-jwks.json").write_text("<html>")
        self.reactor.advance(5)
        self.assertEqual(REGISTRY.get_sample_value("gateway_bearer_keys", labels), 1)
        self.assertEqual(REGISTRY.get_sample_value(
            "gateway_bearer_keys_consecutive_failures", labels), 1)
        self.assertEqual(REGISTRY.get_sample_value(
            "gateway_bearer_keys_last_success_timestamp_seconds", labels), NOW)
