"""The two issuers the gateway knows by name: GitHub Actions and a Kubernetes cluster
(``issuer: kubernetes:///``), with the claims their tokens carry, for the documentation
and for policies (``claim/<name>``; nested claims are flattened with dots).

GitHub Actions (https://docs.github.com/en/actions/reference/security/oidc): a job with
``permissions: id-token: write`` asks for a token with its own audience
(``core.getIDToken(audience)``, ``ACTIONS_ID_TOKEN_REQUEST_URL&audience=...``); the
default audience is the owner's URL, ``https://github.com/OWNER``, which names no
service: configure the gateway's. RS256, ``kid`` and ``x5t`` in the header, about 5-10
minutes of validity. ``sub`` is ``repo:OWNER/REPO:environment:NAME``,
``repo:OWNER/REPO:ref:refs/heads/BRANCH``, ``repo:OWNER/REPO:pull_request`` ...; decide
on ``claim/repository``, ``claim/ref``, ``claim/environment``,
``claim/job_workflow_ref`` rather than on the subject's text.

Kubernetes (projected service-account tokens, ``serviceAccountToken`` volume source with
``audience``): ``sub`` is ``system:serviceaccount:NAMESPACE:NAME``, the claim
``kubernetes.io`` holds ``namespace``, ``serviceaccount.name``/``uid``,
``pod.name``/``uid``, ``node.name``/``uid`` (flattened: ``claim/kubernetes.io.namespace``,
``claim/kubernetes.io.serviceaccount.name``). RS256 (or ES256), ``kid`` in the header.
The cluster's issuer is its ``--service-account-issuer``: given as ``issuer`` (with
``jwks_file`` from ``kubectl get --raw /openid/v1/jwks``), or, with
``issuer: kubernetes:///`` inside the cluster, read from the API server's discovery
document (``https://kubernetes.default.svc/.well-known/openid-configuration``, fetched
with the pod's own service-account token and CA, which the default
``system:service-account-issuer-discovery`` binding allows), keys from the ``jwks_uri``
it names or from ``jwks_file``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.bearer_jwt.expect import KUBERNETES

GITHUB_ACTIONS = "https://token.actions.githubusercontent.com"
IN_CLUSTER_API = "https://kubernetes.default.svc"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"

GITHUB_ACTIONS_CLAIMS: dict[str, str] = {
    "sub": "repo:OWNER/REPO: then environment:NAME, ref:REF, pull_request or job_workflow_ref",
    "repository": "OWNER/REPO the workflow runs in",
    "repository_id": "the repository's numeric id (survives a rename)",
    "repository_owner": "the owner (organization or user)",
    "repository_owner_id": "the owner's numeric id",
    "repository_visibility": "public, private or internal",
    "ref": "the git ref that triggered the run: refs/heads/main, refs/tags/v1",
    "ref_type": "branch or tag",
    "ref_protected": "true when the ref is protected",
    "sha": "the commit",
    "workflow": "the workflow's name",
    "workflow_ref": "OWNER/REPO/.github/workflows/FILE@REF",
    "job_workflow_ref": "the reusable workflow the job runs, OWNER/REPO/PATH@REF",
    "environment": "the deployment environment of the job (absent without one)",
    "event_name": "push, pull_request, workflow_dispatch ...",
    "actor": "the account that started the run", "actor_id": "its numeric id",
    "run_id": "the run", "run_number": "its number", "run_attempt": "the attempt",
    "runner_environment": "github-hosted or self-hosted",
    "head_ref": "a pull request's source branch", "base_ref": "its target branch",
}
KUBERNETES_CLAIMS: dict[str, str] = {
    "sub": "system:serviceaccount:NAMESPACE:NAME",
    "kubernetes.io.namespace": "the pod's namespace",
    "kubernetes.io.serviceaccount.name": "the service account",
    "kubernetes.io.serviceaccount.uid": "its uid (differs after a delete and re-create)",
    "kubernetes.io.pod.name": "the pod the token was mounted into",
    "kubernetes.io.pod.uid": "its uid",
    "kubernetes.io.node.name": "the node it runs on (Kubernetes 1.30+)",
    "kubernetes.io.node.uid": "its uid",
}


@dataclass(frozen=True, slots=True)
class Preset:
    """Where a named issuer's keys come from. ``discovery_url``: its discovery document;
    ``ca_file``/``token_file``: the TLS trust and bearer token of that fetch (``""``:
    the system store, none); ``learn_issuer``: the issuer is read from the document."""

    name: str
    discovery_url: str
    ca_file: str = ""
    token_file: str = ""
    learn_issuer: bool = False


PRESETS = {
    GITHUB_ACTIONS: Preset("GitHub Actions", f"{GITHUB_ACTIONS}/.well-known/openid-configuration"),
    KUBERNETES: Preset("Kubernetes", f"{IN_CLUSTER_API}/.well-known/openid-configuration",
                       ca_file=f"{SERVICE_ACCOUNT}/ca.crt",
                       token_file=f"{SERVICE_ACCOUNT}/token", learn_issuer=True),
}


def preset(issuer: str) -> Preset | None:
    """The preset of an issuer the gateway knows by name."""
    return PRESETS.get(issuer)
