"""Where gRPC listens and how a client reaches a service URL: addresses, transport
security and the reconnect backoff, shared by every server and client in gateway/rpc.

``http://`` service URLs are plaintext (``grpc_insecure`` on the server); ``https://``
ones use TLS, trusting ``certificate_authority`` (or the system's roots) and checking the
name in the URL, or ``override_certificate_name`` when the certificate names another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import grpc

# Reconnect quickly after a peer restarts, but never hammer one that is down.
INITIAL_BACKOFF_MS = 200
MAX_BACKOFF_MS = 2000


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    """One service URL as gRPC dials it."""

    url: str
    address: str  # host:port
    secure: bool


def parse_service_url(url: str) -> ServiceTarget:
    """``http(s)://host[:port]``; the port defaults to 80/443 as for any URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return ServiceTarget(url=url, address=f"{host}:{port}", secure=secure)


def listen_address(grpc_address: str) -> str:
    """``grpc_address`` as grpc binds it: ``:5443`` means every interface."""
    if grpc_address.startswith(":"):
        return f"[::]{grpc_address}"
    return grpc_address


def client_options(override_name: str = "", round_robin: bool = True
                   ) -> list[tuple[str, Any]]:
    """``round_robin`` (``grpc_client_dns_roundrobin``): spread calls over every address
    a service's DNS name has, rather than sticking to the first that answers."""
    options: list[tuple[str, Any]] = [
        ("grpc.initial_reconnect_backoff_ms", INITIAL_BACKOFF_MS),
        ("grpc.min_reconnect_backoff_ms", INITIAL_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", MAX_BACKOFF_MS),
        ("grpc.enable_retries", 0),  # failover between URLs is ours (databroker_client)
    ]
    if round_robin:
        options.append(("grpc.lb_policy_name", "round_robin"))
    if override_name:
        options.append(("grpc.ssl_target_name_override", override_name))
    return options


def server_options(max_age: float, max_age_grace: float) -> list[tuple[str, Any]]:
    """``grpc_server_max_connection_age(_grace)``: clients reconnect and rediscover.
    No SO_REUSEPORT (grpc's default on Linux): a second databroker on a taken
    ``grpc_address`` must fail, not silently take half the calls."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_connection_age_ms", int(max_age * 1000)),
        ("grpc.max_connection_age_grace_ms", int(max_age_grace * 1000)),
    ]


def open_channel(target: ServiceTarget, ca: bytes | None, override_name: str,
                 round_robin: bool = True) -> Any:
    """A ``grpc.aio`` channel; call on the bridge's loop."""
    options = client_options(override_name if target.secure else "", round_robin)
    if not target.secure:
        return grpc.aio.insecure_channel(target.address, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.aio.secure_channel(target.address, credentials, options=options)


def server_credentials(certificates: tuple[tuple[bytes, bytes], ...]) -> Any:
    """TLS for a gRPC server from this process's (certificate, key) pairs."""
    return grpc.ssl_server_credentials([(key, cert) for cert, key in certificates])
