"""``gateway check``: the daemon's own validation, without starting anything."""

from __future__ import annotations

import os
from typing import TextIO

from gateway.config import ConfigErrors, Snapshot, load_snapshot


def summary(snapshot: Snapshot) -> str:
    """One line: services, listeners and routes of a valid configuration."""
    o = snapshot.options
    scheme = "http" if o.insecure_server else "https"
    listeners = [f"{scheme}://{o.address}"]
    if o.http_redirect_addr:
        listeners.append(f"redirect http://{o.http_redirect_addr}")
    if o.metrics_address:
        listeners.append(f"metrics {o.metrics_address}")
    public = sum(1 for r in snapshot.routes if r.allow_public_unauthenticated_access)
    tcp = sum(1 for r in snapshot.routes if r.tcp)
    hosts = len({r.host for r in snapshot.routes})
    return (
        f"ok: {snapshot.source}: services={o.services} listeners={', '.join(listeners)} "
        f"routes={len(snapshot.routes)} (hosts={hosts}, public={public}, tcp={tcp}) "
        f"warnings={len(snapshot.warnings)}"
    )


def run_check(path: str | None, out: TextIO, err: TextIO) -> int:
    if path is not None and not os.path.exists(path):
        err.write(f"gateway check: {path}: no such file\n")
        return 1
    try:
        snapshot = load_snapshot(path)
    except ConfigErrors as exc:
        err.write(exc.render() + "\n")
        for warning in exc.warnings:
            err.write(f"warning: {warning}\n")
        return 1
    for warning in snapshot.warnings:
        err.write(f"warning: {warning}\n")
    out.write(summary(snapshot) + "\n")
    return 0
