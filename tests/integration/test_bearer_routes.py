"""Bearer tokens from outside issuers end to end (issue 42), with
conf/machine-callers.example.yaml as shipped (its ports, issuers and files moved): the
gateway daemon, a test issuer over HTTPS (its own CA as the provider's ``ca_file``)
standing in for GitHub Actions, and a ``jwks_file`` for the Kubernetes cluster, with
tokens shaped like theirs. Allowed (the upstream gets the assertion naming the provider,
not the token), denied (403, never a sign-in redirect), refused (401 with
``WWW-Authenticate`` naming the check, a log line, nothing of the token) for a handful of
the adversarial cases (the full table is unit-tested), the cluster's keys rotated
mid-test, cookie and bearer together (400), ``pass_bearer_token``, a route for people
only, and the access log, audit stream, metrics and ``/.gateway/`` naming the provider."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from gateway.cli.check import run_check
from tests.support.bearer_issuer_thread import ThreadedIssuer, threaded_issuer
from tests.support.bearer_tokens import b64, ec_key, jwks_bytes, mint_now, rsa_key, sign
from tests.support.daemon import REPO_ROOT, Daemon, gateway_daemon
from tests.support.peers import echo_upstream
from tests.support.processes import free_port, loopback_opener, wait_until

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "machine-callers.example.yaml"
GITHUB = "https://token.actions.githubusercontent.com"
CLUSTER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class Setup:
    gw: Daemon
    port: int
    issuer: ThreadedIssuer
    jwks_file: Path
    audit: Path
    metrics_port: int

    @property
    def audience(self) -> str:
        return f"http://deploy.localhost:{self.port}"

    def ask(self, host: str, token: str = "", path: str = "/",
            **headers: str) -> tuple[int, dict[str, str], bytes]:
        sent = {"Accept": "text/html,application/xhtml+xml", **headers}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        return self.gw.get(path, host=f"{host}.localhost:{self.port}", headers=sent)

    def job(self, **claims: Any) -> str:
        """A GitHub Actions job's token (claims from GitHub's documentation)."""
        return mint_now(rsa_key("github"), "gh-1", **{
            "iss": self.issuer.issuer, "aud": self.audience,
            "sub": "repo:example/app:ref:refs/heads/main", "repository": "example/app",
            "repository_owner": "example", "ref": "refs/heads/main", "ref_type": "branch",
            "workflow": "deploy", "event_name": "push", "runner_environment":
            "github-hosted", "job_workflow_ref":
            "example/app/.github/workflows/deploy.yml@refs/heads/main", **claims})

    def workload(self, private: Any = None, kid: str = "c-1", alg: str = "ES256",
                 namespace: str = "prod", **claims: Any) -> str:
        """A projected service-account token (its claims as the API server makes them)."""
        return mint_now(private if private is not None else ec_key("cluster"), kid, alg, **{
            "iss": CLUSTER, "aud": ["gateway"],
            "sub": f"system:serviceaccount:{namespace}:deployer",
            "kubernetes.io": {"namespace": namespace,
                              "serviceaccount": {"name": "deployer", "uid": "4f6e"},
                              "pod": {"name": "deployer-7d9f", "uid": "9c1a"}},
            "repository": None, "ref": None, "workflow": None, "jti": None, **claims})


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in {EXAMPLE.name}"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("bearer")
    port, metrics_port = free_port(), free_port()
    with ExitStack() as stack:
        issuer = stack.enter_context(threaded_issuer([(rsa_key("github"), "gh-1")]))
        app = stack.enter_context(echo_upstream(tmp))
        jwks_file = tmp / "cluster-jwks.json"
        jwks_file.write_bytes(jwks_bytes((ec_key("cluster"), "c-1")))
        (tmp / "github-ca.pem").write_bytes(issuer.ca_pem)
        config = yaml.safe_load(moved(EXAMPLE.read_text(), {
            ":8080": f":{port}", "http://127.0.0.1:8081": app.url, GITHUB: issuer.issuer,
            "machine-callers.cluster-jwks.json": str(jwks_file)}))
        github = next(p for p in config["identity_providers"] if p["id"] == "github-actions")
        github["ca_file"] = "github-ca.pem"  # beside the configuration, as an operator would
        audit = tmp / "audit.jsonl"
        config.update(audit_log_file=str(audit), metrics_address=f"127.0.0.1:{metrics_port}")
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        # the first fetch of GitHub's keys runs beside the start (until it ends, its
        # tokens are refused: unknown_kid)
        wait_until(lambda: gw.logged("bearer provider github-actions: 1 keys from"), 10,
                   what="the issuer's keys")
        yield Setup(gw, port, issuer, jwks_file, audit, metrics_port)


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr().out
    assert "routes=3 (hosts=3, public=0, tcp=0) warnings=0" in out, out
    assert "policy[0] deploy: accepts corp, github-actions (bearer), cluster (bearer)" in out
    assert "policy[1] registry: accepts cluster (bearer)" in out
    assert "policy[2] wiki: accepts corp\n" in out


def hmac_signed(header: dict[str, Any], payload: dict[str, Any], private: Any) -> str:
    """HMAC keyed with the provider's public key (PEM): the classic confusion."""
    pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(mac)}"


def named(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def upstream_headers(body: bytes) -> dict[str, str]:
    return {k.lower(): v for k, v in json.loads(body)["headers"]}


def assertion(headers: dict[str, str]) -> dict[str, Any]:
    payload = headers["x-gateway-jwt-assertion"].split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * 4))
    return claims


def test_github_actions_job_allowed(setup: Setup) -> None:
    status, headers, body = setup.ask("deploy", setup.job(), "/release")
    assert status == 200, body[:300]
    seen = upstream_headers(body)
    assert seen["x-gateway-provider"] == "github-actions"
    claims = assertion(seen)
    assert (claims["idp"], claims["sub"]) == ("github-actions",
                                              "repo:example/app:ref:refs/heads/main")
    assert "authorization" not in seen  # the token stops at the gateway
    assert not any(k.lower() == "set-cookie" for k in headers)  # no session
    # its keys came through the issuer's discovery document, over HTTPS
    assert "/.well-known/openid-configuration" in setup.issuer.asked
    # who am I, to this route: the token's identity and its provider
    status, _, body = setup.ask("deploy", setup.job(), "/.gateway/?format=json")
    assert status == 200, body[:300]
    profile = json.loads(body)
    assert profile["identity_provider"] == f"github-actions ({setup.issuer.issuer})"
    assert profile["claims"]["repository"] == ["example/app"]


def test_denied_by_policy_is_403(setup: Setup) -> None:
    status, headers, body = setup.ask("deploy", setup.job(ref="refs/heads/feature"))
    assert status == 403, body[:300]
    assert "location" not in {k.lower() for k in headers}
    assert b"sign_in" not in body


@pytest.mark.parametrize("case", ["expired", "audience", "alg_none", "hmac_with_public_key",
                                  "other_providers_kid", "key_reference", "issuer"])
def test_refused_is_401_naming_the_check(setup: Setup, case: str) -> None:
    gh, rid = rsa_key("github"), f"refused-{case.replace('_', '-')}"
    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": "gh-1"}
    payload = {"iss": setup.issuer.issuer, "aud": setup.audience, "sub": "repo:x/y:ref:z",
               "iat": now, "exp": now + 300}
    token, check = {
        "expired": (setup.job(exp=now - 300), "expired"),
        "audience": (setup.job(aud="https://github.com/example"), "audience"),
        "alg_none": (sign({**header, "alg": "none"}, payload, gh, "RS256").rsplit(".", 1)[0]
                     + ".", "alg"),
        "hmac_with_public_key": (hmac_signed({**header, "alg": "HS256"}, payload, gh),
                                 "alg"),
        # the cluster's key and kid, GitHub's issuer: never the cluster's keys
        "other_providers_kid": (setup.workload(iss=setup.issuer.issuer, aud=setup.audience),
                                "unknown_kid"),
        "key_reference": (sign({**header, "jku": "https://evil.example/jwks"}, payload, gh,
                               "RS256"), "key_reference"),
        "issuer": (mint_now(gh, "gh-1", iss="https://evil.example", aud=setup.audience),
                   "issuer"),
    }[case]
    status, headers, body = setup.ask("deploy", token, **{"X-Request-Id": rid})
    assert status == 401, body[:300]
    challenge = named(headers, "www-authenticate")
    assert challenge.startswith('Bearer error="invalid_token", error_description="'), headers
    assert "location" not in {k.lower() for k in headers}
    assert token.split(".")[1] not in body.decode() + challenge
    event = setup.gw.wait_for_event(lambda e: e.get("request_id") == rid
                                    and e.get("namespace") == "gateway.bearer",
                                    what=f"the refusal's log line ({case})")
    assert event["check"] == check
    assert event["provider"] in ("github-actions", "none")
    assert token not in json.dumps(event)


def test_kubernetes_workload_and_key_rotation(setup: Setup) -> None:
    status, _, body = setup.ask("deploy", setup.workload())
    assert status == 200, body[:300]
    assert assertion(upstream_headers(body))["sub"] == "system:serviceaccount:prod:deployer"
    assert setup.ask("deploy", setup.workload(namespace="dev"))[0] == 403
    # The cluster rotates to a new key: tokens signed with it are refused until the
    # gateway reads the saved key set again (it looks at once on an unknown kid, and
    # every few seconds), then admitted; the withdrawn key's tokens are refused.
    new = rsa_key("cluster-2")
    rotated = setup.workload(new, "c-2", "RS256")
    assert setup.ask("deploy", rotated)[0] == 401
    setup.jwks_file.write_bytes(jwks_bytes((new, "c-2")))
    wait_until(lambda: setup.ask("deploy", rotated)[0] == 200, 10,
               what="the rotated key admitted")
    status, headers, _ = setup.ask("deploy", setup.workload())
    assert status == 401 and "kid" in named(headers, "www-authenticate")


def test_cookie_and_bearer_is_400(setup: Setup) -> None:
    status, _, body = setup.ask("deploy", setup.job(), Cookie="_gateway=opaque")
    assert status == 400, body[:300]
    assert b"both a session cookie and a bearer token" in body


def test_pass_bearer_token(setup: Setup) -> None:
    token = setup.workload(rsa_key("cluster-2"), "c-2", "RS256")
    wait_until(lambda: setup.ask("registry", token)[0] == 200, 10, what="the cluster's key")
    body = setup.ask("registry", token)[2]
    assert upstream_headers(body)["authorization"] == f"Bearer {token}"


def test_a_route_for_people_only(setup: Setup) -> None:
    status, headers, _ = setup.ask("wiki", setup.job())
    assert status == 401
    assert "accepts no bearer tokens" in named(headers, "www-authenticate")
    assert setup.ask("wiki")[0] == 302  # a browser without a token: the usual sign-in


def test_access_log_audit_and_metrics_name_the_provider(setup: Setup) -> None:
    rid = "bearer-logged"
    assert setup.ask("deploy", setup.job(), **{"X-Request-Id": rid})[0] == 200
    access = setup.gw.wait_for_event(lambda e: e.get("request_id") == rid
                                     and e.get("status") == 200, what="the access log line")
    assert (access["provider"], access["user_id"]) == (
        "github-actions", "repo:example/app:ref:refs/heads/main")

    def audited() -> list[dict[str, Any]]:
        lines = setup.audit.read_text().splitlines() if setup.audit.exists() else []
        return [e for e in map(json.loads, lines) if e.get("request_id") == rid]

    wait_until(lambda: bool(audited()), 5, what="the audit event")
    event = audited()[0]
    assert (event["provider"], event["credential"], event["decision"]) == (
        "github-actions", "bearer", "allow")
    with loopback_opener().open(urllib.request.Request(
            f"http://127.0.0.1:{setup.metrics_port}/metrics"), timeout=10) as response:
        text = response.read().decode()
    for line in ('gateway_bearer_tokens_total{provider="github-actions",result="allowed"}',
                 'gateway_bearer_tokens_total{provider="github-actions",result="expired"}',
                 'gateway_bearer_keys{provider="github-actions"} 1.0',
                 'gateway_bearer_keys_consecutive_failures{provider="cluster"} 0.0',
                 'gateway_bearer_keys_last_success_timestamp_seconds{provider='
                 '"github-actions"}'):
        assert line in text, line
