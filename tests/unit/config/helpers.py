"""Small helpers shared by the configuration tests."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import yaml

from gateway.config import ConfigErrors, Snapshot, load_snapshot

SECRET = base64.b64encode(b"k" * 32).decode()
PUBLIC_ROUTE = {
    "from": "https://app.example.com",
    "to": "http://127.0.0.1:9000",
    "allow_public_unauthenticated_access": True,
}

IDENTITY = {
    "authenticate_service_url": "https://authenticate.example.com",
    "idp_provider": "oidc",
    "idp_provider_url": "https://idp.example.com",
    "idp_client_id": "gateway",
    "idp_client_secret": "secret",
}


def base_config(**extra: Any) -> dict[str, Any]:
    """A minimal valid all-in-one config; ``extra`` overrides or adds keys."""
    config: dict[str, Any] = {"insecure_server": True, "policy": [dict(PUBLIC_ROUTE)]}
    config.update(extra)
    return config


def write(directory: str, name: str, content: str | bytes) -> str:
    path = os.path.join(directory, name)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as handle:
        handle.write(content)
    return path


def load(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
         directory: str | None = None) -> Snapshot:
    """Load ``config`` written as YAML into a temporary directory."""
    directory = directory or tempfile.mkdtemp(prefix="gw-config-")
    path = write(directory, "config.yaml", yaml.safe_dump(dict(config or {})))
    return load_snapshot(path, environ or {})


def errors_of(config: Mapping[str, Any], environ: Mapping[str, str] | None = None,
              directory: str | None = None) -> list[str]:
    """Rendered problems (``path: message``) of an invalid config."""
    try:
        load(config, environ, directory)
    except ConfigErrors as exc:
        return [str(p) for p in exc.problems]
    raise AssertionError("configuration unexpectedly valid")
