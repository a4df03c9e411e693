"""The identity layer's pages without a network (issue 16): ``/.gateway/`` for a
signed-in person, a stranger and a script; the 403 page's who and which rule; the
sign-out confirmation's who and where; "sign in as someone else"; and that no page
carries a token, a session id or a cookie value."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.defer import Deferred, succeed

from gateway.authenticate.targets import SIGN_IN, SIGN_OUT
from gateway.authorize.hook import Reply
from gateway.sessions.model import Session

from .test_identity import (
    ALICE,
    APP,
    AUTH,
    BROWSER,
    JSON,
    NOW,
    SIGNED_OUT,
    IdentityCase,
    form_of,
    header,
    location,
    request,
)

EVIL = '<img src=x onerror=alert(1)>'
MARKUP = {"sub": f"id-{EVIL}", "email": f"{EVIL}@example.com", "name": EVIL,
          "groups": [EVIL], "department": EVIL}


class FakeProvider:
    """The two calls the pages and sign-in start make on ``oidc.Provider``."""

    metadata_loaded = True

    def __init__(self) -> None:
        self.started: list[tuple[str, bool]] = []

    def start_url(self, state: str, nonce: str, challenge: str, fresh_login: bool = False
                  ) -> Deferred[str]:
        self.started.append((state, fresh_login))
        return succeed("https://idp.example.com/auth?prompt=login" if fresh_login
                       else "https://idp.example.com/auth")

    def end_session_url(self, id_token: str, post_logout: str) -> str | None:
        return f"https://idp.example.com/logout?to={post_logout}"


class Undiscovered(FakeProvider):
    """A provider whose discovery document this process has not read yet."""

    metadata_loaded = False

    def __init__(self) -> None:
        super().__init__()
        self.discovered = 0

    async def metadata(self) -> dict[str, Any]:
        self.discovered += 1
        self.metadata_loaded = True
        return {}

    def end_session_url(self, id_token: str, post_logout: str) -> str | None:
        return super().end_session_url(id_token, post_logout) if self.metadata_loaded \
            else None


class Unreachable(Undiscovered):
    """A provider whose discovery document cannot be read."""

    async def metadata(self) -> dict[str, Any]:
        self.discovered += 1
        raise OSError("connection refused")


class PagesCase(IdentityCase):
    def session(self, claims: dict[str, Any] | None = None) -> Session:
        return self.identity.new_session(dict(claims or ALICE), "idtoken-SECRET-1",
                                         "access-SECRET-2", "refresh-SECRET-3", NOW + 3600)

    def who(self, session: Session | None, accept: tuple[bytes, bytes] = BROWSER,
            host: str = APP) -> Any:
        headers = [accept] + ([self.cookie(session)] if session else [])
        return self.internal("/.gateway/", host=host, headers=headers)

    def assertNoSecrets(self, decision: Reply, session: Session) -> None:
        cookie = self.cookie(session)[1].split(b"=", 1)[1]
        for secret in (b"SECRET", session.id.encode(), cookie,
                       self.snapshot.material.cookie_secret,
                       self.snapshot.material.shared_secret):
            self.assertNotIn(secret, decision.body)
            for _, value in decision.headers:
                self.assertNotIn(secret, value)


class WhoAmITests(PagesCase):
    def test_json_for_scripts(self) -> None:
        alice = self.session()
        decision = self.who(alice, JSON)
        self.assertEqual(decision.status, 200)
        doc = json.loads(decision.body)
        self.assertEqual((doc["email"], doc["user_id"], doc["name"]),
                         ("alice@example.com", "alice-id", "Alice"))
        self.assertEqual(doc["groups"], [{"name": "staff", "id": ""}])
        self.assertEqual(doc["claims"]["email"], ["alice@example.com"])
        self.assertEqual(doc["session"]["started_unix"], int(alice.issued_at))
        self.assertEqual(doc["session"]["expires_unix"], int(alice.expires_at))
        self.assertEqual(doc["identity_provider"], "https://idp.example.com")
        self.assertNoSecrets(decision, alice)

    def test_html_with_sign_out_button(self) -> None:
        alice = self.session()
        decision = self.who(alice)
        self.assertEqual(header(decision, b"content-type"), b"text/html; charset=utf-8")
        self.assertEqual(header(decision, b"x-frame-options"), b"DENY")
        text = decision.body.decode()
        self.assertIn("Signed in as alice@example.com", text)
        form = form_of(decision.body)
        self.assertEqual((form.method, form.action), ("post", SIGN_OUT))
        self.assertIn("csrf", form.inputs)
        self.assertNoSecrets(decision, alice)

    def test_same_on_the_authenticate_host(self) -> None:
        alice = self.session()
        self.assertEqual(json.loads(self.who(alice, JSON, host=AUTH).body)["email"],
                         "alice@example.com")

    def test_not_signed_in(self) -> None:
        """Browsers are sent to sign in (and back here); scripts get 401."""
        self.assertSignIn(self.who(None), f"https://{APP}/.gateway/")
        decision = self.who(None, JSON)
        self.assertEqual(decision.status, 401)
        self.assertIsNone(header(decision, b"location"))
        doc = json.loads(decision.body)
        self.assertEqual(doc["request_id"], header(decision, b"x-request-id").decode())

    def test_markup_in_names_and_claims_is_escaped(self) -> None:
        evil = self.session(MARKUP)
        body = self.who(evil).body.decode()
        self.assertNotIn("<img", body)
        self.assertIn("&lt;img src=x onerror=alert(1)&gt;", body)
        self.assertEqual(json.loads(self.who(evil, JSON).body)["claims"]["department"],
                         [EVIL])


class DeniedPageTests(PagesCase):
    def test_403_says_who_and_which_kind_of_rule(self) -> None:
        bob = self.session({"sub": "bob-id", "email": "bob@example.com"})
        decision = self.authorize(headers=[BROWSER, self.cookie(bob)])
        self.assertEqual(decision.status, 403)
        text = decision.body.decode()
        self.assertIn("Signed in as <strong>bob@example.com</strong>", text)
        self.assertIn("One person named by the administrator.", text)
        self.assertNotIn("alice", text)  # the allowed user is never named
        rid = header(decision, b"x-request-id").decode()
        self.assertIn(rid, text)
        self.assertNoSecrets(decision, bob)

    def test_403_json(self) -> None:
        bob = self.session({"sub": "bob-id", "email": "bob@example.com"})
        decision = self.authorize(headers=[JSON, self.cookie(bob)])
        doc = json.loads(decision.body)
        self.assertEqual(doc["signed_in_as"], "bob@example.com")
        self.assertEqual(doc["error"], "You are signed in as bob@example.com, but this route "
                                       "does not allow you in.")
        self.assertNotIn("alice", decision.body.decode())

    def test_403_escapes_markup(self) -> None:
        evil = self.session(MARKUP)
        body = self.authorize(headers=[BROWSER, self.cookie(evil)]).body.decode()
        self.assertNotIn("<img", body)

    def test_sign_in_as_someone_else(self) -> None:
        """With a provider: a link to the authenticate host's sign-in (a link, not a
        form: form-action would refuse the provider's redirect) whose sealed target asks
        the provider for a fresh login and replaces the session afterwards."""
        provider = FakeProvider()
        self.identity.clients.clients["default"] = provider  # type: ignore[assignment]
        bob = self.session({"sub": "bob-id", "email": "bob@example.com"})
        decision = self.authorize("/x", "?y=1", headers=[BROWSER, self.cookie(bob)])
        links = re.findall(r'<a class=button href="([^"]+)">Sign in as someone else</a>',
                           decision.body.decode())
        self.assertEqual(len(links), 1)
        link = html.unescape(links[0])
        self.assertTrue(link.startswith(f"https://{AUTH}{SIGN_IN}?gateway_redirect="), link)
        sealed = parse_qs(urlsplit(link).query)["gateway_redirect"][0]
        payload = self.identity.shared.open("sign-in", sealed, self.clock.now)
        self.assertEqual(payload["uri"], f"https://{APP}/x?y=1")
        self.assertTrue(payload["switch"])
        # the start on the authenticate host goes to the provider even with a session
        start = self.endpoints.internal(request(
            SIGN_IN, "?" + urlsplit(link).query, host=AUTH,
            headers=[BROWSER, self.cookie(bob)]))
        self.assertIsInstance(start, Deferred)
        result = self.successResultOf(start)
        self.assertEqual(location(result), "https://idp.example.com/auth?prompt=login")
        state, fresh = provider.started[-1]
        self.assertTrue(fresh)
        self.assertEqual(self.identity.shared.open("state", state, self.clock.now)["replace"],
                         bob.id)


class SignOutPageTests(PagesCase):
    def test_confirmation_names_who_and_where(self) -> None:
        alice = self.session()
        decision = self.internal(SIGN_OUT, method=b"GET",
                                 headers=[BROWSER, self.cookie(alice)])
        text = decision.body.decode()
        self.assertIn("<strong>alice@example.com</strong>", text)
        self.assertIn(f"<code>{SIGNED_OUT}</code>", text)
        self.assertEqual(header(decision, b"x-frame-options"), b"DENY")
        self.assertNoSecrets(decision, alice)

    def test_confirmation_with_a_safe_destination_and_the_provider(self) -> None:
        self.identity.clients.clients["default"] = FakeProvider()  # type: ignore[assignment]
        alice = self.session()
        decision = self.internal(SIGN_OUT, "?gateway_redirect_uri=https://app.test/bye",
                                 method=b"GET", headers=[BROWSER, self.cookie(alice)])
        text = decision.body.decode()
        self.assertIn("<code>https://app.test/bye</code>", text)
        self.assertIn("signed out of the identity provider", text)
        self.assertEqual(form_of(decision.body).inputs["gateway_redirect_uri"],
                         "https://app.test/bye")

    def test_a_process_new_to_the_provider_reads_its_discovery_to_end_its_session(
            self) -> None:
        """A split proxy never talked to the provider (authenticate signed the person
        in): its sign-out reads the discovery document first, then sends the browser to
        the provider's end-session endpoint, not only to the signed-out page."""
        provider = Undiscovered()
        self.identity.clients.clients["default"] = provider  # type: ignore[assignment]
        alice = self.session()
        # the confirmation page: its form may be redirected to the provider
        page = self.endpoints.internal(
            request(SIGN_OUT, method=b"GET", headers=[BROWSER, self.cookie(alice)]))
        assert isinstance(page, Deferred)
        policy = header(self.successResultOf(page), b"content-security-policy") or b""
        self.assertIn(b"https://idp.example.com", policy)
        provider = Undiscovered()  # and the sign-out itself, in a process new to it
        self.identity.clients.clients["default"] = provider  # type: ignore[assignment]
        d = self.endpoints.internal(
            request(SIGN_OUT, method=b"POST", headers=[BROWSER, self.cookie(alice)]),
            urlencode({"csrf": self.identity.csrf_token(alice)}).encode())
        assert isinstance(d, Deferred)
        decision = self.successResultOf(d)
        self.assertEqual(provider.discovered, 1)
        self.assertEqual(header(decision, b"location"),
                         f"https://idp.example.com/logout?to={SIGNED_OUT}".encode())

    def test_an_unreachable_provider_is_not_waited_for_on_every_page(self) -> None:
        """Discovery failed: the page is answered without the provider's end-session,
        and the next pages within DISCOVERY_RETRY do not wait for the provider again."""
        from gateway.authenticate import endpoints

        provider = Unreachable()
        self.identity.clients.clients["default"] = provider  # type: ignore[assignment]
        alice = self.session()

        def confirmation() -> Any:
            return self.endpoints.internal(
                request(SIGN_OUT, method=b"GET", headers=[BROWSER, self.cookie(alice)]))
        first = confirmation()
        assert isinstance(first, Deferred)
        self.assertEqual(self.successResultOf(first).status, 200)
        again = confirmation()
        self.assertNotIsInstance(again, Deferred)
        self.assertEqual(again.status, 200)
        self.assertEqual(provider.discovered, 1)
        self.clock.now += endpoints.DISCOVERY_RETRY
        self.assertIsInstance(confirmation(), Deferred)
        self.assertEqual(provider.discovered, 2)

    def test_unsafe_destination_is_not_shown(self) -> None:
        alice = self.session()
        decision = self.internal(SIGN_OUT, "?gateway_redirect_uri=https://evil.example/",
                                 method=b"GET", headers=[BROWSER, self.cookie(alice)])
        self.assertNotIn("evil.example", decision.body.decode())
        self.assertIn(SIGNED_OUT, decision.body.decode())


class SessionGonePageTests(PagesCase):
    def test_401_offers_to_sign_in_again(self) -> None:
        """The hand-off of an ended session: a 401 page with a link back to the page,
        which starts a new sign-in."""
        alice = self.session()
        sealed = self.identity.shared.seal(
            "handoff", {"sid": alice.id, "uri": "https://app.test/deep?x=1"}, NOW + 60)
        self.store.delete(alice.id)
        decision = self.internal("/.gateway/callback", "?gateway_session=" + sealed)
        self.assertEqual(decision.status, 401)
        self.assertIn('<a class=button href="https://app.test/deep?x=1">Sign in again</a>',
                      decision.body.decode())
