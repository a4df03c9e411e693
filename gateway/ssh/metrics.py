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
PENDING_SIGN_INS = Gauge(
    "gateway_ssh_pending_sign_ins", "SSH connections of this process waiting for their "
    "person to sign in in a browser.", registry=REGISTRY)
SIGN_INS_REFUSED = Counter(
    "gateway_ssh_sign_ins_refused", "SSH sign-ins refused because too many were pending, "
    "by bound (address: ssh_max_pending_sign_ins_per_address, total: "
    "ssh_max_pending_sign_ins).", ["reason"], registry=REGISTRY)
REFUSED = Counter(
    "gateway_ssh_refused_connections", "SSH connections refused at the accept, by reason "
    "(penalty: the address keeps breaking the rules; unauthenticated: too many "
    "unauthenticated connections).", ["reason"], registry=REGISTRY)
STRIKES = Counter(
    "gateway_ssh_strikes", "SSH connections cut for breaking a rule before "
    "authentication, by rule (a strike against the client's address).", ["rule"],
    registry=REGISTRY)
