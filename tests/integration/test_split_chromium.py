"""Split mode in a real browser (issue 17): Debian's headless Chromium signs in through
proxy A, then opens proxy B's route (another host, so B's own cookie comes from a
hand-off through authenticate) without seeing the provider again; a sign-out through A
ends the session on B within a second, although the browser still holds B's cookie.

Processes: a databroker on Redis, authorize, authenticate and two proxies asking
authorize over gRPC, from one configuration that differs only in ``services`` (and the
ports, all on loopback). Host names under ``.localhost`` reach 127.0.0.1 without DNS."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _require_binary
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.kvstore import COOKIE, SECRET
from tests.support.peers import NODE_INSTALL_HINT, echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"
LOGIN = "alice@example.test"


def config(op: Any, redis_url: str, upstream: str, ports: dict[str, int], services: str
           ) -> dict[str, Any]:
    common: dict[str, Any] = {
        "services": services,
        "authenticate_service_url": f"http://authenticate.localhost:{ports['authenticate']}",
        "authorize_service_url": f"http://127.0.0.1:{ports['authorize_grpc']}",
        "databroker_service_url": f"http://127.0.0.1:{ports['databroker_grpc']}",
        "databroker_storage_type": "kvstore",
        "databroker_storage_connection_string": redis_url,
        "idp_provider": "oidc", "idp_provider_url": op.issuer,
        "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
        "idp_scopes": ["openid", "email", "groups"],
        "cookie_secure": False, "shared_secret": SECRET, "cookie_secret": COOKIE,
        "grpc_insecure": True, "grpc_client_timeout": "2s",
        "jwt_claims_headers": {"x-email": "email"},
        "policy": [{"from": f"http://{name}.localhost:{ports[name]}", "to": upstream,
                    "allowed_users": [LOGIN], "pass_identity_headers": True}
                   for name in ("a", "b")],
    }
    if services in ("databroker", "authorize"):
        common["grpc_address"] = f"127.0.0.1:{ports[services + '_grpc']}"
    return common


def run_browser(tmp_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    chromium = _require_binary("chromium", "apt-get install -y chromium")
    node = _require_binary("node", NODE_INSTALL_HINT)
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("run `npm ci --prefix tests/peers/browser` first")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    result = subprocess.run([node, "split.js", str(path)], cwd=BROWSER_DIR,
                            capture_output=True, text=True, timeout=180,
                            env={"CHROMIUM": chromium, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def test_one_browser_across_two_proxies(tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    names = ("authenticate", "a", "b", "databroker_grpc", "authorize_grpc")
    ports = {name: free_port() for name in names}
    callbacks = [f"http://authenticate.localhost:{ports['authenticate']}/oauth2/callback"]
    with redis_server(tmp_path) as redis, \
            oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up:
        url = f"kvstore://127.0.0.1:{redis.port}/0"

        def daemon(services: str, **where: Any) -> Any:
            (tmp_path / services).mkdir(exist_ok=True)
            return gateway_daemon(tmp_path / services,
                                  config(op, url, up.url, ports, services), **where)

        with daemon("databroker", ready_port=ports["databroker_grpc"]), \
                daemon("authorize", ready_port=ports["authorize_grpc"]), \
                daemon("authenticate", port=ports["authenticate"]):
            (tmp_path / "b").mkdir()
            with daemon("proxy", port=ports["a"]), \
                    gateway_daemon(tmp_path / "b",
                                   config(op, url, up.url, ports, "proxy"), port=ports["b"]):
                a = f"http://a.localhost:{ports['a']}"
                b = f"http://b.localhost:{ports['b']}"
                out = run_browser(tmp_path, {
                    "signin": {"url": f"{a}/first", "login": LOGIN},
                    "other": f"{b}/second", "signout": f"{a}/.gateway/signout/",
                    "issuer": op.issuer, "window_ms": 1000})
    # signed in through A: the upstream got authorize's identity
    assert out["a"]["url"] == f"{a}/first", out["a"]
    assert LOGIN in out["a"]["text"] and "x-gateway-jwt-assertion" in out["a"]["text"]
    # B's route at once, without the provider's pages (a hand-off via authenticate)
    assert out["b"]["url"] == f"{b}/second" and out["b"]["status"] == 200, out["b"]
    assert LOGIN in out["b"]["text"]
    assert out["b"]["provider_pages"] == 0 and not out["b"]["login_form"]
    # signed out through A: B's cookie is still in the browser, its session is not
    assert "_gateway@b.localhost" in out["cookies_after"], out["cookies_after"]
    after = out["after"]
    assert not (after["url"].startswith(b) and after["status"] == 200), after
    assert after["elapsed_ms"] <= 1000, after
    # A's sign-out ended the provider's session too (A read its discovery document
    # first): B's request ends on the provider's login form, not signed in again
    assert after["url"].startswith(op.issuer) and after["login_form"], after
