"""The gateway's own pages over HTTP against the real daemon and identity provider
(issue 16): who am I in JSON and HTML on a route host and the authenticate host, the
answers to a stranger, the error family's JSON and headers, escaping of a user whose
name and groups hold markup, the sign-out confirmation, "sign in as someone else", and
that no page or header carries a token, cookie value or secret."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode, urljoin

import pytest

from tests.conftest import _require_binary
from tests.support.browser import Browser, Reply
from tests.support.pages_env import COOKIE_SECRET, SHARED_SECRET, PagesEnv, pages_env
from tests.support.peers import NODE_INSTALL_HINT

pytestmark = pytest.mark.integration
JSON = {"Accept": "application/json"}
EVIL = "<b>eve</b>@example.test#<i>grp</i>"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PagesEnv]:
    _require_binary("node", NODE_INSTALL_HINT)
    with pages_env(tmp_path_factory.mktemp("pages")) as e:
        yield e


def csp(env: PagesEnv) -> str:
    return ("default-src 'none'; style-src 'unsafe-inline'; "
            f"form-action 'self' {env.auth_origin}")


def assert_page_headers(env: PagesEnv, reply: Reply, sign_out_form: bool = False) -> None:
    """The issue's headers; a page with the sign-out form also lets that form's
    redirects through: the destination after sign-out and the provider's end-session."""
    names = [k.lower() for k, _ in reply.headers]
    extra = f" {env.url('public', '')} {env.issuer}" if sign_out_form else ""
    assert reply.header("content-security-policy") == csp(env) + extra
    assert names.count("x-frame-options") == 1  # the configured SAMEORIGIN is replaced
    assert reply.header("x-frame-options") == "DENY"
    assert reply.header("cache-control") == "no-store"


def assert_no_secrets(browser: Browser, reply: Reply) -> None:
    """No JWT, no cookie value, no configured secret in the body or a header."""
    text = reply.body.decode("utf-8", "replace") + "\n".join(
        f"{k}: {v}" for k, v in reply.headers if k.lower() != "set-cookie")
    assert not re.search(r"eyJ[A-Za-z0-9_-]{8,}\.", text), "a JWT on a page"
    for secret in (COOKIE_SECRET, SHARED_SECRET, "secret\""):
        assert secret not in text
    for jar in browser.cookies.values():
        for value in jar.values():
            assert value not in text


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, str, dict[str, str], str]] = []
        self.closed = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.closed = False
            self.forms.append((a.get("method", ""), a.get("action", ""), {}, ""))
        elif tag == "input" and self.forms:
            self.forms[-1][2][a.get("name", "")] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.closed = True

    def handle_data(self, data: str) -> None:
        if self.forms and data.strip() and not self.closed:
            method, action, fields, label = self.forms[-1]
            self.forms[-1] = (method, action, fields, label + data.strip())


def forms(reply: Reply) -> dict[str, tuple[str, str, dict[str, str]]]:
    parser = _Forms()
    parser.feed(reply.body.decode())
    return {label: (m, a, f) for m, a, f, label in parser.forms}


def switch_link(reply: Reply) -> str:
    (link,) = re.findall(r'<a class=button href="([^"]+)">Sign in as someone else</a>',
                         reply.body.decode())
    return html.unescape(link)


def signed_in(env: PagesEnv, login: str, host: str = "app") -> Browser:
    browser = Browser()
    reply = browser.sign_in(env.url(host, "/"), login)
    assert reply.status in (200, 403), reply.body[:300]
    return browser


def test_who_am_i_json_and_html(env: PagesEnv) -> None:
    browser = signed_in(env, "alice@example.test")
    reply = browser.request("GET", env.url("app", "/.gateway/"), headers=JSON)
    assert reply.status == 200
    doc = json.loads(reply.body)
    assert (doc["email"], doc["user_id"]) == ("alice@example.test", "alice@example.test")
    assert [g["name"] for g in doc["groups"]] == ["admins", "engineering"]
    assert doc["claims"]["email_verified"] == ["true"]
    assert doc["identity_provider"].startswith("http://127.0.0.1:")
    assert doc["session"]["expires_unix"] > doc["session"]["started_unix"]
    assert_page_headers(env, reply, sign_out_form=True)
    assert_no_secrets(browser, reply)
    page = browser.request("GET", env.url("app", "/.gateway/"))
    assert page.header("content-type") == "text/html; charset=utf-8"
    assert "Signed in as alice@example.test" in page.body.decode()
    assert "Acme &lt;Access&gt;" in page.body.decode()  # the branding, escaped
    assert "Sign out" in forms(page)
    assert switch_link(page).startswith(f"{env.auth_origin}/.gateway/sign_in?")
    assert_page_headers(env, page, sign_out_form=True)
    assert_no_secrets(browser, page)


def test_who_am_i_on_the_authenticate_host(env: PagesEnv) -> None:
    browser = signed_in(env, "bob@example.test")
    reply = browser.request("GET", f"{env.auth_origin}/.gateway/", headers=JSON)
    assert json.loads(reply.body)["email"] == "bob@example.test"


def test_stranger(env: PagesEnv) -> None:
    """Not signed in: scripts get 401 with a request id to quote, browsers the sign-in
    redirect (and back to the page after it)."""
    reply = Browser().request("GET", env.url("app", "/.gateway/"), headers=JSON)
    assert reply.status == 401
    doc = json.loads(reply.body)
    assert doc["request_id"] == reply.header("x-request-id")
    assert re.fullmatch(r"[0-9a-f]{32}", doc["request_id"])
    redirect = Browser().request("GET", env.url("app", "/.gateway/"))
    assert redirect.status == 302
    assert redirect.header("location").startswith(f"{env.auth_origin}/.gateway/sign_in?")
    browser = Browser()
    final = browser.sign_in(env.url("app", "/.gateway/"), "dana@example.test")
    assert final.url == env.url("app", "/.gateway/")
    assert "Signed in as dana@example.test" in final.body.decode()


@pytest.mark.parametrize(("host", "path", "status"), [
    ("app", "/.gateway/nothing", 404), ("nowhere", "/", 404), ("dead", "/", 503),
    ("slow", "/", 504)])
def test_error_family_json_and_headers(env: PagesEnv, host: str, path: str,
                                       status: int) -> None:
    browser = signed_in(env, "alice@example.test", "app") if host != "nowhere" else Browser()
    if host in ("dead", "slow"):
        browser.sign_in(env.url(host, "/"), "alice@example.test")
    reply = browser.request("GET", env.url(host, path), headers=JSON)
    assert reply.status == status
    doc = json.loads(reply.body)
    assert doc["status"] == status and doc["request_id"] == reply.header("x-request-id")
    assert_page_headers(env, reply)
    page = browser.request("GET", env.url(host, path))
    assert page.status == status
    text = page.body.decode()
    assert f"Error {status}" in text and "What you can do" in text
    assert page.header("x-request-id") in text
    assert "<script" not in text
    assert_page_headers(env, page)
    assert_no_secrets(browser, page)


def test_incoming_request_id_is_reused(env: PagesEnv) -> None:
    reply = Browser().request("GET", env.url("app", "/.gateway/nothing"),
                              headers={**JSON, "X-Request-Id": "support-1234"})
    assert reply.header("x-request-id") == "support-1234"
    assert json.loads(reply.body)["request_id"] == "support-1234"


def test_403_page_says_who_and_general_rule(env: PagesEnv) -> None:
    browser = Browser()
    reply = browser.sign_in(env.url("admins", "/x"), "bob@example.test")
    assert reply.status == 403
    text = reply.body.decode()
    assert "Signed in as <strong>bob@example.test</strong>" in text
    assert "corp.example" in text  # domains are shown
    assert "One person named by the administrator." in text
    assert "carol-the-admin" not in text and ">admins<" not in text
    assert reply.header("x-request-id") in text
    assert_page_headers(env, reply)
    assert_no_secrets(browser, reply)
    doc = json.loads(browser.request("GET", env.url("admins", "/x"), headers=JSON).body)
    assert doc["signed_in_as"] == "bob@example.test"
    assert "carol" not in json.dumps(doc)


def test_markup_in_name_and_groups_is_escaped(env: PagesEnv) -> None:
    browser = Browser()
    browser.sign_in(env.url("app", "/"), EVIL)
    for host in ("app", "admins"):
        path = "/.gateway/" if host == "app" else "/"
        page = browser.follow(env.url(host, path)).body.decode()
        assert "<b>" not in page and "<i>" not in page
        assert "&lt;b&gt;eve&lt;/b&gt;@example.test" in page
    doc = json.loads(browser.request("GET", env.url("app", "/.gateway/"),
                                     headers=JSON).body)
    # (markup makes it no valid address: routes do not use it, the page still names it)
    assert doc["email"] == ""
    assert doc["email_not_used"]["claimed"] == "<b>eve</b>@example.test"
    assert doc["groups"] == [{"name": "<i>grp</i>", "id": ""}]


def test_sign_out_confirmation_says_who_and_where(env: PagesEnv) -> None:
    browser = signed_in(env, "alice@example.test")
    page = browser.request("GET", env.url("app", "/.gateway/signout/"))
    text = page.body.decode()
    assert page.status == 200
    assert "<strong>alice@example.test</strong>" in text
    assert env.url("public", "/bye") in text
    assert "signed out of the identity provider" in text
    assert_page_headers(env, page, sign_out_form=True)
    assert_no_secrets(browser, page)
    method, action, fields = forms(page)["Sign out"]
    assert method == "post"
    done = browser.request("POST", urljoin(page.url, action), urlencode(fields).encode())
    assert done.status == 302
    after = browser.request("GET", env.url("app", "/.gateway/"), headers=JSON)
    assert after.status == 401


def test_sign_in_as_someone_else(env: PagesEnv, tmp_path: Path) -> None:
    """From the 403 page: the provider asks for a login again, the new person lands on
    the route, and the old session is over on every host."""
    browser = Browser()
    refused = browser.sign_in(env.url("admins", "/x?y=1"), "bob@example.test")
    assert refused.status == 403
    old_cookies = {h: dict(j) for h, j in browser.cookies.items()}
    link = switch_link(refused)
    assert link.startswith(f"{env.auth_origin}/.gateway/sign_in?gateway_redirect=")
    final = browser.sign_in(link, "alice@example.test")
    assert final.status == 200, final.body[:3000]
    assert final.url == env.url("admins", "/x?y=1"), final.body.decode()[-1500:]
    assert any(m == "POST" and "interaction" in u for m, u, _ in browser.history[-12:]), \
        "the provider asked for a login again"
    stale = Browser(cookies=old_cookies)
    reply = stale.request("GET", env.url("app", "/.gateway/"), headers=JSON)
    assert reply.status == 401  # bob's session ended with the switch
