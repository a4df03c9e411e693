"""The presets (issue 42): GitHub Actions and ``kubernetes:///``, against saved discovery
documents and key sets shaped exactly like theirs (``bearer_presets/``: GitHub's
discovery document as it serves it; key sets with their members, ``kid`` forms and
``x5c``/``x5t``, holding test keys), with tokens carrying the claims their documentation
lists."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.bearer_jwt.expect import KUBERNETES, BearerExpectations
from gateway.bearer_jwt.presets import (
    GITHUB_ACTIONS,
    GITHUB_ACTIONS_CLAIMS,
    KUBERNETES_CLAIMS,
    SERVICE_ACCOUNT,
    preset,
)
from gateway.bearer_jwt.source import FileKeys, RemoteKeys
from gateway.bearer_jwt.verify import ISSUER, Refused, Verified, verify
from gateway.services import bearer_keys
from gateway.services.bearer_keys import key_source
from tests.support.bearer_tokens import NOW, rsa_key, sign

SAVED = Path(__file__).parent / "bearer_presets"
CLUSTER_ISSUER = "https://kubernetes.default.svc.cluster.local"


def saved(name: str) -> bytes:
    return (SAVED / name).read_bytes()


def with_test_key(document: bytes, private: rsa.RSAPrivateKey) -> bytes:
    """The saved key set with its one key's modulus replaced by a test key's, every other
    member (``kid``, ``alg``, ``use``, ``x5c``, ``x5t``) as saved: the ``x5c`` no longer
    matches, which changes nothing (keys come from ``n``/``e`` only)."""
    data = json.loads(document)
    public = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    data["keys"][0].update(n=public["n"], e=public["e"])
    return json.dumps(data).encode()


class Saved:
    def __init__(self, table: dict[str, bytes]) -> None:
        self.table = table

    async def __call__(self, url: str) -> bytes:
        return self.table[url]


def github_claims(**extra: Any) -> dict[str, Any]:
    """The example payload of GitHub's OIDC reference, with our audience."""
    return {
        "jti": "example-id", "sub": "repo:octo-org/octo-repo:environment:prod",
        "environment": "prod", "aud": "https://gateway.example.com",
        "ref": "refs/heads/main", "sha": "example-sha", "repository": "octo-org/octo-repo",
        "repository_owner": "octo-org", "actor_id": "12", "repository_visibility": "private",
        "repository_id": "74", "repository_owner_id": "65", "run_id": "example-run-id",
        "run_number": "10", "run_attempt": "2", "runner_environment": "github-hosted",
        "actor": "octocat", "workflow": "example-workflow", "head_ref": "", "base_ref": "",
        "event_name": "workflow_dispatch", "ref_type": "branch",
        "job_workflow_ref": "octo-org/octo-automation/.github/workflows/oidc.yml@refs/heads/main",
        "iss": GITHUB_ACTIONS, "nbf": int(NOW) - 5, "exp": int(NOW) + 300, "iat": int(NOW),
        **extra}


def kubernetes_claims(**extra: Any) -> dict[str, Any]:
    """A projected service-account token's payload (Kubernetes 1.30+)."""
    return {
        "aud": ["gateway"], "exp": int(NOW) + 3600, "iat": int(NOW), "nbf": int(NOW),
        "iss": CLUSTER_ISSUER, "jti": "5c1f5c1e-0000-4000-8000-000000000001",
        "kubernetes.io": {
            "namespace": "prod",
            "node": {"name": "node-1", "uid": "6f4a2c8e-0000-4000-8000-000000000002"},
            "pod": {"name": "deploy-7f9c", "uid": "9b1d7f3a-0000-4000-8000-000000000003"},
            "serviceaccount": {"name": "deployer",
                               "uid": "1e2d3c4b-0000-4000-8000-000000000004"}},
        "sub": "system:serviceaccount:prod:deployer", **extra}


class GitHubActions(SynchronousTestCase):
    def setUp(self) -> None:
        self.private = rsa_key("github")
        self.jwks = with_test_key(saved("github-actions-jwks.json"), self.private)
        known = preset(GITHUB_ACTIONS)
        assert known is not None
        self.source = RemoteKeys("github-actions", GITHUB_ACTIONS, Saved({
            known.discovery_url: saved("github-actions-openid-configuration.json"),
            f"{GITHUB_ACTIONS}/.well-known/jwks": self.jwks}), Clock(),
            discovery_url=known.discovery_url)
        self.successResultOf(self.source.start())
        self.source.stop()
        self.expect = BearerExpectations("github-actions", GITHUB_ACTIONS,
                                         ("https://gateway.example.com",))

    def token(self, **extra: Any) -> str:
        key = json.loads(self.jwks)["keys"][0]
        header = {"typ": "JWT", "alg": "RS256", "x5t": key["x5t"], "kid": key["kid"]}
        return sign(header, github_claims(**extra), self.private, "RS256")

    def test_saved_key_set_as_github_serves_it(self) -> None:
        keys = self.source.keys
        self.assertEqual(keys.skipped, ())
        (kid, key), = keys.keys.items()
        self.assertRegex(kid, r"^[0-9A-F]{40}$")  # an upper-case SHA-1 thumbprint
        self.assertEqual(key.algorithms, ("RS256",))  # the JWK's own alg

    def test_a_job_token(self) -> None:
        result = verify(self.token(), self.source.keys, self.expect, NOW)
        assert isinstance(result, Verified), result
        self.assertEqual(result.sub, "repo:octo-org/octo-repo:environment:prod")
        self.assertEqual(result.email, "")
        for claim in ("repository", "ref", "workflow", "environment", "job_workflow_ref",
                      "repository_owner_id", "runner_environment", "event_name"):
            self.assertEqual(result.claims[claim], (github_claims()[claim],))
            self.assertIn(claim, GITHUB_ACTIONS_CLAIMS)

    def test_the_default_audience_names_no_service(self) -> None:
        refused = verify(self.token(aud="https://github.com/octo-org"), self.source.keys,
                         self.expect, NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, "audience")

    def test_every_documented_claim_is_in_the_discovery_document(self) -> None:
        supported = json.loads(saved("github-actions-openid-configuration.json"))[
            "claims_supported"]
        self.assertEqual(set(GITHUB_ACTIONS_CLAIMS) - set(supported), set())


class Kubernetes(SynchronousTestCase):
    def setUp(self) -> None:
        self.private = rsa_key("cluster")
        self.jwks = with_test_key(saved("kubernetes-jwks.json"), self.private)
        self.discovery = json.loads(saved("kubernetes-openid-configuration.json"))
        self.expect = BearerExpectations("cluster", KUBERNETES, ("gateway",))
        self.known = preset(KUBERNETES)
        assert self.known is not None

    def token(self, **extra: Any) -> str:
        kid = json.loads(self.jwks)["keys"][0]["kid"]
        return sign({"alg": "RS256", "kid": kid}, kubernetes_claims(**extra), self.private,
                    "RS256")

    def in_cluster(self) -> RemoteKeys:
        assert self.known is not None
        source = RemoteKeys("cluster", KUBERNETES, Saved({
            self.known.discovery_url: saved("kubernetes-openid-configuration.json"),
            self.discovery["jwks_uri"]: self.jwks}), Clock(),
            discovery_url=self.known.discovery_url, learn_issuer=True)
        self.successResultOf(source.start())
        source.stop()
        return source

    def test_issuer_learned_from_the_api_server(self) -> None:
        keys = self.in_cluster().keys
        self.assertEqual(keys.issuer, CLUSTER_ISSUER)
        result = verify(self.token(), keys, self.expect, NOW)
        assert isinstance(result, Verified), result
        self.assertEqual(result.sub, "system:serviceaccount:prod:deployer")
        for claim in KUBERNETES_CLAIMS:
            if claim != "sub":
                self.assertIn(claim, result.claims)
        self.assertEqual(result.claims["kubernetes.io.namespace"], ("prod",))
        self.assertEqual(result.claims["kubernetes.io.serviceaccount.name"], ("deployer",))

    def test_another_clusters_issuer_is_refused(self) -> None:
        refused = verify(self.token(iss="https://other-cluster.example"),
                         self.in_cluster().keys, self.expect, NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, ISSUER)

    def test_issuer_not_learned_yet_refuses_everything(self) -> None:
        refused = verify(self.token(), with_learned("", self.in_cluster()), self.expect, NOW)
        assert isinstance(refused, Refused)
        self.assertEqual(refused.check, ISSUER)

    def test_jwks_file_with_the_issuer_from_discovery(self) -> None:
        assert self.known is not None
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        (directory / "cluster-jwks.json").write_bytes(self.jwks)
        fetch = Saved({self.known.discovery_url: saved("kubernetes-openid-configuration.json")})

        async def learn() -> str:
            data = json.loads(await fetch(self.known.discovery_url))  # type: ignore[union-attr]
            return str(data["issuer"])

        source = FileKeys("cluster", str(directory / "cluster-jwks.json"), Clock(),
                          learn=learn)
        self.successResultOf(source.start())
        source.stop()
        self.assertEqual(source.keys.issuer, CLUSTER_ISSUER)
        self.assertIsInstance(verify(self.token(), source.keys, self.expect, NOW), Verified)

    def test_given_issuer_and_jwks_file(self) -> None:
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        (directory / "cluster-jwks.json").write_bytes(self.jwks)
        source = FileKeys("cluster", str(directory / "cluster-jwks.json"), Clock())
        self.successResultOf(source.start())
        source.stop()
        expect = BearerExpectations("cluster", CLUSTER_ISSUER, ("gateway",))
        self.assertIsInstance(verify(self.token(), source.keys, expect, NOW), Verified)


def with_learned(issuer: str, source: RemoteKeys) -> Any:
    return replace(source.keys, issuer=issuer)


class Sources(SynchronousTestCase):
    """``key_source``: which source a provider's settings make."""

    def test_github_actions_from_its_discovery_document(self) -> None:
        source = key_source(MemoryReactorClock(), "gh", GITHUB_ACTIONS)
        assert isinstance(source, RemoteKeys)
        self.assertEqual(source.discovery_url,
                         f"{GITHUB_ACTIONS}/.well-known/openid-configuration")

    def test_jwks_file_and_jwks_url(self) -> None:
        self.assertIsInstance(key_source(MemoryReactorClock(), "a", "https://i.example",
                                         jwks_file="/etc/keys.json"), FileKeys)
        source = key_source(MemoryReactorClock(), "b", "https://i.example",
                            jwks_url="https://i.example/keys")
        assert isinstance(source, RemoteKeys)
        self.assertEqual(source.jwks_url, "https://i.example/keys")

    def test_kubernetes_outside_a_cluster_names_the_missing_file(self) -> None:
        known = preset(KUBERNETES)
        assert known is not None
        self.assertEqual(known.ca_file, f"{SERVICE_ACCOUNT}/ca.crt")
        # the same preset with its CA where none is (the test may run in a pod)
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        elsewhere = replace(known, ca_file=f"{directory}/nowhere/ca.crt")
        self.patch(bearer_keys, "preset", lambda issuer: elsewhere)
        with self.assertRaises(ValueError) as raised:
            key_source(MemoryReactorClock(), "cluster", KUBERNETES,
                       jwks_file="/etc/gateway/cluster-jwks.json")
        self.assertIn(f"bearer provider cluster (Kubernetes): {elsewhere.ca_file}: No such "
                      "file", str(raised.exception))
        self.assertIn("elsewhere give the cluster's issuer and a jwks_file",
                      str(raised.exception))

    def test_kubernetes_with_its_ca_given(self) -> None:
        source = key_source(MemoryReactorClock(), "cluster", KUBERNETES,
                            jwks_file="/etc/gateway/cluster-jwks.json", ca_pem=b"x")
        assert isinstance(source, FileKeys)
        self.assertIsNotNone(source.learn)
