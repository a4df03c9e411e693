"""Upstream hosts of a route and their live state (health, ejection, load).

One ``UpstreamHost`` per ``to`` entry. Load balancers read ``available(now)`` and
``active``; health checkers set ``healthy``; outlier detection sets ``ejected_until``.
The objects outlive configuration reloads when a route's upstreams stay the same, so
health and ejection state are not reset by an unrelated edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.upstreams import Upstream


@dataclass(eq=False, slots=True)
class UpstreamHost:
    """Mutable runtime state of one upstream endpoint (identity-compared)."""

    upstream: Upstream
    weight: int = 1
    healthy: bool = True
    ejected_until: float = 0.0
    ejections: int = 0
    consecutive_5xx: int = 0
    active: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    address: str = field(init=False)  # host:port, for logs and metrics (made once)
    host_header: bytes = field(init=False)  # the Host an upstream request names it by

    def __post_init__(self) -> None:
        upstream = self.upstream
        self.address = f"{upstream.host}:{upstream.port}"
        name = f"[{upstream.host}]" if ":" in upstream.host else upstream.host
        default = 443 if upstream.scheme == "https" else 80
        self.host_header = (name if upstream.port == default
                            else f"{name}:{upstream.port}").encode("latin-1")

    def available(self, now: float) -> bool:
        """Healthy and not ejected by outlier detection."""
        return self.healthy and self.ejected_until <= now


def hosts_for(upstreams: tuple[Upstream, ...]) -> tuple[UpstreamHost, ...]:
    """Fresh host state for a route's ``to`` list (weight 1 when none is given)."""
    return tuple(UpstreamHost(u, weight=u.weight or 1) for u in upstreams)
