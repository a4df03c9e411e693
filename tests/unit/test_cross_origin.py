"""The gateway's forms accept a browser's submission only from the gateway's own page
(issue 39): ``Sec-Fetch-Site`` must be ``same-origin`` and ``Origin``, when sent, one of
the gateway's origins for the host; with neither header the CSRF token alone decides.

Regression: the SSH sign-in's Allow, posted with the person's valid token from another
origin, bound the key; sign-out likewise ended the session."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.same_origin import REFUSED, SameOrigin
from gateway.authenticate.targets import SIGN_OUT
from gateway.authorize.hook import Reply, RequestInfo
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.session_records import RecordSessionStore
from gateway.databroker.ssh_records import read_sign_in, start_sign_in
from gateway.sessions.model import Session
from gateway.wire.cross_origin import cross_origin, origin_of, parse_origin

from .test_identity import APP, AUTH, BROWSER, NOW, IdentityCase, snapshot

OWN = frozenset({"https://auth.test"})
SAME = [(b"Sec-Fetch-Site", b"same-origin"), (b"Origin", b"https://auth.test")]


def hdrs(site: str | None = None, origin: str | None = None) -> list[tuple[bytes, bytes]]:
    out = [BROWSER]
    if site is not None:
        out.append((b"Sec-Fetch-Site", site.encode()))
    if origin is not None:
        out.append((b"Origin", origin.encode()))
    return out


class CheckTests(SynchronousTestCase):
    # (Sec-Fetch-Site, Origin, refused as a form, refused as a state-changing link)
    TABLE: tuple[tuple[str | None, str | None, bool, bool], ...] = (
        (None, None, False, False),  # curl, scripts, old browsers: the token decides
        ("same-origin", None, False, False),
        ("same-origin", "https://auth.test", False, False),
        ("same-origin", "https://auth.test:443", False, False),  # the default port
        ("same-origin", "HTTPS://Auth.Test", False, False),
        (None, "https://auth.test", False, False),  # Origin only (a browser of 2019)
        # Sec-Fetch-Site decides alone: Chromium posts a no-referrer page's own form
        # with Origin: null (a browser cannot send same-origin with a foreign Origin)
        ("same-origin", "null", False, False),
        ("same-origin", "https://evil.example", False, False),
        ("cross-site", "https://auth.test", True, True),
        ("same-site", "https://app.test", True, True),  # another host of the site
        ("same-site", None, True, True),
        ("cross-site", "https://evil.example", True, True),
        ("cross-site", None, True, True),
        ("none", None, True, False),  # typed or bookmarked: a link, never a form
        ("none", "https://auth.test", True, False),
        ("something-new", None, True, True),
        ("", None, True, True),
        (None, "https://evil.example", True, True),
        (None, "http://auth.test", True, True),  # another scheme is another origin
        (None, "https://auth.test:8443", True, True),  # another port likewise
        (None, "https://auth.test.evil.example", True, True),
        (None, "null", True, True),  # sandboxed frame, data: page, redirected post
        (None, "NULL", True, True),
        (None, "", True, True),
        (None, "https://auth.test/path", True, True),
        (None, "https://user@auth.test", True, True),
        (None, "auth.test", True, True),
    )

    def test_table(self) -> None:
        for site, origin, as_form, as_link in self.TABLE:
            headers = hdrs(site, origin)
            for navigation, expected in ((False, as_form), (True, as_link)):
                refused = cross_origin(headers, OWN, navigation=navigation)
                self.assertEqual(refused is not None, expected,
                                 (site, origin, navigation, refused))
                if refused is not None:
                    self.assertEqual((refused.sec_fetch_site, refused.origin),
                                     (site or "", origin or ""))

    def test_repeated_headers_must_all_pass(self) -> None:
        for first, extra in ((hdrs("same-origin"), (b"sec-fetch-site", b"cross-site")),
                             (hdrs(None, "https://auth.test"),
                              (b"ORIGIN", b"https://evil.test"))):
            self.assertIsNone(cross_origin(first, OWN))
            self.assertIsNotNone(cross_origin([*first, extra], OWN), extra)

    def test_why_names_the_header(self) -> None:
        site = cross_origin(hdrs("cross-site", "https://evil.example"), OWN)
        origin = cross_origin(hdrs(None, "https://evil.example"), OWN)
        null = cross_origin(hdrs(None, "null"), OWN)
        assert site is not None and origin is not None and null is not None
        self.assertEqual(site.why, "Sec-Fetch-Site is 'cross-site'")
        self.assertEqual(origin.why, "Origin 'https://evil.example' is not this page's")
        self.assertIn("null", null.why)

    def test_long_values_are_cut_in_the_report(self) -> None:
        refused = cross_origin(hdrs(None, "https://" + "x" * 5000), OWN)
        assert refused is not None
        self.assertLessEqual(len(refused.origin), 200)
        self.assertLess(len(refused.why), 300)

    def test_origin_of(self) -> None:
        for scheme, authority, expected in (
                ("https", "App.Test", "https://app.test"),
                ("https", "app.test:443", "https://app.test"),
                ("http", "app.test:80", "http://app.test"),
                ("http", "app.test:443", "http://app.test:443"),
                ("https", "app.test.:8443", "https://app.test:8443"),
                ("https", "[::1]:443", "https://[::1]"),
                ("https", "[::1]:8443", "https://[::1]:8443"),
                ("https", "a@b", ""), ("https", "a/b", ""), ("https", "", ""),
                ("https", "a:", ""), ("https", "a:x", ""), ("https", ":443", ""),
                ("ftp", "a", ""), ("tcp+https", "db:5432", "")):
            self.assertEqual(origin_of(scheme, authority), expected, (scheme, authority))
        self.assertEqual(parse_origin("https://APP.test:443"), "https://app.test")
        self.assertEqual(parse_origin("null"), "")


class OwnOriginsTests(SynchronousTestCase):
    def setUp(self) -> None:
        policy = [{"from": f"https://{APP}", "to": "http://127.0.0.1:9",
                   "allow_any_authenticated_user": True},
                  {"from": f"https://{APP}:8443", "to": "http://127.0.0.1:9",
                   "allow_any_authenticated_user": True},
                  {"from": "http://plain.test:8080", "to": "http://127.0.0.1:9",
                   "allow_any_authenticated_user": True}]
        snap = snapshot(policy=policy)
        records = MemoryRecordStore(lambda: NOW)
        store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
        identity = Identity(None, snap, store, None, lambda: NOW)  # type: ignore[arg-type]
        self.own = SameOrigin(identity, snap.routes)

    def origins(self, scheme: str, host: str) -> set[str]:
        return set(self.own.origins(RequestInfo(b"POST", scheme, host, "/", b"", [], "")))

    def test_the_origin_the_client_used(self) -> None:
        self.assertEqual(self.origins("https", AUTH), {"https://auth.test"})
        self.assertEqual(self.origins("https", f"{APP}:8443"), {"https://app.test:8443"})
        self.assertEqual(self.origins("http", "plain.test:8080"), {"http://plain.test:8080"})
        self.assertEqual(self.origins("https", "other.test"), {"https://other.test"})

    def test_public_urls_behind_a_tls_terminating_proxy(self) -> None:
        """A plain listener behind a proxy that ends TLS: the page had the public URL's
        origin (authenticate_service_url, a route's from)."""
        self.assertEqual(self.origins("http", AUTH), {"http://auth.test", "https://auth.test"})
        self.assertEqual(self.origins("http", f"{AUTH}:443"),
                         {"http://auth.test:443", "https://auth.test"})
        self.assertEqual(self.origins("http", APP), {"http://app.test", "https://app.test"})

    def test_another_port_of_the_same_name_is_not_this_host(self) -> None:
        self.assertNotIn("https://app.test:8443", self.origins("https", APP))
        self.assertNotIn("https://app.test", self.origins("https", f"{APP}:8443"))
        self.assertNotIn("https://app.test", self.origins("https", AUTH))


class Logged:
    def __init__(self, case: SynchronousTestCase) -> None:
        self.events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.events.append)
        case.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def refusals(self) -> list[str]:
        return [str(formatEvent(e)) for e in self.events
                if e.get("log_namespace") == "gateway.authenticate.same_origin"]


class SignOutTests(IdentityCase):
    def sign_out(self, session: Session, method: bytes, headers: list[tuple[bytes, bytes]],
                 host: str = APP) -> Any:
        token = urlencode({"csrf": self.identity.csrf_token(session)})
        query, body = ("?" + token, b"") if method == b"GET" else ("", token.encode())
        return self.internal(SIGN_OUT, query, host=host, method=method,
                             headers=[*headers, self.cookie(session)], body=body)

    def test_a_form_from_another_origin_keeps_the_session(self) -> None:
        logged = Logged(self)
        alice = self.session()
        for site, origin in (("cross-site", "https://evil.example"),
                             ("same-site", "https://auth.test"),
                             (None, "https://evil.example"), (None, "null"),
                             ("none", None), ("cross-site", None)):
            decision = self.sign_out(alice, b"POST", hdrs(site, origin))
            self.assertIsInstance(decision, Reply)
            self.assertEqual(decision.status, 403, (site, origin))
            self.assertIn(REFUSED.split(",")[0].encode(), decision.body)
            self.assertIsNotNone(self.store.get(alice.id))
        lines = logged.refusals()
        self.assertEqual(len(lines), 6)
        self.assertIn(f"{SIGN_OUT}: a request from another origin refused", lines[0])
        self.assertIn("Sec-Fetch-Site: cross-site, Origin: https://evil.example", lines[0])
        self.assertIn("Origin: (none)", lines[-1])

    def test_a_form_from_the_page_signs_out(self) -> None:
        for headers in (hdrs("same-origin", f"https://{APP}"), hdrs("same-origin"),
                        hdrs(None, f"https://{APP}"), hdrs()):
            alice = self.session()
            decision = self.sign_out(alice, b"POST", headers)
            self.assertEqual(decision.status, 302, headers)
            self.assertIsNone(self.store.get(alice.id))

    def test_the_link_with_its_token(self) -> None:
        """Sign-out by GET with the token (the reference's): opened by hand (``none``)
        it signs out; followed from another site it does not."""
        alice = self.session()
        for site in ("cross-site", "same-site"):
            decision = self.sign_out(alice, b"GET", hdrs(site))
            self.assertEqual(decision.status, 403, site)
            self.assertIsNotNone(self.store.get(alice.id))
        self.assertEqual(self.sign_out(alice, b"GET", hdrs("none")).status, 302)
        self.assertIsNone(self.store.get(alice.id))

    def test_the_confirmation_page_may_be_linked_from_anywhere(self) -> None:
        """A GET without the token changes nothing: its page is shown to a cross-site
        navigation too (a route's application links to it)."""
        alice = self.session()
        decision = self.internal(SIGN_OUT, host=APP, method=b"GET",
                                 headers=[*hdrs("cross-site"), self.cookie(alice)])
        self.assertEqual(decision.status, 200)
        self.assertIn(b"Sign out?", decision.body)

    def test_every_own_endpoint_refuses_a_foreign_post(self) -> None:
        """Any form added under /.gateway/ (the consent page to come) is covered."""
        for path in ("/.gateway/", "/.gateway/routes", "/.gateway/consent",
                     "/.gateway/api/v1/login", "/.gateway/callback"):
            decision = self.internal(path, host=APP, method=b"POST", headers=hdrs(
                "cross-site", "https://evil.example"))
            self.assertEqual(decision.status, 403, path)
        # ...but not the provider's callback (cross-site by nature; its state and cookie
        # are its protection), which is not the gateway's form
        callback = self.snapshot.options.authenticate_callback_path
        answer = self.endpoints.internal(RequestInfo(
            b"POST", "https", AUTH, callback, b"", hdrs("cross-site", "https://idp.example"),
            "192.0.2.1"), b"")
        decision = self.successResultOf(answer) if isinstance(answer, Deferred) else answer
        assert decision is not None
        self.assertEqual((decision.status, decision.reason), (400, "bad-state"))


class SshAllowTests(IdentityCase):
    def setUp(self) -> None:
        super().setUp()
        self.records = MemoryRecordStore(self.clock)
        self.store = RecordSessionStore(self.records, ChangeFollower(None, self.records),
                                        complete=True)
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.endpoints = Endpoints(self.identity, records=self.records)
        self.alice = self.session()

    def allow(self, headers: list[tuple[bytes, bytes]]) -> tuple[Reply, str | None]:
        pending = self.successResultOf(ensureDeferred(start_sign_in(
            self.records, "SHA256:abc", "127.0.0.1:5000", "db", "root", self.clock())))
        body = urlencode({"csrf": self.identity.csrf_token(self.alice)}).encode()
        decision = self.endpoints.internal(RequestInfo(
            b"POST", "https", AUTH, f"/.gateway/ssh/{pending.ticket}", b"",
            [*headers, self.cookie(self.alice)], "192.0.2.1"), body)
        if isinstance(decision, Deferred):
            decision = self.successResultOf(decision)
        assert isinstance(decision, Reply)
        bound = self.successResultOf(ensureDeferred(read_sign_in(
            self.records, pending.ticket, self.clock())))
        assert bound is not None
        self.ticket = pending.ticket
        return decision, bound.session_id or None

    def test_a_valid_token_from_another_origin_binds_nothing(self) -> None:
        logged = Logged(self)
        for site, origin in (("cross-site", "https://evil.example"),
                             ("same-site", f"https://{APP}"),  # a route's page
                             (None, f"https://{APP}"), (None, "null"), ("none", None)):
            decision, bound = self.allow(hdrs(site, origin))
            self.assertEqual(decision.status, 403, (site, origin))
            self.assertIsNone(bound, (site, origin))
        lines = logged.refusals()
        self.assertEqual(len(lines), 5)
        self.assertIn("/.gateway/ssh/TICKET: a request from another origin refused", lines[0])
        self.assertNotIn(self.ticket, "".join(lines))  # the ticket is not logged

    def test_the_page_itself_binds(self) -> None:
        for headers in (SAME, hdrs("same-origin"), hdrs(None, "https://auth.test"), hdrs()):
            decision, bound = self.allow(headers)
            self.assertEqual(decision.status, 200, headers)
            self.assertIn(b"SSH connection allowed", decision.body)
            self.assertEqual(bound, self.alice.id)

