"""deploy/kubernetes/gateway.yaml: every object valid against the Kubernetes schemas
(kubernetes-validate, strict: unknown fields fail; no cluster needed), and the gateway's
Deployment keeping the image's contract as scripts/build-image.sh builds it: its uid,
the read-only root, /etc/gateway and /var/lib/gateway, probes on /ping where the gateway
listens, the package's version."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway import __version__

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = REPO_ROOT / "deploy" / "kubernetes" / "gateway.yaml"
KUBERNETES_VERSION = "1.30.0"  # the oldest release still common; newer ones validate too


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def by_kind_name(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, "1.37.0"])
def test_every_object_is_valid(version: str) -> None:
    kinds = []
    for document in documents():
        kubernetes_validate.validate(document, version, strict=True)
        kinds.append(f"{document['kind']}/{document['metadata']['name']}")
    assert kinds == ["Deployment/gateway", "Service/gateway", "Deployment/redis",
                     "Service/redis"]


def test_the_validator_refuses_a_wrong_field() -> None:
    """The check above can fail: a misspelt field of the gateway's container is refused."""
    document = copy.deepcopy(by_kind_name("Deployment", "gateway"))
    document["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_gateway_deployment_keeps_the_image_contract() -> None:
    script = (REPO_ROOT / "scripts" / "build-image.sh").read_text()
    uid = int(re.search(r"^UID_GID=(\d+)$", script, re.M).group(1))  # type: ignore[union-attr]
    pod = by_kind_name("Deployment", "gateway")["spec"]["template"]["spec"]
    (gateway,) = pod["containers"]
    assert gateway["image"].endswith(f"/gateway:{__version__}")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == uid
    assert pod["securityContext"]["fsGroup"] == uid  # reads the Secret's 0440 files
    context = gateway["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    assert mounts["/etc/gateway"]["readOnly"] is True
    assert "/var/lib/gateway" in mounts and not mounts["/var/lib/gateway"].get("readOnly")
    assert gateway["args"] == ["--config", "/etc/gateway/config.yaml"]
    env = {e["name"]: e["value"] for e in gateway["env"]}
    port = int(env["ADDRESS"].rsplit(":", 1)[1])
    assert port > 1024  # no capabilities: no low port
    assert gateway["ports"] == [{"name": "https", "containerPort": port}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert gateway[probe]["httpGet"] == {"path": "/ping", "port": "https", "scheme": "HTTPS"}
    assert env["DATABROKER_STORAGE_TYPE"] == "kvstore"
    redis_port = by_kind_name("Service", "redis")["spec"]["ports"][0]["port"]
    assert env["DATABROKER_STORAGE_CONNECTION_STRING"] == f"kvstore://redis:{redis_port}/0"
