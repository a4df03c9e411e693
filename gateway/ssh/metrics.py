"""The SSH server's metrics, in the process's registry (served on ``metrics_address``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from gateway.observability.metrics import REGISTRY

CONNECTIONS = Counter(
    "gateway_ssh_connections", "SSH logins decided, by decision (allowed, denied).",
    ["decision"], registry=REGISTRY)
OPEN = Gauge("gateway_ssh_open_connections", "Admitted SSH connections open now.",
             registry=REGISTRY)
BYTES = Counter(
    "gateway_ssh_bytes", "Bytes relayed by ended SSH connections, by direction "
    "(in: from the person, out: to the person).", ["direction"], registry=REGISTRY)
