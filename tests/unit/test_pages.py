"""The gateway's own pages as pure functions (issue 16): the error family, who am I,
sign-out; escaping of everything shown, the headers every page carries, branding, the
request id, and what a 403 may say about the route's rules."""

from __future__ import annotations

import json
import re
from types import MappingProxyType

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.routes import Route
from gateway.pages.errors import ErrorView, render_error
from gateway.pages.layout import Action, Look, content_security_policy, look_of
from gateway.pages.request_id import request_id
from gateway.pages.rules import admits
from gateway.pages.signout import confirm_sign_out
from gateway.pages.whoami import Group, Profile, render_profile

from .config.helpers import IDENTITY, base_config, errors_of, load

EVIL = '<script>alert("x")</script>'
LOOK = Look(auth_origin="https://auth.example.com")
AT = 1_700_000_000.0
STATUSES = (400, 401, 403, 404, 421, 426, 495, 502, 503, 504)


def header(pairs: tuple[tuple[bytes, bytes], ...], name: bytes) -> bytes | None:
    return next((v for k, v in pairs if k.lower() == name), None)


def no_markup(test: SynchronousTestCase, body: bytes) -> None:
    """Nothing that runs or loads: no script, no element from the evil input."""
    text = body.decode()
    test.assertNotIn("<script", text.lower())
    test.assertNotIn(EVIL, text)
    test.assertIsNone(re.search(r"<[^>]+\son\w+=", text), "an event-handler attribute")


class HeaderTests(SynchronousTestCase):
    def test_csp_and_framing(self) -> None:
        """The issue's policy exactly, with the authenticate origin as a form target."""
        _, headers = render_error(ErrorView(404, "", "rid", AT), LOOK, html=True,
                                  as_json=False)
        self.assertEqual(header(headers, b"content-security-policy"),
                         b"default-src 'none'; style-src 'unsafe-inline'; "
                         b"form-action 'self' https://auth.example.com")
        self.assertEqual(header(headers, b"x-frame-options"), b"DENY")
        self.assertEqual(header(headers, b"cache-control"), b"no-store")
        self.assertEqual(header(headers, b"x-request-id"), b"rid")

    def test_logo_origin_is_allowed_as_image(self) -> None:
        look = Look(logo_url="https://cdn.example.net/logo.svg", auth_origin="https://a.b")
        self.assertTrue(content_security_policy(look).endswith(
            b"; img-src https://cdn.example.net"))
        self.assertTrue(content_security_policy(Look(logo_url="data:image/png;base64,AA"))
                        .endswith(b"; img-src data:"))

    def test_look_of_options(self) -> None:
        snap = load(base_config(**IDENTITY, branding_product_name="Acme Access",
                                branding_logo_url="https://cdn.example.net/l.png"))
        look = look_of(snap.options)
        self.assertEqual(look, Look("Acme Access", "https://cdn.example.net/l.png",
                                    "https://authenticate.example.com"))


class BrandingSettingsTests(SynchronousTestCase):
    def test_bad_values_name_the_key(self) -> None:
        for key, value in (("branding_logo_url", "javascript:alert(1)"),
                           ("branding_logo_url", "data:text/html,hi"),
                           ("branding_logo_url", 'https://x.example/"a'),
                           ("branding_product_name", "x" * 81),
                           ("branding_product_name", "a\x1bb")):
            with self.subTest(key=key, value=value):
                problems = errors_of(base_config(**IDENTITY, **{key: value}))
                self.assertTrue(any(key in str(p) for p in problems), problems)

    def test_good_values(self) -> None:
        for logo in ("https://cdn.example.net/l.svg", "data:image/png;base64,AAAA"):
            options = load(base_config(**IDENTITY, branding_logo_url=logo)).options
            self.assertEqual(options.branding_logo_url, logo)


class ErrorFamilyTests(SynchronousTestCase):
    def test_every_status_says_what_and_what_to_do_and_what_to_quote(self) -> None:
        for status in STATUSES:
            body, headers = render_error(ErrorView(status, "", "Q1w2E3r4T5y6", AT), LOOK,
                                         html=True, as_json=False)
            text = body.decode()
            with self.subTest(status=status):
                self.assertIn(f"Error {status}", text)
                self.assertIn("What you can do", text)
                self.assertIn("Q1w2E3r4T5y6", text)
                self.assertIn("2023-11-14 22:13:20 UTC", text)
                self.assertIn('name=viewport', text)
                self.assertIn("prefers-color-scheme:dark", text)
                self.assertNotIn("<script", text)
                self.assertNotIn("http://", text.replace("http-equiv", ""))  # no external
                self.assertEqual(header(headers, b"content-type"),
                                 b"text/html; charset=utf-8")

    def test_json_and_text_forms(self) -> None:
        view = ErrorView(503, "upstream connect error", "abc", AT)
        body, headers = render_error(view, LOOK, html=False, as_json=True)
        self.assertEqual(json.loads(body), {"status": 503, "error": "upstream connect error",
                                            "request_id": "abc",
                                            "time": "2023-11-14T22:13:20Z"})
        self.assertEqual(header(headers, b"content-type"), b"application/json")
        body, headers = render_error(view, LOOK, html=False, as_json=False)
        self.assertEqual(body, b"503 Service Unavailable: upstream connect error\n")
        self.assertEqual(header(headers, b"x-request-id"), b"abc")

    def test_403_escapes_who_and_message(self) -> None:
        view = ErrorView(403, f"You are signed in as {EVIL}", "r", AT, who=EVIL,
                         admits=("People whose e-mail address is in: example.com.",),
                         actions=(Action("Sign in as someone else",
                                         "https://auth.example.com/.gateway/sign_in", "get",
                                         (("gateway_redirect", f'x"{EVIL}'),)),),
                         host=f"{EVIL}.example")
        body, _ = render_error(view, LOOK, html=True, as_json=False)
        no_markup(self, body)
        self.assertIn("&lt;script&gt;", body.decode())
        self.assertIn("Who this route lets in", body.decode())

    def test_branding_is_escaped(self) -> None:
        look = Look(product_name=EVIL, logo_url='https://x.example/l.png"onerror="alert(1)')
        body, _ = render_error(ErrorView(404, "", "r", AT), look, html=True, as_json=False)
        no_markup(self, body)
        self.assertIn("&lt;script&gt;", body.decode())


class WhoAmITests(SynchronousTestCase):
    profile = Profile(
        email=f"{EVIL}@example.com", user_id=EVIL, name=EVIL,
        groups=(Group(EVIL, f"cn={EVIL},ou=groups"), Group("staff")),
        claims=MappingProxyType({"department": (EVIL,), "nonce": ("n",), "email": ("e",)}),
        started=AT, expires=AT + 3600, identity_provider="https://idp.example.com",
        host="app.example.com")

    def test_html_escapes_everything(self) -> None:
        body, headers = render_profile(self.profile, LOOK, (), as_json=False)
        no_markup(self, body)
        text = body.decode()
        self.assertIn("staff", text)
        self.assertIn("cn=&lt;script&gt;", text)
        self.assertIn("2023-11-14 23:13:20 UTC", text)  # session end
        self.assertNotIn(">nonce<", text)  # claims about the token, not the person
        self.assertEqual(header(headers, b"x-frame-options"), b"DENY")

    def test_json(self) -> None:
        body, headers = render_profile(self.profile, LOOK, (), as_json=True)
        doc = json.loads(body)
        self.assertEqual(doc["user_id"], EVIL)
        self.assertEqual(doc["groups"][0], {"name": EVIL, "id": f"cn={EVIL},ou=groups"})
        self.assertEqual(doc["claims"], {"department": [EVIL], "email": ["e"]})
        self.assertEqual(doc["session"]["expires_unix"], int(AT + 3600))
        self.assertEqual(doc["identity_provider"], "https://idp.example.com")
        self.assertEqual(header(headers, b"content-type"), b"application/json")

    def test_sign_out_confirmation(self) -> None:
        body, _ = confirm_sign_out(EVIL, f"https://x.example/{EVIL}", True,
                                   Action("Sign out", "/.gateway/signout/"), LOOK)
        no_markup(self, body)
        self.assertIn("will also be signed out of the identity provider", body.decode())


class RequestIdTests(SynchronousTestCase):
    def test_made_once_and_added_to_the_request(self) -> None:
        headers: list[tuple[bytes, bytes]] = [(b"host", b"a")]
        first = request_id(headers)
        self.assertRegex(first, r"^[0-9a-f]{32}$")
        self.assertEqual(request_id(headers), first)
        self.assertEqual(headers[-1], (b"x-request-id", first.encode()))

    def test_incoming_id_reused_when_plain(self) -> None:
        self.assertEqual(request_id([(b"X-Request-Id", b"abc-123.x")]), "abc-123.x")
        for bad in (b"<b>", b"a" * 129, b"", b"a b", b"\xff"):
            headers = [(b"X-Request-Id", bad)]
            rid = request_id(headers)
            self.assertNotEqual(rid.encode(), bad)
            self.assertEqual([v for k, v in headers if k.lower() == b"x-request-id"],
                             [rid.encode()])


class RuleTermsTests(SynchronousTestCase):
    def route(self, **rules: object) -> Route:
        snap = load(base_config(**IDENTITY, policy=[
            {"from": "https://app.example.com", "to": "http://127.0.0.1:9", **rules}]))
        return snap.routes[0]

    def test_never_names_people_groups_or_claim_values(self) -> None:
        route = self.route(allowed_users=["carol@example.com", "dave-id"],
                           allowed_domains=["Example.COM"],
                           allowed_groups=["cn=admins,ou=groups", "secret-project"],
                           allowed_idp_claims={"department": ["hush"]})
        terms = " ".join(admits(route))
        for hidden in ("carol", "dave", "admins", "secret-project", "department", "hush"):
            self.assertNotIn(hidden, terms)
        self.assertIn("2 people named by the administrator", terms)
        self.assertIn("example.com", terms)
        self.assertIn("any of 2 groups", terms)
        self.assertIn("certain attributes", terms)

    def test_groups_without_data_and_no_rules(self) -> None:
        self.assertIn("not in effect", " ".join(admits(self.route(allowed_groups=["a"]),
                                                       groups_available=False)))
        self.assertIn("Nobody yet", admits(self.route())[0])


class RepetitionTests(SynchronousTestCase):
    def test_a_message_that_only_repeats_the_title_is_not_shown_twice(self) -> None:
        body, _ = render_error(ErrorView(404, "Not found.", "r", AT), LOOK, html=True,
                               as_json=False)
        self.assertNotIn("<p>Not found.</p>", body.decode())
        body, _ = render_error(ErrorView(404, "no route matches this path", "r", AT), LOOK,
                               html=True, as_json=False)
        self.assertIn("<p>no route matches this path</p>", body.decode())
