"""Sign-in for the authenticated route, with the stdlib-only test peers of
``tests/support``: node-oidc-provider, and one sign-in whose cookie wrk then sends."""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .gateway import AUTH_HOST, AUTH_USER, AuthProvider
from .paths import REPO_ROOT, import_peers


def auth_unavailable(args: argparse.Namespace) -> str | None:
    """Why the authenticated-route section cannot run, or None."""
    if args.no_auth:
        return "--no-auth"
    try:
        peers, _ = import_peers()
    except ImportError as exc:
        return f"tests/support could not be imported: {exc}"
    if peers.find_binary("node") is None:
        return f"node not found ({peers.NODE_INSTALL_HINT})"
    if not (peers.OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        return (f"{peers.OIDC_DIR.relative_to(REPO_ROOT)}/node_modules is missing oidc-provider "
                f"(run `{peers.OIDC_INSTALL_HINT}` from the repository root)")
    return None


def start_provider(stack: contextlib.ExitStack, tmp: Path, gw_port: int,
                   tls_port: int | None = None) -> tuple[AuthProvider, int | None]:
    """node-oidc-provider on a free loopback port, stopped when ``stack`` closes; its PID.
    ``tls_port``: the TLS section's gateway signs in with it too."""
    peers, _ = import_peers()
    uris = [f"http://auth.test:{gw_port}/oauth2/callback"]
    if tls_port is not None:
        uris.append(f"https://auth.test:{tls_port}/oauth2/callback")
    op = stack.enter_context(peers.oidc_provider(tmp, redirect_uris=uris))
    return AuthProvider(op.issuer, op.client_id, op.client_secret), op.process.pid


def sign_in(gw_port: int, tls: Any = None) -> dict[str, Any]:
    """Sign in once through the gateway; the wrk headers for the authenticated route.
    ``tls``: an ``ssl.SSLContext`` for a gateway serving https."""
    _, browser_mod = import_peers()
    browser = browser_mod.Browser(tls=tls)
    url = f"{'https' if tls is not None else 'http'}://{AUTH_HOST}:{gw_port}/"
    t0 = time.monotonic()
    reply = browser.sign_in(url, AUTH_USER)
    seconds = time.monotonic() - t0
    jar = browser.cookies.get(AUTH_HOST, {})
    if reply.status != 200 or "_gateway" not in jar:
        raise RuntimeError(f"sign-in at {url} as {AUTH_USER} ended with {reply.status} "
                           f"({reply.body[:200]!r}), cookies for {AUTH_HOST}: {sorted(jar)}")
    # the whole jar for the host: _gateway (and any chunks of it, should there be any)
    cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
    return {"host": f"{AUTH_HOST}:{gw_port}", "cookie": cookie, "cookie_names": sorted(jar),
            "cookie_bytes": len(cookie), "sign_in_seconds": round(seconds, 2)}


def start_auth(args: argparse.Namespace, stack: contextlib.ExitStack, tmp: Path, gw_port: int,
               tls_port: int | None, auth: dict[str, Any]
               ) -> tuple[AuthProvider | None, list[int]]:
    """The provider the authenticated route signs in with (and, with ``--kvstore``, the
    Redis its sessions live in), stopped when ``stack`` closes; None when the route is
    skipped or the provider did not start (``auth``, the results' ``auth``, says which).
    Also the provider's PID: its CPU is the benchmark's, not "other processes"."""
    provider: AuthProvider | None = None
    pids: list[int] = []
    skip = auth_unavailable(args)
    if skip is not None:
        auth["skipped"] = skip
        print(f"authenticated route: skipped: {skip}", flush=True)
    else:
        try:
            provider, pid = start_provider(stack, tmp, gw_port, tls_port)
            pids = [pid] if pid else []
            if args.kvstore:
                peers, _ = import_peers()
                redis = stack.enter_context(peers.redis_server(tmp))
                provider = replace(
                    provider, kvstore=f"kvstore://127.0.0.1:{redis.port}/0")
                auth["storage"] = "kvstore"
            auth["issuer"] = provider.issuer
        except Exception as exc:
            auth["error"] = f"the OIDC provider did not start: {exc}"
            print(f"authenticated route: ERROR: {auth['error']}", flush=True)
    return provider, pids
