"""Two interactive identity providers (issue 42), two real node-oidc-provider instances,
with conf/identity-providers.example.yaml as shipped (its ports and app moved): the
chooser, the choice remembered and ``?provider=``, each session naming its provider
(assertion, claim header, who-am-I page, access log and audit stream), a route that
accepts one provider refusing the other's session with a page offering the right one,
and a mix-up attempt (a code of one provider delivered with the other's sign-in)
refused."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import yaml

from gateway.cli.check import run_check
from tests.support.browser import Browser, Reply
from tests.support.daemon import REPO_ROOT, Daemon, gateway_daemon
from tests.support.peers import OIDCProvider, echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "identity-providers.example.yaml"
CSRF = "_gateway_csrf"


@dataclass
class Setup:
    gw: Daemon
    port: int
    corp: OIDCProvider
    partners: OIDCProvider
    audit: Path

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}.localhost:{self.port}{path}"

    @property
    def callback(self) -> str:
        return self.url("authenticate", "/oauth2/callback")


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in {EXAMPLE.name}"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("providers")
    port = free_port()
    callback = [f"http://authenticate.localhost:{port}/oauth2/callback"]
    with ExitStack() as stack:
        corp = stack.enter_context(oidc_provider(tmp, callback))
        partners = stack.enter_context(oidc_provider(
            tmp, callback, client_id="gw-partners", client_secret="partners-secret",
            cookie_prefix="partners"))
        app = stack.enter_context(echo_upstream(tmp))
        config = yaml.safe_load(moved(EXAMPLE.read_text(), {
            ":8080": f":{port}", "http://127.0.0.1:9000": corp.issuer,
            "http://127.0.0.1:9001": partners.issuer,
            "http://127.0.0.1:8081": app.url}))
        audit = tmp / "audit.jsonl"
        config["audit_log_file"] = str(audit)
        gw = stack.enter_context(gateway_daemon(tmp, config, port=port))
        yield Setup(gw, port, corp, partners, audit)


def test_example_passes_check_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(EXAMPLE), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr().out
    assert "routes=2 (hosts=2, public=0, tcp=0) warnings=0" in out, out
    assert "policy[0] wiki: accepts corp, partners" in out, out
    assert "policy[1] payroll: accepts corp" in out, out


def text_of(reply: Reply) -> str:
    return " ".join(re.sub(r"<style>.*?</style>|<[^>]+>", " ", reply.body.decode(),
                           flags=re.S).split())


def links(reply: Reply) -> dict[str, str]:
    """The page's link buttons: label -> href."""
    found = re.findall(r'<a class=button href="([^"]+)">([^<]+)</a>', reply.body.decode())
    return {label: href.replace("&amp;", "&") for href, label in found}


def echoed(reply: Reply) -> dict[str, str]:
    assert reply.status == 200, (reply.status, reply.body[:400])
    return {k.lower(): v for k, v in json.loads(reply.body)["headers"]}


def assertion_claims(headers: dict[str, str]) -> dict[str, Any]:
    payload = headers["x-gateway-jwt-assertion"].split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * 4))
    return claims


def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_chooser_then_each_session_names_its_provider(setup: Setup) -> None:
    browser = Browser(accept="text/html,application/xhtml+xml")
    chooser = browser.follow(setup.url("wiki"))
    assert chooser.status == 200 and chooser.url.startswith(setup.url("authenticate"))
    choices = links(chooser)
    assert list(choices) == ["Example Corp account", "Partner account"], choices
    # provider names only: nothing of the route or its policy
    assert "wiki" not in text_of(chooser) and "payroll" not in text_of(chooser)
    # a click on the chooser page: the browser says it came from that page
    click = browser.request("GET", setup.url("authenticate", choices["Partner account"]),
                            headers={"Sec-Fetch-Site": "same-origin"})
    location = click.header("location")
    assert click.status == 302 and location is not None, click
    reply = browser.sign_in(location, "pat@partner.test")
    headers = echoed(reply)
    assert headers["x-gateway-provider"] == "partners"
    assert assertion_claims(headers)["idp"] == "partners"
    assert browser.cookies["authenticate.localhost"]["_gateway_provider"] == "partners"
    who = browser.request("GET", setup.url("wiki", "/.gateway/"))
    assert "Partner account (" + setup.partners.issuer + ")" in text_of(who), text_of(who)

    # the choice is remembered in this browser: a new sign-in skips the chooser
    for host in list(browser.cookies):
        if host != "authenticate.localhost":
            browser.cookies.pop(host)
    browser.cookies["authenticate.localhost"].pop("_gateway", None)
    again = browser.follow(setup.url("wiki", "/again"), stop=setup.partners.issuer)
    assert again.url.startswith(setup.partners.issuer + "/auth?"), again.url

    # a session of the company's provider, through ?provider=
    alice = Browser()
    start = alice.request("GET", setup.url("wiki"))
    sign_in = start.header("location")
    assert sign_in is not None and "/.gateway/sign_in?" in sign_in
    headers = echoed(alice.sign_in(sign_in + "&provider=corp", "alice@example.test"))
    assert headers["x-gateway-provider"] == "corp"
    assert assertion_claims(headers)["idp"] == "corp"
    # the link a person can be given: the route host's sign-in with ?provider=
    link = Browser().follow(setup.url("wiki", "/.gateway/sign_in?provider=partners"),
                            stop=setup.partners.issuer)
    assert link.url.startswith(setup.partners.issuer + "/auth?"), link.url

    def audited() -> set[str]:
        events = [json.loads(line) for line in setup.audit.read_text().splitlines()]
        return {e.get("provider") for e in events if e.get("decision") == "allow"}
    wait_until(lambda: {"corp", "partners"} <= audited())  # (written within 50 ms)
    access = [e for e in setup.gw.log_events() if e.get("namespace") == "gateway.access"
              and e.get("host", "").startswith("wiki.") and e.get("status") == 200]
    assert {"corp", "partners"} <= {e.get("provider") for e in access}


def test_a_route_of_one_provider_refuses_the_others_session(setup: Setup) -> None:
    """payroll accepts corp only: a partners session gets a 403 page offering the
    company's sign-in (not a redirect that would come straight back), which works."""
    browser = Browser()
    chooser = browser.follow(setup.url("wiki"))
    signed = browser.sign_in(setup.url("authenticate", links(chooser)["Partner account"]),
                             "pat@partner.test")
    assert echoed(signed)["x-gateway-provider"] == "partners"
    # the payroll host has no cookie yet: the sign-in on the authenticate host finds a
    # session of a provider payroll does not accept, and asks the right one
    payroll = browser.follow(setup.url("payroll"), stop=setup.corp.issuer)
    assert payroll.url.startswith(setup.corp.issuer + "/auth?"), payroll.url
    # with the partners session on the payroll host itself (a cookie it was handed):
    # the page, not a loop
    handed = browser.cookies["wiki.localhost"]["_gateway"]
    browser.cookies.setdefault("payroll.localhost", {})["_gateway"] = handed
    refused = browser.request("GET", setup.url("payroll"))
    assert refused.status == 403, (refused.status, refused.body[:300])
    assert "does not accept sign-ins through Partner account" in text_of(refused)
    offered = links(refused)
    assert list(offered) == ["Sign in with Example Corp account"], offered
    reply = browser.sign_in(offered["Sign in with Example Corp account"],
                            "alice@example.test")
    assert echoed(reply)["x-gateway-provider"] == "corp"


def provider_answer(browser: Browser, setup: Setup, provider: str, login: str
                    ) -> tuple[dict[str, str], str]:
    """Start a sign-in at ``provider`` and log in there, stopping at the gateway's
    callback: (its query, the CSRF cookie of this sign-in)."""
    start = browser.request("GET", setup.url("wiki"))
    location = start.header("location")
    assert location is not None
    first = browser.request("GET", location + f"&provider={provider}")
    csrf = browser.cookies["authenticate.localhost"][CSRF]
    authorize = first.header("location")
    assert authorize is not None
    answer = browser.sign_in(authorize, login, stop=setup.callback)
    assert answer.url.startswith(setup.callback), answer.url
    return {k: v[0] for k, v in parse_qs(urlsplit(answer.url).query).items()}, csrf


def test_a_mix_up_is_refused(setup: Setup) -> None:
    """A code from the partners provider delivered with a sign-in started at corp
    (RFC 9207's mix-up): refused by the response's ``iss``; with a forged ``iss`` the
    code goes to corp, which does not know it; the genuine answer still works."""
    browser = Browser()
    at_corp, corp_csrf = provider_answer(browser, setup, "corp", "alice@example.test")
    at_partners, _ = provider_answer(browser, setup, "partners", "pat@partner.test")
    assert at_corp["iss"] == setup.corp.issuer and at_partners["iss"] == setup.partners.issuer
    browser.cookies["authenticate.localhost"][CSRF] = corp_csrf

    def callback(**params: str) -> Reply:
        return browser.request("GET", f"{setup.callback}?{urlencode(params)}")

    mixed = callback(code=at_partners["code"], state=at_corp["state"],
                     iss=at_partners["iss"])
    assert mixed.status == 400 and "did not come from the provider" in text_of(mixed)
    no_iss = callback(code=at_partners["code"], state=at_corp["state"])
    assert no_iss.status == 400  # corp says it always sends iss
    forged = callback(code=at_partners["code"], state=at_corp["state"], iss=at_corp["iss"])
    assert forged.status == 502  # corp refused a code it never issued
    assert setup.gw.logged("sign-in through corp failed")
    genuine = callback(**at_corp)
    assert genuine.status == 302, (genuine.status, genuine.body[:300])


def test_chooser_in_chromium(setup: Setup, require_binary: Any) -> None:
    """A real browser: the chooser's link for the partner's provider, its login pages,
    and the route's answer naming the provider."""
    chromium = require_binary("chromium", "apt-get install -y chromium")
    node = require_binary("node", "apt-get install -y nodejs npm")
    browser_dir = REPO_ROOT / "tests" / "peers" / "browser"
    result = subprocess.run(
        [node, "signin.js", setup.url("wiki", "/chromium"), "pat@partner.test"],
        cwd=browser_dir, capture_output=True, text=True, timeout=120,
        env={"CHROMIUM": chromium, "PATH": "/usr/bin:/bin", "CHOOSE": "Partner account"})
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["url"] == setup.url("wiki", "/chromium")
    headers = {k.lower(): v for k, v in json.loads(seen["text"])["headers"]}
    assert headers["x-gateway-provider"] == "partners"
    remembered = next(c for c in seen["cookies"] if c["name"] == "_gateway_provider")
    assert remembered["value"] == "partners" and remembered["httpOnly"] is True
