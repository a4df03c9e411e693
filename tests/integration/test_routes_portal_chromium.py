"""The routes portal in a real browser (issue 30): the daemon with routes whose policies
admit different people (groups, a named person, a deny by e-mail, time windows built
around the current time), the test identity provider, and Debian's headless Chromium.
Two people with different groups and e-mail addresses sign in, each in a browser of
their own, and each sees exactly their routes on ``/.gateway/routes``: links to HTTP
routes, the ``gateway tcp`` command of a TCP route, the public route marked, the
time-dependent one with its note; nothing of the others' routes, no markup as elements,
nothing scrolling sideways on a phone."""

from __future__ import annotations

import base64
import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _require_binary
from tests.integration.test_pages_chromium import WIDTHS, run_pages
from tests.support.daemon import gateway_daemon
from tests.support.peers import NODE_INSTALL_HINT, echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
ALICE = "alice@example.test#staff"
BOB = "bob@example.test#engineering"


@dataclass
class Env:
    port: int

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}.localhost:{self.port}{path}"


def _clock(moment: dt.datetime) -> str:
    return moment.strftime("%H:%M")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    _require_binary("node", NODE_INSTALL_HINT)
    tmp = tmp_path_factory.mktemp("routes-portal")
    port = free_port()
    now = dt.datetime.now(dt.UTC)
    # a window that holds now (whatever the time: it may wrap midnight) and one that
    # does not; the test runs in minutes, far inside either edge
    open_now = {"after": _clock(now - dt.timedelta(hours=2)),
                "before": _clock(now + dt.timedelta(hours=2))}
    closed_now = {"after": _clock(now + dt.timedelta(hours=3)),
                  "before": _clock(now + dt.timedelta(hours=5))}
    with oidc_provider(tmp, redirect_uris=[
            f"http://authenticate.localhost:{port}/oauth2/callback"]) as op, \
            echo_upstream(tmp, name="app") as up:

        def route(host: str, **rules: Any) -> dict[str, Any]:
            return {"from": f"http://{host}.localhost:{port}", "to": up.url, **rules}

        signed_in = {"authenticated_user": True}
        config = {
            "authenticate_service_url": f"http://authenticate.localhost:{port}",
            "idp_provider": "oidc", "idp_provider_url": op.issuer,
            "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
            "idp_scopes": ["openid", "email", "groups"],
            "idp_service_account": "groups-from-claims",
            "cookie_secure": False,
            "cookie_secret": base64.b64encode(os.urandom(32)).decode(),
            "shared_secret": base64.b64encode(os.urandom(32)).decode(),
            "policy": [
                route("home", allow_any_authenticated_user=True),
                route("wiki", policy=[{"allow": {"or": [{"groups": {"has": "engineering"}}]}}]),
                route("staff", allowed_groups=["staff"]),
                route("ceo", allowed_users=["ceo@example.test"]),
                route("notbob", policy=[{"allow": {"or": [signed_in]}},
                                        {"deny": {"or": [{"email": {"is": "bob@example.test"}}]}}]),
                route("late", policy=[{"allow": {"and": [signed_in,
                                                         {"time_of_day": open_now}]}}]),
                route("shut", policy=[{"allow": {"and": [signed_in,
                                                         {"time_of_day": closed_now}]}}]),
                route("www", allow_public_unauthenticated_access=True),
                {"from": f"http://moved.localhost:{port}",
                 "redirect": {"host_redirect": "www.localhost"}},
                {"from": "tcp+https://db.localhost:5432", "to": f"tcp://127.0.0.1:{free_port()}",
                 "allowed_users": ["alice@example.test"]},
            ],
        }
        with gateway_daemon(tmp, config, port=port):
            yield Env(port)


def portal(env: Env, tmp_path: Path, login: str) -> list[dict[str, Any]]:
    """Sign ``login`` in (in a browser of its own) and show the portal at each width."""
    tmp_path.mkdir()
    page = env.url("home", "/.gateway/routes")
    out = run_pages(tmp_path, {"signin": {"url": page, "login": login},
                               "shots": [{"name": "routes", "url": page}]})
    shots: list[dict[str, Any]] = out["shots"]
    assert [s["width"] for s in shots] == list(WIDTHS)
    return shots


def check(env: Env, shots: list[dict[str, Any]], who: str, sees: set[str]) -> None:
    hosts = {"home", "wiki", "staff", "ceo", "notbob", "late", "shut", "www", "moved", "db"}
    for shot in shots:
        where = f"{who} at {shot['width']}px"
        text = shot["text"]
        assert shot["status"] == 200, where
        assert "Your routes" in text and who in text, f"{where}: {text!r}"
        for host in hosts:
            shown = f"{host}.localhost:" in text
            assert shown == (host in sees), f"{where}: {host} shown={shown}: {text!r}"
        assert "public" in text, where  # www is marked
        if "late" in sees:
            assert "Access depends on the time of day." in text, where
        assert shot["forbidden"] == 0, f"{where}: markup became elements"
        assert not shot["sideways"], f"{where} scrolls sideways"
        assert shot["headers"]["x-frame-options"] == "DENY", where
        assert Path(shot["file"]).stat().st_size > 5000, where  # a real screenshot


def test_each_person_sees_exactly_their_routes(env: Env, tmp_path: Path) -> None:
    alice = portal(env, tmp_path / "alice", ALICE)
    check(env, alice, "alice@example.test", {"home", "staff", "notbob", "late", "www", "db"})
    command = f"gateway tcp --gateway-url {env.url('home', '')} db.localhost:5432"
    assert all(command in shot["text"] for shot in alice), alice[0]["text"]

    bob = portal(env, tmp_path / "bob", BOB)
    check(env, bob, "bob@example.test", {"home", "wiki", "late", "www"})
    assert "gateway tcp" not in bob[0]["text"]
