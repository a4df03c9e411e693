"""The gateway under test: its YAML configs (public route, signed-in route, TLS) and its
process (``twistd -n --pidfile= gateway --config FILE`` from the repository root)."""

from __future__ import annotations

import base64
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from . import bearer, mcp
from .paths import REPO_ROOT
from .procs import Proc, Processes, free_port

# the authenticated route: its host, and the user who signs in (allowed by the route)
AUTH_HOST = "app.test"
AUTH_USER = "alice@example.test"
# the route with a 10-criterion policy the same user passes (issue 30's benchmark):
# groups, e-mail, domain, a claim, method, path, network and time of day to allow, a
# method and a network to deny; it reads the request and the clock, so every request is
# decided again
POLICY_HOST = "policy.test"
POLICY_YAML = """\
    policy:
      - allow:
          and:
            - groups: {has: admins}
            - email: {ends_with: "@example.test"}
            - domain: {is: example.test}
            - claim/groups: engineering
            - http_method: {in: [GET, HEAD]}
            - http_path: {starts_with: /}
            - source_ip: [127.0.0.0/8, "::1/128"]
            - time_of_day: {after: "00:00", timezone: UTC}
      - deny:
          or:
            - http_method: {is: DELETE}
            - source_ip: [203.0.113.0/24]
"""


@dataclass(frozen=True)
class AuthProvider:
    """The OIDC provider the gateway signs users in with (tests/support/peers.py), and
    where sessions live (``kvstore``: a Redis URL; empty: memory)."""

    issuer: str
    client_id: str
    client_secret: str
    kvstore: str = ""


def gateway_yaml(port: int, upstream: int, codec: str | None,
                 auth: AuthProvider | None = None, metrics_port: int = 0,
                 extra: tuple[str, ...] = (), bearer_jwks: Path | None = None,
                 with_mcp: bool = False) -> str:
    """``extra``: more top-level YAML lines (``--otlp``: tracing over OTLP).
    ``bearer_jwks``: with ``auth``, the bearer-token route too (``bearer.py``), its
    provider's keys in that file. ``with_mcp``: with ``auth``, the MCP route and its plain
    signed-in twin (``mcp.py``)."""
    q = json.dumps  # a JSON string is a YAML scalar
    lines = [
        "# written by bench/run.py",
        "insecure_server: true",
        f"address: 127.0.0.1:{port}",
        "log_level: warn",
        "proxy_log_level: error",
    ]
    if metrics_port:  # --metrics: request metrics are counted (and could be scraped)
        lines.append(f"metrics_address: 127.0.0.1:{metrics_port}")
    if codec:
        lines.append(f"codec_type: {codec}")
    lines += extra
    if auth is not None:
        lines += [
            f"authenticate_service_url: http://auth.test:{port}",
            "idp_provider: oidc",
            f"idp_provider_url: {q(auth.issuer)}",
            f"idp_client_id: {q(auth.client_id)}",
            f"idp_client_secret: {q(auth.client_secret)}",
            "idp_scopes: [openid, email, groups, offline_access]",
            "idp_service_account: groups-from-claims",
            "cookie_secure: false",
        ]
        if auth.kvstore:
            secret = q(base64.b64encode(os.urandom(32)).decode())
            lines += [
                "databroker_storage_type: kvstore",
                f"databroker_storage_connection_string: {q(auth.kvstore)}",
                f"shared_secret: {secret}",
                f"cookie_secret: {secret}",
            ]
    lines += [
        "policy:",
        f"  - from: http://127.0.0.1:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        "    allow_public_unauthenticated_access: true",
    ]
    if auth is not None:
        lines += [
            f"  - from: http://{AUTH_HOST}:{port}",
            f"    to: http://127.0.0.1:{upstream}",
            f"    allowed_users: [{q(AUTH_USER)}]",
            "    pass_identity_headers: true",
            f"  - from: http://{POLICY_HOST}:{port}",
            f"    to: http://127.0.0.1:{upstream}",
            "    pass_identity_headers: true",
            POLICY_YAML.rstrip("\n"),
        ]
        if with_mcp:  # (JSON is YAML: a flow mapping per item)
            lines += ["  - " + q(r) for r in mcp.routes(port, f"http://127.0.0.1:{upstream}",
                                                        AUTH_USER)]
        if bearer_jwks is not None:  # (the routes' list goes on; then its provider)
            lines.append("  - " + q(bearer.route(f"http://{bearer.BEARER_HOST}:{port}",
                                                 f"http://127.0.0.1:{upstream}")))
            lines.append("identity_providers: " + q([bearer.provider(bearer_jwks)]))
        if with_mcp:
            lines += mcp.SETTINGS
    return "\n".join(lines) + "\n"


def gateway_tls_yaml(port: int, upstream: int, cert: Path, key: Path) -> str:
    return "\n".join([
        "# written by bench/run.py (TLS section)",
        f"address: 127.0.0.1:{port}",
        f"certificate_file: {cert}",
        f"certificate_key_file: {key}",
        "codec_type: auto",  # ALPN: h2 or http/1.1 (all-in-one's default is http1)
        "log_level: warn",
        "proxy_log_level: error",
        "policy:",
        f"  - from: https://127.0.0.1:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        "    allow_public_unauthenticated_access: true",
    ]) + "\n"


def gateway_tls_auth_yaml(port: int, upstream: int, cert: Path, key: Path,
                          auth: AuthProvider) -> str:
    """``gateway_tls_yaml`` plus sign-in at https://auth.test and the signed-in route
    https://app.test (the same names as the plain section's)."""
    q = json.dumps
    return gateway_tls_yaml(port, upstream, cert, key) + "\n".join([
        f"  - from: https://{AUTH_HOST}:{port}",
        f"    to: http://127.0.0.1:{upstream}",
        f"    allowed_users: [{q(AUTH_USER)}]",
        "    pass_identity_headers: true",
        f"authenticate_service_url: https://auth.test:{port}",
        "idp_provider: oidc",
        f"idp_provider_url: {q(auth.issuer)}",
        f"idp_client_id: {q(auth.client_id)}",
        f"idp_client_secret: {q(auth.client_secret)}",
        "idp_scopes: [openid, email, groups, offline_access]",
    ]) + "\n"


def gateway_env() -> dict[str, str]:
    """A small, fixed environment: settings in the environment win over the file. The
    ``TRACING_*`` settings pass through, to measure with tracing on (``TRACING_PROVIDER``
    and its endpoint; the sample rate's default is the reference's 0.0001), and so do
    ``OTEL_*``, ``AUDIT_*`` and ``AUTHORIZE_LOG_FIELDS`` (the audit stream's cost:
    ``AUDIT_LOG_FILE=/tmp/audit.jsonl``)."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "AUTHORIZE_LOG_FIELDS")
           or k.startswith(("TRACING_", "OTEL_", "AUDIT_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def find_twistd(explicit: str | None) -> Path:
    candidates = [Path(explicit)] if explicit else [
        REPO_ROOT / ".venv" / "bin" / "twistd", Path(sys.prefix) / "bin" / "twistd"]
    for c in candidates:
        if c.exists():
            return c
    raise SystemExit(f"twistd not found (tried {', '.join(map(str, candidates))}); "
                     "use --twistd")


def start_gateway(procs: Processes, tmp: Path, twistd: Path, name: str, upstream: int,
                  codec: str | None, cpus: str | None, port: int | None = None,
                  auth: AuthProvider | None = None, metrics: bool = False,
                  extra: tuple[str, ...] = (), with_mcp: bool = False) -> tuple[Proc, int]:
    port = port or free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(gateway_yaml(port, upstream, codec, auth,
                                   free_port() if metrics else 0, extra,
                                   bearer.write_jwks(tmp) if auth is not None else None,
                                   with_mcp and auth is not None))
    proc = procs.start(name, [str(twistd), "-n", "--pidfile=", "gateway", "--config", str(config)],
                       cpus, cwd=REPO_ROOT, env=gateway_env())
    return proc, port
