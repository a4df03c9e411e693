"""``gateway check``: the daemon's own validation, without starting anything."""

from __future__ import annotations

import os
from typing import TextIO

from gateway.config import ConfigErrors, Snapshot, load_snapshot
from gateway.config.errors import Problem
from gateway.config.providers import accepted_by
from gateway.config.routes import Route
from gateway.policy.unsigned import admits_without_sign_in


def open_without_sign_in(route: Route) -> tuple[str, ...]:
    """The rules of ``route``'s policy that may let in someone not signed in (a route
    with ``policy``; the allow fields alone never do, CORS preflights aside, and an
    ssh:// route signs everyone in before it decides)."""
    if route.policy_document is None or route.ssh is not None:
        return ()
    return admits_without_sign_in(route.policy)


def public_warnings(snapshot: Snapshot) -> list[Problem]:
    """One warning per route whose policy may let in a request without sign-in: such a
    route is public for those requests, and counted so."""
    out = []
    for route in snapshot.routes:
        rules = open_without_sign_in(route)
        if rules:
            out.append(Problem(f"policy[{route.index}].policy",
                               f"lets some requests in without sign-in ({', '.join(rules)}"
                               "); the route is counted as public"))
    return out


def summary(snapshot: Snapshot, warnings: int | None = None) -> str:
    """One line: services, listeners and routes of a valid configuration. A route is
    public when it skips authorization or its policy may let someone in without sign-in;
    ``warnings`` counts the load's and ``public_warnings``'."""
    o = snapshot.options
    scheme = "http" if o.insecure_server else "https"
    listeners = [f"{scheme}://{o.address}"]
    if o.http_redirect_addr:
        listeners.append(f"redirect http://{o.http_redirect_addr}")
    if o.metrics_address:
        listeners.append(f"metrics {o.metrics_address}")
    public = sum(1 for r in snapshot.routes
                 if r.allow_public_unauthenticated_access or open_without_sign_in(r))
    if warnings is None:
        warnings = len(snapshot.warnings) + len(public_warnings(snapshot))
    tcp = sum(1 for r in snapshot.routes if r.tcp)
    hosts = len({r.host for r in snapshot.routes})
    return (
        f"ok: {snapshot.source}: services={o.services} listeners={', '.join(listeners)} "
        f"routes={len(snapshot.routes)} (hosts={hosts}, public={public}, tcp={tcp}) "
        f"warnings={warnings}"
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
    warnings = [*snapshot.warnings, *public_warnings(snapshot)]
    for warning in warnings:
        err.write(f"warning: {warning}\n")
    out.write(summary(snapshot, len(warnings)) + "\n")
    for line in accepted_providers(snapshot):
        out.write(line + "\n")
    return 0


def accepted_providers(snapshot: Snapshot) -> list[str]:
    """With ``identity_providers`` in use, one line per route that is not public: the
    providers it accepts, in configuration order, the interactive ones whose sessions
    it takes (every one unless it names some) and the bearer issuers it names (none
    with only the idp_* settings' provider: every route accepts that one)."""
    providers = snapshot.options.identity_providers
    if all(p.implicit for p in providers):
        return []
    lines = []
    for route in snapshot.routes + snapshot.ssh_routes:
        if route.allow_public_unauthenticated_access or route.redirect is not None:
            continue
        sessions = set(accepted_by(route.identity_providers, providers))
        named = set(route.identity_providers)
        accepted = [p.id if p.id in sessions else f"{p.id} (bearer)"
                    for p in providers if p.id in sessions
                    or (p.id in named and p.bearer is not None)]
        label = route.name or route.from_url
        lines.append(f"policy[{route.index}] {label}: accepts "
                     + (", ".join(accepted) if accepted else "nobody (no provider)"))
    return lines
