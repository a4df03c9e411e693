"""The bearer-token route of the benchmarks (issue 42): a CI provider whose key set is a
``jwks_file`` the benchmark writes, and a GitHub Actions-shaped token signed with its key
(RS256, valid for a day), sent as ``Authorization: Bearer`` on every request. The route's
policy is the issue's (the provider and two claims), its identity headers on, like the
signed-in cookie route it is compared with."""

from __future__ import annotations

import json
import time
from functools import cache
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

BEARER_HOST = "bearer.test"
PROVIDER = "bench-ci"
ISSUER = "https://ci.bench.test"
AUDIENCE = "https://gateway.bench.test"
KID = "bench-1"
POLICY = {"allow": {"and": [{"provider": {"is": PROVIDER}},
                            {"claim/repository": {"has": "example/app"}},
                            {"claim/ref": {"has": "refs/heads/main"}}]}}


@cache
def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_jwks(directory: Path) -> Path:
    """The provider's key set, as ``jwks_file``."""
    jwk = RSAAlgorithm.to_jwk(_key().public_key(), as_dict=True)
    path = directory / "bench-ci-jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": KID, "use": "sig"}]}))
    return path


def provider(jwks_file: Path) -> dict[str, object]:
    """The ``identity_providers`` entry."""
    return {"id": PROVIDER, "issuer": ISSUER, "jwks_file": str(jwks_file),
            "bearer": {"audiences": [AUDIENCE]}}


def route(origin: str, upstream: str) -> dict[str, object]:
    """The route (``from`` ``origin``, e.g. ``http://bearer.test:8080``)."""
    return {"from": origin, "to": upstream, "identity_providers": [PROVIDER],
            "pass_identity_headers": True, "policy": [POLICY]}


def token() -> str:
    now = int(time.time())
    return jwt.encode({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "repo:example/app:ref:refs/heads/main",
        "repository": "example/app", "repository_owner": "example",
        "ref": "refs/heads/main", "ref_type": "branch", "workflow": "deploy",
        "event_name": "push", "runner_environment": "github-hosted",
        "job_workflow_ref": "example/app/.github/workflows/deploy.yml@refs/heads/main",
        "sha": "0" * 40, "run_id": "1", "run_number": "1", "run_attempt": "1",
        "actor": "octocat", "iat": now, "nbf": now - 5, "exp": now + 86400, "jti": "bench",
    }, _key(), algorithm="RS256", headers={"kid": KID})
