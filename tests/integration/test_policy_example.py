"""conf/policy.example.yaml, the configuration the policy reference and the first-policy
tutorial include (tests/docs/test_examples.py holds them to it): it passes ``gateway
check`` as shipped, and run with only its ports moved (the gateway's :8080, the
provider's :9000, the app's :8081), people signed in at the real provider get exactly
what its rules say, at whatever time the test runs (its night and weekend rules are
checked against the clock, not patched)."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from gateway.cli.check import run_check
from tests.conftest import _require_binary
from tests.support.browser import Browser
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import NODE_INSTALL_HINT, echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "policy.example.yaml"


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    """The status route lets everyone in (``accept``): it is counted as public, with the
    one warning that says so (it was counted as not public: issue 39 part 3)."""
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "routes=3 (hosts=3, public=1, tcp=0) warnings=1" in out.out, out
    assert out.err == ("warning: policy[1].policy: lets some requests in without sign-in "
                       "(allow[0]); the route is counted as public\n"), out


def night_in_berlin() -> bool:
    hour = datetime.datetime.now(ZoneInfo("Europe/Berlin")).hour
    return hour >= 23 or hour < 5


def weekend() -> bool:
    return datetime.datetime.now(datetime.UTC).weekday() >= 5


def test_example_runs(tmp_path: Path) -> None:
    _require_binary("node", NODE_INSTALL_HINT)
    port = free_port()
    text = EXAMPLE.read_text()
    with echo_upstream(tmp_path, name="app") as up, oidc_provider(
            tmp_path, redirect_uris=[f"http://authenticate.localhost:{port}/oauth2/callback"]
    ) as op:
        for old, new in ((":8080", f":{port}"), ("http://127.0.0.1:9000", op.issuer),
                         ("http://127.0.0.1:8081", up.url.rstrip("/"))):
            assert old in text, f"{old} is no longer in {EXAMPLE.name}"
            text = text.replace(old, new)
        config = yaml.safe_load(text)
        config["idp_client_id"], config["idp_client_secret"] = op.client_id, op.client_secret
        with gateway_daemon(tmp_path, config, port=port):
            def url(host: str, path: str = "/") -> str:
                return f"http://{host}.localhost:{port}{path}"

            night = night_in_berlin()
            alice, bob, carol = Browser(), Browser(), Browser()
            for browser, login in ((alice, "alice@example.test"), (bob, "bob@example.test"),
                                   (carol, "carol@elsewhere.test")):
                reply = browser.sign_in(url("wiki"), login)
                expected = 403 if night or login.startswith("carol") else 200
                assert reply.status == expected, (login, reply.status, reply.body[:200])
            if not night:
                assert json.loads(bob.request("GET", url("wiki", "/page")).body)["path"] \
                    == "/page"
                admin = bob.request("GET", url("wiki", "/admin/"))
                assert admin.status == 403
                assert alice.request("GET", url("wiki", "/admin/")).status == 200
                # from loopback, deletions are not refused
                assert bob.request("DELETE", url("wiki", "/page")).status == 200
            # status: anyone, signed in or not; its API from loopback too
            anonymous = Browser()
            assert anonymous.request("GET", url("status")).status == 200
            assert anonymous.request("GET", url("status", "/api/health")).status == 200
            # reports: the allowed_domains field, closed at weekends
            carol.sign_in(url("reports"), "carol@elsewhere.test")
            bob_reports = bob.sign_in(url("reports"), "bob@example.test")
            assert bob_reports.status == (403 if weekend() else 200)
            assert carol.request("GET", url("reports")).status == 403
