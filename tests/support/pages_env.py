"""A gateway for the page tests (issue 16): the real daemon on loopback with the test
identity provider, an echo upstream, a route that admits one person, one whose upstream
is down and one whose upstream never answers; host names under ``.localhost`` so that
Chromium reaches them without DNS."""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import echo_upstream, oidc_provider
from tests.support.processes import free_port

COOKIE_SECRET = base64.b64encode(os.urandom(32)).decode()
SHARED_SECRET = base64.b64encode(os.urandom(32)).decode()
PRODUCT = "Acme <Access>"


@dataclass
class PagesEnv:
    gw: Daemon
    port: int
    issuer: str

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}.localhost:{self.port}{path}"

    @property
    def auth_origin(self) -> str:
        return f"http://authenticate.localhost:{self.port}"


@contextmanager
def pages_env(tmp: Path) -> Iterator[PagesEnv]:
    port = free_port()
    with ExitStack() as stack:
        op = stack.enter_context(oidc_provider(
            tmp, redirect_uris=[f"http://authenticate.localhost:{port}/oauth2/callback"],
            post_logout_redirect_uris=[f"http://public.localhost:{port}/bye"]))
        up = stack.enter_context(echo_upstream(tmp, name="app"))
        silent = socket.socket()  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        stack.callback(silent.close)
        dead = free_port()

        def route(host: str, to: str, **rules: Any) -> dict[str, Any]:
            return {"from": f"http://{host}.localhost:{port}", "to": to, **rules}

        config = {
            "authenticate_service_url": f"http://authenticate.localhost:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups"],
            "idp_service_account": "groups-from-claims",
            "cookie_secure": False, "cookie_secret": COOKIE_SECRET,
            "shared_secret": SHARED_SECRET,
            "signout_redirect_url": f"http://public.localhost:{port}/bye",
            "branding_product_name": PRODUCT,
            "policy": [
                route("app", up.url, allow_any_authenticated_user=True),
                route("admins", up.url, allowed_groups=["admins"],
                      allowed_users=["carol-the-admin@example.test"],
                      allowed_domains=["corp.example"]),
                route("dead", f"http://127.0.0.1:{dead}", allow_any_authenticated_user=True),
                route("slow", f"http://127.0.0.1:{silent.getsockname()[1]}",
                      allow_any_authenticated_user=True, timeout="1s"),
                route("public", up.url, allow_public_unauthenticated_access=True),
            ],
        }
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        yield PagesEnv(gw, port, op.issuer)
