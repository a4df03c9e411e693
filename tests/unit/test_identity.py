"""The identity layer without a network: redirect-target checks (case 42), the sign-in
redirect and its sealed target, cookies and sessions, the hand-off between hosts, the
sign-in start with an existing session, sign-out with CSRF (case 63), JWKS and the
gateway's own paths (reference section 2, cases 59-65)."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.targets import (
    CSRF_COOKIE,
    HANDOFF,
    HANDOFF_TTL,
    JWKS,
    SIGN_IN,
    SIGN_OUT,
    STATE_TTL,
    allowed_programmatic_target,
    safe_target,
)
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.config.snapshot import Snapshot
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION
from gateway.databroker.session_records import RecordSessionStore
from gateway.databroker.ssh_records import read_sign_in, start_sign_in
from gateway.sessions.cookie import MAX_CHUNKS
from gateway.sessions.model import Session

from .config.helpers import IDENTITY, base_config, load

NOW = 1_700_000_000.0
APP = "app.test"
AUTH = "auth.test"
SIGNED_OUT = "https://www.example.org/bye"
ALICE = {"sub": "alice-id", "email": "alice@example.com", "name": "Alice",
         "groups": ["staff"]}
BOB = {"sub": "bob-id", "email": "bob@example.com"}
BROWSER = (b"Accept", b"text/html,application/xhtml+xml,*/*;q=0.8")
JSON = (b"Accept", b"application/json")

Headers = list[tuple[bytes, bytes]]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def snapshot(**extra: Any) -> Snapshot:
    policy = [{"from": f"https://{APP}", "to": "http://127.0.0.1:9",
               "allowed_users": ["alice@example.com"], "pass_identity_headers": True}]
    config = {**IDENTITY, "authenticate_service_url": f"https://{AUTH}", "policy": policy,
              "signout_redirect_url": SIGNED_OUT, "jwt_claims_headers": {"x-email": "email"}}
    config.update(extra)
    return load(base_config(**config))


def request(path: str = "/", query: str | bytes = b"", *, host: str = APP,
            method: bytes = b"GET", headers: Headers | None = None) -> RequestInfo:
    raw = query.encode("latin-1") if isinstance(query, str) else query
    return RequestInfo(method, "https", host, path, raw, list(headers or [BROWSER]),
                       "192.0.2.1")


def header(decision: Reply | Allow, name: bytes) -> bytes | None:
    for key, value in decision.headers:
        if key.lower() == name:
            return value
    return None


def headers_named(decision: Reply, name: bytes) -> list[bytes]:
    return [v for k, v in decision.headers if k.lower() == name]


def location(decision: Any) -> str:
    assert isinstance(decision, Reply), decision
    value = header(decision, b"location")
    assert value is not None, decision
    return value.decode("latin-1")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def cookie_header(set_cookies: list[bytes]) -> tuple[bytes, bytes]:
    """The Cookie header a browser sends back after these Set-Cookie values."""
    return (b"Cookie", b"; ".join(v.split(b";")[0] for v in set_cookies))


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.method = ""
        self.inputs: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action, self.method = values.get("action", ""), values.get("method", "")
        elif tag == "input" and "name" in values:
            self.inputs[values["name"]] = values.get("value", "")


def form_of(body: bytes) -> _Form:
    parser = _Form()
    parser.feed(body.decode())
    return parser


class SafeTargetTests(SynchronousTestCase):
    allowed = {APP, f"{APP}:8443", AUTH}

    def test_allowed(self) -> None:
        """http(s) URLs on a served host (with or without a served port) are allowed."""
        for uri in ("https://app.test/", "http://app.test/x?y=1#z", "https://app.test",
                    "https://APP.test/Path", "https://app.test:8443/x",
                    "https://auth.test/.gateway/sign_in"):
            self.assertTrue(safe_target(uri, self.allowed), uri)
        self.assertTrue(safe_target("https://app.test:8443/x", {APP}))
        self.assertTrue(safe_target("https://app.test:8443/x", {f"{APP}:8443"}))

    def test_refused(self) -> None:
        """Open-redirect payloads and non-web schemes are refused (case 42)."""
        for uri in ("", "/", "/relative", "//evil.example/", "///evil.example/",
                    "/\\evil", "\\\\evil.example", "https://app.test.evil/",
                    "https://evil.example/app.test", "https://app.test@evil.example/",
                    "https://app.test:x@evil.example/", "https://user@app.test/",
                    "https://evil.example\\@app.test/", "https://evil.example\\.app.test/",
                    "javascript:alert(1)", "JavaScript://app.test/%0aalert(1)",
                    "data:text/html,<script>alert(1)</script>",
                    "http://app.test%00.evil/", "https://app.test\x00.evil/",
                    "https://app.test/ x", "https://app.test/\tx", "https://app.test/\nx",
                    "https://app.test/\rx", " https://app.test/", "https://app.test/\x7f",
                    "\thttps://evil.example/", "ftp://app.test/", "ws://app.test/",
                    "https:///evil.example/", "https:/evil.example", "https:evil.example",
                    "http:evil.example", "https://evil.example", "https://[::1]/",
                    "https://app.test:9999@evil.example"):
            self.assertFalse(safe_target(uri, self.allowed), repr(uri))

    def test_port_must_be_a_number(self) -> None:
        """Found by fuzzing: ``https://app.test:abc/`` and ``http://[::1][9/x`` (no URLs
        to a browser) were accepted; for the programmatic whitelist so was DEL."""
        self.assertFalse(safe_target("https://app.test:abc/", self.allowed))
        self.assertFalse(allowed_programmatic_target("http://localhost:x/", ("localhost",)))
        self.assertFalse(allowed_programmatic_target("http://localhost/\x7f", ("localhost",)))
        self.assertTrue(allowed_programmatic_target("http://localhost:8/", ("localhost",)))
        self.assertFalse(allowed_programmatic_target("http://[::1][9/x", ("localhost",)))
        self.assertFalse(safe_target("https://app.test]/", self.allowed))
        self.assertTrue(allowed_programmatic_target("http://[::1]:9/x", ("localhost",)))

    def test_empty_user_info(self) -> None:
        """Found by fuzzing: ``http://@cli.test/`` has user info, an empty one, which has
        no username or password; both checks let it through."""
        self.assertFalse(safe_target("https://@app.test/", self.allowed))
        self.assertFalse(safe_target("https://:@app.test/", self.allowed))
        self.assertFalse(allowed_programmatic_target("http://@cli.test/", ("cli.test",)))
        self.assertFalse(allowed_programmatic_target("http://@localhost:8/", ("localhost",)))

    def test_nothing_allowed(self) -> None:
        """With no served hosts nothing is a safe target."""
        self.assertFalse(safe_target("https://app.test/", set()))


class IdentityCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.snapshot = snapshot()
        records = MemoryRecordStore(self.clock)
        self.store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
        self.signer = AssertionSigner(None, "ES256", AUTH, clock=self.clock)
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.endpoints = Endpoints(self.identity)
        self.route = self.snapshot.routes[0]

    def session(self, claims: dict[str, Any] | None = None) -> Session:
        return self.identity.new_session(dict(claims or ALICE), "idtoken", "access", "",
                                         NOW + 3600)

    def cookie(self, session: Session) -> tuple[bytes, bytes]:
        return cookie_header([v for _, v in self.identity.session_cookie(session)])

    def authorize(self, path: str = "/", query: str | bytes = b"",
                  headers: Headers | None = None) -> Any:
        decision = self.identity.decider.authorize(request(path, query, headers=headers),
                                                   self.route)
        self.assertNotIsInstance(decision, Deferred)
        return decision

    def internal(self, path: str, query: str | bytes = b"", *, host: str = APP,
                 method: bytes = b"GET", headers: Headers | None = None,
                 body: bytes = b"") -> Any:
        decision = self.endpoints.internal(
            request(path, query, host=host, method=method, headers=headers), body)
        self.assertNotIsInstance(decision, Deferred)
        return decision

    def assertSignIn(self, decision: Any, target: str) -> None:
        where = location(decision)
        self.assertEqual(decision.status, 302)
        self.assertTrue(where.startswith(f"https://{AUTH}{SIGN_IN}?gateway_redirect="), where)
        sealed = query_of(where)["gateway_redirect"]
        payload = self.identity.shared.open("sign-in", sealed, self.clock.now)
        self.assertIsNotNone(payload)
        assert payload is not None
        self.assertEqual(payload["uri"], target)


class AuthorizeTests(IdentityCase):
    def test_browser_without_session_signs_in(self) -> None:
        """A browser without a session gets 302 to sign_in with the sealed original URL."""
        decision = self.authorize("/some/path", "?q=1&r=%2Fx")
        self.assertSignIn(decision, "https://app.test/some/path?q=1&r=%2Fx")
        self.assertEqual(header(decision, b"cache-control"), b"no-store")

    def test_sign_in_target_expires(self) -> None:
        """The sealed sign-in target is bound to its purpose and expires after STATE_TTL."""
        sealed = query_of(location(self.authorize("/p")))["gateway_redirect"]
        shared = self.identity.shared
        self.assertIsNone(shared.open("handoff", sealed, NOW))
        self.assertIsNone(self.identity.cookies.open("sign-in", sealed, NOW))
        self.assertIsNotNone(shared.open("sign-in", sealed, NOW + STATE_TTL - 1))
        self.assertIsNone(shared.open("sign-in", sealed, NOW + STATE_TTL))

    def test_json_client_gets_401(self) -> None:
        """A JSON client without a session gets 401 JSON, not a redirect."""
        decision = self.authorize(headers=[JSON])
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 401)
        self.assertIsNone(header(decision, b"location"))
        self.assertEqual(header(decision, b"content-type"), b"application/json")
        self.assertEqual(json.loads(decision.body)["status"], 401)

    def test_xhr_gets_401(self) -> None:
        """An XMLHttpRequest is not redirected even if it accepts HTML (case 65)."""
        decision = self.authorize(headers=[BROWSER,
                                           (b"X-Requested-With", b"XMLHttpRequest")])
        self.assertEqual(decision.status, 401)
        self.assertIsNone(header(decision, b"location"))

    def test_valid_cookie_allows_with_assertion(self) -> None:
        """Alice's cookie is allowed; the assertion names her for this route host."""
        alice = self.session()
        decision = self.authorize(headers=[BROWSER, self.cookie(alice)])
        self.assertIsInstance(decision, Allow)
        self.assertEqual(decision.strip_cookie, self.snapshot.options.cookie_name)
        self.assertEqual(decision.remove, frozenset())
        token = header(decision, b"x-gateway-jwt-assertion")
        self.assertIsNotNone(token)
        assert token is not None
        key = jwt.PyJWK(self.signer.public_jwk()).key
        claims = jwt.decode(token, key, algorithms=["ES256"], audience=APP,
                            options={"verify_exp": False})
        self.assertEqual((claims["iss"], claims["sub"], claims["email"]),
                         (AUTH, "alice-id", "alice@example.com"))
        self.assertEqual(header(decision, b"x-email"), b"alice@example.com")

    def test_cookie_attributes(self) -> None:
        """The session cookie is host-only, Secure, HttpOnly, Lax and lasts cookie_expire."""
        alice = self.session()
        [(name, value)] = self.identity.session_cookie(alice)
        self.assertEqual(name, b"set-cookie")
        parts = value.decode().split("; ")
        self.assertTrue(parts[0].startswith("_gateway="))
        self.assertEqual(parts[1:], ["Path=/", f"Max-Age={int(alice.expires_at - NOW)}",
                                     "Secure", "HttpOnly", "SameSite=Lax"])
        self.assertEqual(alice.expires_at, NOW + self.snapshot.options.cookie_expire)

    def test_programmatic_header_allows(self) -> None:
        """``Authorization: Gateway <sealed>`` is a session too, and is not sent upstream."""
        alice = self.session()
        token = self.identity.shared.seal("programmatic", {"sid": alice.id}, NOW + 60)
        decision = self.authorize(headers=[JSON, (b"Authorization", b"Gateway " +
                                                  token.encode())])
        self.assertIsInstance(decision, Allow)
        self.assertEqual(decision.remove, frozenset({b"authorization"}))
        cookie_token = self.identity.cookies.seal("session", {"sid": alice.id}, NOW + 60)
        refused = self.authorize(headers=[JSON, (b"Authorization", b"Gateway " +
                                                 cookie_token.encode())])
        self.assertEqual(refused.status, 401)

    def test_other_user_forbidden(self) -> None:
        """A signed-in user not on the route's list gets a 403 page saying so."""
        bob = self.session(BOB)
        decision = self.authorize(headers=[BROWSER, self.cookie(bob)])
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        self.assertIn(b"text/html", header(decision, b"content-type") or b"")
        self.assertIn(b"Signed in as <strong>bob@example.com</strong>", decision.body)
        self.assertIn(b"this route does not allow you in.", decision.body)
        self.assertIsNone(header(decision, b"location"))

    def test_expired_session_signs_in_again(self) -> None:
        """After cookie_expire the same cookie leads to sign-in again."""
        alice = self.session()
        cookie = self.cookie(alice)
        self.clock.now = alice.expires_at - 1
        self.assertIsInstance(self.authorize(headers=[BROWSER, cookie]), Allow)
        self.clock.now = NOW + self.snapshot.options.cookie_expire + 1
        self.assertSignIn(self.authorize("/later", headers=[BROWSER, cookie]),
                          "https://app.test/later")

    def test_expired_record_with_live_cookie(self) -> None:
        """A session record past its expiry is refused even when the cookie still opens."""
        alice = self.session()
        self.store.put(replace(alice, expires_at=NOW - 1))
        decision = self.authorize(headers=[BROWSER, self.cookie(alice)])
        self.assertEqual(decision.status, 302)

    def test_deleted_session_signs_in(self) -> None:
        """A cookie whose session record is gone leads to sign-in."""
        alice = self.session()
        cookie = self.cookie(alice)
        self.store.delete(alice.id)
        self.assertSignIn(self.authorize(headers=[BROWSER, cookie]), "https://app.test/")

    def test_forged_cookies_sign_in(self) -> None:
        """Cookies sealed with the wrong key or purpose, or tampered with, are ignored."""
        alice = self.session()
        name = self.snapshot.options.cookie_name
        good = self.cookie(alice)[1].split(b"=", 1)[1].decode()
        tampered = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
        for value in (self.identity.shared.seal("session", {"sid": alice.id}, NOW + 60),
                      self.identity.cookies.seal("handoff", {"sid": alice.id}, NOW + 60),
                      self.identity.cookies.seal("session", {"id": alice.id}, NOW + 60),
                      tampered, "", alice.id):
            decision = self.authorize(headers=[BROWSER, (b"Cookie", f"{name}={value}".encode())])
            self.assertEqual(decision.status, 302, value)


class HandoffTests(IdentityCase):
    def handoff(self, sealed: str, host: str = APP) -> Any:
        return self.internal(HANDOFF, "?" + urlencode({"gateway_session": sealed}), host=host)

    def test_valid_handoff(self) -> None:
        """A hand-off for this host redirects to the target and sets a working cookie."""
        alice = self.session()
        target = "https://app.test/x/y?z=1"
        sealed = self.identity.shared.seal("handoff", {"sid": alice.id, "uri": target},
                                           NOW + HANDOFF_TTL)
        decision = self.handoff(sealed)
        self.assertEqual(decision.status, 302)
        self.assertEqual(location(decision), target)
        cookies = headers_named(decision, b"set-cookie")
        self.assertEqual(len(cookies), 1)
        self.assertIsInstance(self.authorize(headers=[BROWSER, cookie_header(cookies)]), Allow)

    def test_single_use(self) -> None:
        """A hand-off works once; a copy (another base64 spelling included), even inside
        its lifetime and after a reload, is refused without a cookie."""
        alice = self.session()
        sealed = self.identity.shared.seal(
            "handoff", {"sid": alice.id, "uri": "https://app.test/"}, NOW + HANDOFF_TTL)
        self.assertEqual(self.handoff(sealed).status, 302)
        reloaded = Identity(None, self.snapshot, self.store, self.signer, self.clock,
                            spent=self.identity.spent)
        reloaded.clients.clients.pop("default", None)
        self.endpoints = Endpoints(reloaded)
        respelled = sealed[:-1] + chr(ord(sealed[-1]) | 1) if len(sealed) % 4 == 2 else sealed
        for copy in (sealed, respelled):
            decision = self.handoff(copy)
            self.assertEqual(decision.status, 400)
            self.assertIn(b"already used", decision.body)
            self.assertEqual(headers_named(decision, b"set-cookie"), [])

    def test_other_host(self) -> None:
        """A hand-off sealed for another host is refused with 400."""
        alice = self.session()
        sealed = self.identity.shared.seal(
            "handoff", {"sid": alice.id, "uri": "https://app.test/"}, NOW + 60)
        for host in ("other.test", AUTH, "app.test:8443", "evil.app.test"):
            decision = self.handoff(sealed, host=host)
            self.assertEqual(decision.status, 400, host)
            self.assertEqual(headers_named(decision, b"set-cookie"), [], host)

    def test_expired(self) -> None:
        """A hand-off older than HANDOFF_TTL is refused with 400."""
        alice = self.session()
        sealed = self.identity.shared.seal(
            "handoff", {"sid": alice.id, "uri": "https://app.test/"}, NOW + HANDOFF_TTL)
        self.clock.now = NOW + HANDOFF_TTL + 1
        decision = self.handoff(sealed)
        self.assertEqual(decision.status, 400)
        self.assertEqual(headers_named(decision, b"set-cookie"), [])

    def test_wrong_purpose_or_garbage(self) -> None:
        """Sign-in links, cookie-sealed values and garbage are not hand-offs."""
        alice = self.session()
        payload = {"sid": alice.id, "uri": "https://app.test/"}
        for sealed in (self.identity.shared.seal("sign-in", payload, NOW + 60),
                       self.identity.cookies.seal("handoff", payload, NOW + 60),
                       "garbage", ""):
            self.assertEqual(self.handoff(sealed).status, 400, sealed)
        self.assertEqual(self.internal(HANDOFF).status, 400)

    def test_session_gone(self) -> None:
        """A hand-off for a deleted session is answered 401 without a cookie."""
        alice = self.session()
        sealed = self.identity.shared.seal(
            "handoff", {"sid": alice.id, "uri": "https://app.test/"}, NOW + 60)
        self.store.delete(alice.id)
        decision = self.handoff(sealed)
        self.assertEqual(decision.status, 401)
        self.assertEqual(headers_named(decision, b"set-cookie"), [])


class SignInStartTests(IdentityCase):
    def test_existing_session_goes_straight_to_handoff(self) -> None:
        """With a session on the auth host, sign_in hands off without a provider."""
        alice = self.session()
        link = location(self.authorize("/deep/page", "?a=1"))
        parts = urlsplit(link)
        start = self.internal(parts.path, "?" + parts.query, host=AUTH,
                              headers=[BROWSER, self.cookie(alice)])
        where = location(start)
        self.assertEqual(start.status, 302)
        self.assertTrue(where.startswith(f"https://{APP}{HANDOFF}?gateway_session="), where)
        back = urlsplit(where)
        final = self.internal(back.path, "?" + back.query)
        self.assertEqual(location(final), "https://app.test/deep/page?a=1")
        cookies = headers_named(final, b"set-cookie")
        self.assertIsInstance(self.authorize("/deep/page", "?a=1",
                                             headers=[BROWSER, cookie_header(cookies)]), Allow)

    def test_no_session_and_no_provider(self) -> None:
        """Without a session and without a provider, sign_in answers 503."""
        link = urlsplit(location(self.authorize()))
        decision = self.internal(link.path, "?" + link.query, host=AUTH)
        self.assertEqual(decision.status, 503)

    def test_bad_links(self) -> None:
        """Missing, forged, expired or unsafe sign-in links are refused with 400."""
        alice = self.session()
        cookie = self.cookie(alice)
        shared = self.identity.shared
        links = [
            "",
            "?gateway_redirect=garbage",
            "?" + urlencode({"gateway_redirect": shared.seal(
                "handoff", {"uri": "https://app.test/"}, NOW + 60)}),
            "?" + urlencode({"gateway_redirect": shared.seal(
                "sign-in", {"uri": "https://evil.example/"}, NOW + 60)}),
            "?" + urlencode({"gateway_redirect": shared.seal(
                "sign-in", {"uri": "//evil.example/"}, NOW + 60)}),
            "?" + urlencode({"gateway_redirect": shared.seal(
                "sign-in", {"uri": "https://app.test/"}, NOW - 1)}),
        ]
        for query in links:
            decision = self.internal(SIGN_IN, query, host=AUTH, headers=[BROWSER, cookie])
            self.assertEqual(decision.status, 400, query)
            self.assertIsNone(header(decision, b"location"), query)


class SharedStoreSignInTests(IdentityCase):
    """Sessions in a shared store (kvstore, a remote databroker): this process's copy of
    a session may be stale when another process has just ended it."""

    def setUp(self) -> None:
        super().setUp()
        self.records = MemoryRecordStore(self.clock)
        follower = ChangeFollower(SimpleNamespace(seconds=self.clock), self.records)
        follower.last_ok = self.clock()  # it has just synced: copies are trusted
        self.store = RecordSessionStore(self.records, follower, complete=False)
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.endpoints = Endpoints(self.identity)

    def start(self, alice: Session) -> Any:
        link = urlsplit(location(self.authorize("/deep/page")))
        decision = self.endpoints.internal(
            request(link.path, "?" + link.query, host=AUTH,
                    headers=[BROWSER, self.cookie(alice)]), b"")
        assert isinstance(decision, Deferred)
        return self.successResultOf(decision)

    def test_confirmed_session_is_handed_off(self) -> None:
        alice = self.session()
        self.assertTrue(location(self.start(alice)).startswith(f"https://{APP}{HANDOFF}?"))

    def test_session_ended_elsewhere_is_not_handed_off(self) -> None:
        """Signed out through another process an instant ago (this one has not heard
        yet): the sign-in goes to the provider (here: none, 503), not to a hand-off of
        a session that is gone (which the route would answer with 401)."""
        alice = self.session()
        self.successResultOf(self.records.delete(SESSION, alice.id))
        self.assertIsNotNone(self.store.get(alice.id))  # the stale copy
        decision = self.start(alice)
        self.assertEqual(decision.status, 503)
        self.assertIsNone(header(decision, b"location"))


    def worker(self) -> Endpoints:
        """Another process sharing the store, with no copies of its own yet."""
        store = RecordSessionStore(self.records, ChangeFollower(
            SimpleNamespace(seconds=self.clock), self.records), complete=False)
        identity = Identity(None, self.snapshot, store, self.signer, self.clock)
        identity.clients.clients.pop("default", None)
        return Endpoints(identity, records=self.records)

    def made_elsewhere(self) -> Session:
        """A session signed in through another process sharing the store: in the store,
        not yet in this process's copies (its change stream has not delivered it)."""
        alice = self.worker().identity.new_session(dict(ALICE), "idtoken", "access", "",
                                                   NOW + 3600)
        self.assertIsNotNone(self.successResultOf(self.records.get(SESSION, alice.id)))
        self.assertIsNone(self.store.get(alice.id))
        return alice

    def answer(self, endpoints: Endpoints, path: str, alice: Session, method: bytes = b"GET",
               body: bytes = b"") -> Any:
        decision = endpoints.internal(request(path, "", host=AUTH, method=method,
                                              headers=[BROWSER, self.cookie(alice)]), body)
        return self.successResultOf(decision) if isinstance(decision, Deferred) else decision

    def test_sign_in_made_elsewhere_is_handed_off(self) -> None:
        """The sign-in start reads a session this process has not heard of yet instead of
        sending the browser to the provider for another one (here: none, 503)."""
        decision = self.start(self.made_elsewhere())
        self.assertTrue(location(decision).startswith(f"https://{APP}{HANDOFF}?"))

    def test_ssh_sign_in_confirmed_with_a_session_made_elsewhere(self) -> None:
        """Regression (test_ssh_workers, once in a full run): with ``workers: 2`` the
        confirmation POST of an SSH sign-in reached the worker that had not read the
        new session yet, which answered it with a sign-in redirect, so the key was
        never bound. Both the page and its POST read the session from the store."""
        endpoints = Endpoints(self.identity, records=self.records)
        pending = self.successResultOf(ensureDeferred(start_sign_in(
            self.records, "SHA256:abc", "127.0.0.1:5000", "db", "root", self.clock())))
        alice = self.made_elsewhere()
        path = f"/.gateway/ssh/{pending.ticket}"
        page = self.answer(endpoints, path, alice)
        self.assertEqual(page.status, 200)
        self.assertIn(b"Allow this SSH connection?", page.body)
        done = self.answer(self.worker(), path, alice, b"POST",  # yet another worker
                           urlencode({"csrf": self.identity.csrf_token(alice)}).encode())
        self.assertEqual(done.status, 200)
        self.assertIn(b"SSH connection allowed", done.body)
        bound = self.successResultOf(ensureDeferred(read_sign_in(
            self.records, pending.ticket, self.clock())))
        assert bound is not None
        self.assertEqual(bound.session_id, alice.id)

    def test_sign_out_of_a_session_made_elsewhere(self) -> None:
        """A sign-out right after a sign-in through another process ends that session
        (it was answered "CSRF token invalid" by a process without a copy)."""
        alice = self.made_elsewhere()
        done = self.answer(self.endpoints, SIGN_OUT, alice, b"POST",
                           urlencode({"csrf": self.identity.csrf_token(alice)}).encode())
        self.assertEqual(done.status, 302)
        self.assertIsNone(self.successResultOf(self.records.get(SESSION, alice.id)))

    def test_ended_session_made_elsewhere_signs_in_again(self) -> None:
        alice = self.made_elsewhere()
        self.successResultOf(self.records.delete(SESSION, alice.id))
        endpoints = Endpoints(self.identity, records=self.records)
        decision = self.answer(endpoints, "/.gateway/ssh/ticket", alice)
        self.assertEqual(decision.status, 302)
        self.assertIn(SIGN_IN, location(decision))

    def test_session_storage_down_is_503_not_a_sign_in(self) -> None:
        alice = self.made_elsewhere()

        def down(type: str, id: str) -> Deferred[None]:
            raise ConnectionError("redis down")
        self.records.get = down  # type: ignore[method-assign,assignment]
        endpoints = Endpoints(self.identity, records=self.records)
        for path, method in (("/.gateway/ssh/ticket", b"GET"), (SIGN_OUT, b"POST")):
            decision = self.answer(endpoints, path, alice, method)
            self.assertEqual(decision.status, 503, path)

    def test_sign_out_answers_once_the_store_has_it(self) -> None:
        """A sign-out answers only once the shared store holds the deletion: a browser
        that signs in again at once (through any process, as the split test's did)
        must not be handed the session the store still had."""
        alice = self.session()
        held: list[Deferred[None]] = []
        delete = self.records.delete

        def slow_delete(type: str, id: str) -> Deferred[None]:
            d: Deferred[None] = Deferred()
            held.append(d)
            d.addCallback(lambda _: delete(type, id))
            return d
        self.records.delete = slow_delete  # type: ignore[method-assign]
        decision = self.endpoints.internal(
            request(SIGN_OUT, "", method=b"POST", host=AUTH,
                    headers=[BROWSER, self.cookie(alice)]),
            urlencode({"csrf": self.identity.csrf_token(alice)}).encode())
        assert isinstance(decision, Deferred)
        self.assertNoResult(decision)  # the store has not taken it yet
        self.assertIsNotNone(self.successResultOf(self.records.get(SESSION, alice.id)))
        held[0].callback(None)
        self.assertEqual(self.successResultOf(decision).status, 302)
        self.assertIsNone(self.successResultOf(self.records.get(SESSION, alice.id)))


class SignOutTests(IdentityCase):
    def csrf(self, session: Session) -> str:
        return hmac.new(self.snapshot.material.cookie_secret, session.id.encode(),
                        hashlib.sha256).hexdigest()

    def sign_out(self, session: Session | None, fields: dict[str, str] | None = None, *,
                 method: bytes = b"POST", query: str = "", path: str = SIGN_OUT,
                 accept: tuple[bytes, bytes] = BROWSER, raw: bytes | None = None) -> Any:
        headers = [accept]
        if session is not None:
            headers.append(self.cookie(session))
        body = raw if raw is not None else urlencode(fields or {}).encode()
        return self.internal(path, query, method=method, headers=headers, body=body)

    def test_without_session(self) -> None:
        """Without a session every sign-out is 400 CSRF token invalid (case 63)."""
        for method in (b"GET", b"POST"):
            decision = self.sign_out(None, {"csrf": "x"}, method=method, accept=JSON)
            self.assertEqual(decision.status, 400)
            self.assertEqual(json.loads(decision.body)["error"], "CSRF token invalid.")
        self.assertEqual(self.sign_out(None, method=b"GET").status, 400)

    def test_get_shows_confirmation(self) -> None:
        """GET without a token asks for confirmation with a POST form holding the token."""
        alice = self.session()
        decision = self.sign_out(alice, method=b"GET")
        self.assertEqual(decision.status, 200)
        form = form_of(decision.body)
        self.assertEqual(form.method.lower(), "post")
        self.assertEqual(urlsplit(form.action).path, SIGN_OUT)
        self.assertEqual(form.inputs.get("csrf"), self.csrf(alice))
        self.assertIsNotNone(self.store.get(alice.id))
        self.assertEqual(headers_named(decision, b"set-cookie"), [])

    def test_post_with_token_signs_out(self) -> None:
        """POST with the right token deletes the session, clears cookies, redirects."""
        alice = self.session()
        cookie = self.cookie(alice)
        decision = self.sign_out(alice, {"csrf": self.csrf(alice)})
        self.assertEqual(decision.status, 302)
        self.assertEqual(location(decision), SIGNED_OUT)
        self.assertIsNone(self.store.get(alice.id))
        cleared = [c.decode() for c in headers_named(decision, b"set-cookie")]
        name = self.snapshot.options.cookie_name
        self.assertEqual([c.split("=", 1)[0] for c in cleared],
                         [name] + [f"{name}_{i}" for i in range(1, MAX_CHUNKS + 1)])
        for value in cleared:
            self.assertIn("Max-Age=0", value)
            self.assertIn("Path=/", value)
        self.assertEqual(self.authorize(headers=[BROWSER, cookie]).status, 302)

    def test_path_without_slash_and_token_in_query(self) -> None:
        """/.gateway/signout works too, and the token may come in the query."""
        alice = self.session()
        decision = self.sign_out(alice, method=b"GET", path=SIGN_OUT.rstrip("/"),
                                 query="?" + urlencode({"csrf": self.csrf(alice)}))
        self.assertEqual(decision.status, 302)
        self.assertIsNone(self.store.get(alice.id))

    def test_wrong_token(self) -> None:
        """A wrong or other session's token is 400 and the session survives."""
        alice, bob = self.session(), self.session(BOB)
        for token in ("", "0" * 64, self.csrf(bob), self.csrf(alice)[:-1]):
            decision = self.sign_out(alice, {"csrf": token}, accept=JSON)
            self.assertEqual(decision.status, 400, token)
            self.assertEqual(json.loads(decision.body)["error"], "CSRF token invalid.")
        self.assertIsNotNone(self.store.get(alice.id))

    def test_redirect_uri_honoured_when_safe(self) -> None:
        """gateway_redirect_uri is used when it is a served host, otherwise ignored."""
        alice = self.session()
        decision = self.sign_out(alice, {"csrf": self.csrf(alice),
                                         "gateway_redirect_uri": "https://app.test/bye?x=1"})
        self.assertEqual(location(decision), "https://app.test/bye?x=1")
        for unsafe in ("https://evil.example/", "//evil.example/", "/\\evil.example",
                       "https://app.test@evil.example/", "javascript:alert(1)"):
            session = self.session()
            decision = self.sign_out(session, {"csrf": self.csrf(session),
                                               "gateway_redirect_uri": unsafe})
            self.assertEqual(location(decision), SIGNED_OUT, unsafe)
            self.assertIsNone(self.store.get(session.id))

    def test_no_target_shows_page(self) -> None:
        """Without a safe target or signout_redirect_url the answer is a 200 page."""
        self.snapshot = snapshot(signout_redirect_url="")
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.endpoints = Endpoints(self.identity)
        alice = self.session()
        decision = self.sign_out(alice, {"csrf": self.csrf(alice),
                                         "gateway_redirect_uri": "https://evil.example/"})
        self.assertEqual(decision.status, 200)
        self.assertIsNone(header(decision, b"location"))
        self.assertIn(b"signed out", decision.body)
        self.assertEqual(len(headers_named(decision, b"set-cookie")), MAX_CHUNKS + 1)
        self.assertIsNone(self.store.get(alice.id))

    def test_non_ascii_token_is_refused(self) -> None:
        """A CSRF token with non-ASCII characters is 400 CSRF token invalid, not a crash."""
        alice = self.session()
        for raw in (b"csrf=%C3%A9", b"csrf=\xe9"):
            try:
                decision = self.sign_out(alice, raw=raw, accept=JSON)
            except TypeError as exc:
                self.fail(f"{raw!r}: {exc}")
            self.assertEqual(decision.status, 400)
        self.assertIsNotNone(self.store.get(alice.id))


    def test_confirmation_keeps_redirect_uri(self) -> None:
        """Submitting the confirmation form honours the gateway_redirect_uri of the GET."""
        alice = self.session()
        target = "https://app.test/after"
        page = self.sign_out(alice, method=b"GET",
                             query="?" + urlencode({"gateway_redirect_uri": target}))
        self.assertEqual(page.status, 200)
        form = form_of(page.body)
        action = urlsplit(form.action)
        decision = self.sign_out(alice, form.inputs, path=action.path,
                                 query="?" + action.query if action.query else "")
        self.assertEqual(decision.status, 302)
        self.assertEqual(location(decision), target)



class EndpointTests(IdentityCase):
    def test_jwks_on_auth_host_only(self) -> None:
        """JWKS answers JSON on the auth host; elsewhere the path goes to routing."""
        decision = self.internal(JWKS, host=AUTH, headers=[JSON])
        self.assertEqual(decision.status, 200)
        self.assertEqual(header(decision, b"content-type"), b"application/json")
        self.assertEqual(json.loads(decision.body), {"keys": []})
        self.assertIsNone(self.internal(JWKS, host=APP))
        self.assertFalse(self.endpoints.handles(APP, JWKS))

    def test_jwks_serves_configured_key(self) -> None:
        """With a signing key, JWKS lists exactly its public JWK."""
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        signer = AssertionSigner(pem, "ES256", AUTH)
        identity = Identity(None, self.snapshot, self.store, signer, self.clock)
        decision = Endpoints(identity).internal(request(JWKS, host=AUTH))
        self.assertEqual(json.loads(decision.body), {"keys": [signer.public_jwk()]})

    def test_unknown_gateway_paths(self) -> None:
        """/.gateway/anything is 404 on a route host; ordinary paths go to routing.
        (/.gateway/sign_in there is a sign-in link naming a provider: 400 without one.)"""
        for path in ("/.gateway/anything", "/.gateway/callback/x"):
            decision = self.internal(path)
            self.assertIsInstance(decision, Reply, path)
            self.assertEqual(decision.status, 404, path)
            self.assertTrue(self.endpoints.handles(APP, path), path)
        self.assertEqual(self.internal("/.gateway/sign_in").status, 400)
        self.assertEqual(self.internal("/.gateway/nothing", host=AUTH).status, 404)
        for path in ("/", "/x", "/x/.gateway/y", self.snapshot.options.authenticate_callback_path):
            self.assertIsNone(self.internal(path), path)
            self.assertFalse(self.endpoints.handles(APP, path), path)
        self.assertTrue(self.endpoints.handles(AUTH, "/"))

    def test_lookalike_paths_go_to_routing(self) -> None:
        """Paths that merely start with the characters /.gateway belong to the upstream."""
        for path in ("/.gatewayish", "/.gateway-assets/app.js", "/.gateway.json"):
            self.assertFalse(self.endpoints.handles(APP, path), path)
            self.assertIsNone(self.internal(path), path)

    def test_allowed_hosts(self) -> None:
        """Redirect targets are limited to the auth host and the route hosts."""
        self.assertEqual(self.identity.allowed_hosts, {AUTH, APP})

    def test_no_empty_host_without_auth_url(self) -> None:
        """Without authenticate_service_url an empty host is still no redirect target."""
        config = {k: v for k, v in IDENTITY.items() if k != "authenticate_service_url"}
        identity = Identity(None, load(base_config(**config)), self.store, self.signer,
                            self.clock)
        for uri in ("https:///evil.example/", "http:evil.example"):
            self.assertFalse(safe_target(uri, identity.allowed_hosts), repr(uri))


class ProgrammaticLoginTests(IdentityCase):
    def test_started_on_a_name_no_route_serves(self) -> None:
        """`gateway tcp --gateway-url https://gateway.example/`: the login started on a
        name that no route serves (or on the authenticate host) still ends at the
        client with a token, the sign-in running on the authenticate host."""
        alice = self.session()
        for host in ("gateway.example", AUTH):
            reply = self.internal("/.gateway/api/v1/login",
                                  "gateway_redirect_uri=http://127.0.0.1:9/", host=host)
            self.assertEqual(reply.status, 200, host)
            link = reply.body.decode()
            sealed = query_of(link)["gateway_redirect"]
            payload = self.identity.shared.open("sign-in", sealed, self.clock.now)
            assert payload is not None
            self.assertEqual(payload["uri"], f"https://{AUTH}/")
            decision = self.internal("/.gateway/sign_in", urlencode({"gateway_redirect": sealed}),
                                     host=AUTH, headers=[BROWSER, self.cookie(alice)])
            self.assertEqual(decision.status, 302, host)
            self.assertTrue(location(decision).startswith("http://127.0.0.1:9/?gateway_jwt="))


class ProviderGoneTests(IdentityCase):
    def test_provider_gone_during_code_exchange_is_503(self) -> None:
        """The provider goes away while the gateway exchanges the code (the soak stopped
        it mid-request): 503 "cannot be reached", not a 500 with a traceback."""
        from twisted.internet.defer import fail
        from twisted.web._newclient import ResponseNeverReceived

        from gateway.authenticate.oidc import _http

        class Gone:
            async def metadata(self) -> dict[str, Any]:
                return {}  # read when the sign-in started

            def response_issuer_problem(self, iss: str | None) -> str:
                return ""

            async def exchange(self, code: str, verifier: str, nonce: str) -> Any:
                return await _http(fail(ResponseNeverReceived([])), "POST /token")

        self.identity.clients.clients["default"] = Gone()  # type: ignore[assignment]
        csrf = "csrf-value"
        state = self.identity.shared.seal("state", {
            "uri": "https://app.test/", "nonce": "n", "verifier": "v", "programmatic": "",
            "csrf": hashlib.sha256(csrf.encode()).hexdigest()}, NOW + 60)
        query = urlencode({"code": "c", "state": state})
        result = self.endpoints.internal(request(
            self.snapshot.options.authenticate_callback_path, query, host=AUTH,
            headers=[BROWSER, (b"cookie", f"{CSRF_COOKIE}={csrf}".encode())]))
        decision = self.successResultOf(result) if isinstance(result, Deferred) else result
        self.assertEqual(decision.status, 503)
        self.assertIn(b"cannot be reached", decision.body)
        self.assertEqual(self.flushLoggedErrors(), [])


class TokenPurposeTests(IdentityCase):
    def test_cached_token_keeps_its_purpose(self) -> None:
        """A session cookie's value is no ``Authorization: Gateway`` token, nor the reverse,
        also once the opened token is cached (the cache was keyed by the token alone)."""
        alice = self.session()
        self.store.put(alice)
        cookie = self.cookie(alice)
        sealed = cookie[1].split(b"=", 1)[1]
        bearer = [(b"Authorization", b"Gateway " + sealed)]
        self.assertIsNone(self.identity.session_for(request(headers=bearer)))
        self.assertEqual(self.identity.session_for(request(headers=[cookie])), alice)
        self.assertIsNone(self.identity.session_for(request(headers=bearer)))
        own = self.identity.shared.seal("programmatic", {"sid": alice.id}, NOW + 60).encode()
        self.assertEqual(self.identity.session_for(
            request(headers=[(b"Authorization", b"Gateway " + own)])), alice)
        self.assertIsNone(self.identity.session_for(
            request(headers=[(b"Cookie", b"_gateway=" + own)])))


class Directory:
    """A directory that answers one group per user and counts its changes."""

    def __init__(self) -> None:
        self.version = 1
        self.provider = "default"
        self.groups = ("staff",)

    def groups_for(self, user_id: str, email: str) -> tuple[str, ...]:
        return self.groups


class AllowedAgainTests(IdentityCase):
    """A browser's next request to a route it was allowed on is answered from the
    decision remembered for its exact Cookie header, and only while nothing that decision
    rests on has changed."""

    def allowed(self, headers: Headers) -> Allow:
        decision = self.authorize(headers=headers)
        self.assertIsInstance(decision, Allow)
        assert isinstance(decision, Allow)
        return decision

    def test_next_request_is_not_decided_again(self) -> None:
        """The second request with the same cookie gets the same decision without the
        cookie being opened or the policy evaluated again."""
        cookie = self.cookie(self.session())
        first = self.allowed([BROWSER, cookie])

        def refuse(*args: Any) -> Any:
            raise AssertionError("decided again")
        self.patch(self.identity.decider, "_decide", refuse)
        self.patch(self.identity.cookies, "open", refuse)
        self.assertIs(self.allowed([BROWSER, cookie]), first)

    def test_authorization_header_takes_the_full_path(self) -> None:
        """With an ``Authorization: Gateway`` token beside the remembered cookie, the
        decision still removes the token from the upstream request."""
        alice = self.session()
        cookie = self.cookie(alice)
        self.assertEqual(self.allowed([BROWSER, cookie]).remove, frozenset())
        token = self.identity.shared.seal("programmatic", {"sid": alice.id}, NOW + 60)
        with_token = self.allowed([BROWSER, cookie,
                                   (b"Authorization", b"Gateway " + token.encode())])
        self.assertEqual(with_token.remove, frozenset({b"authorization"}))

    def test_ended_or_changed_session(self) -> None:
        """Sign-out (the record deleted) and a changed record (here: another user's
        email) take effect on the next request."""
        alice = self.session()
        cookie = self.cookie(alice)
        self.allowed([BROWSER, cookie])
        self.store.put(replace(alice, email="bob@example.com"))
        self.assertEqual(self.authorize(headers=[BROWSER, cookie]).status, 403)
        self.store.delete(alice.id)
        self.assertEqual(self.authorize(headers=[BROWSER, cookie]).status, 302)

    def test_decided_again_after_the_decision_lifetime(self) -> None:
        """After the decision cache's lifetime (30 s) the request is decided again (and
        the signer is asked for the assertion again)."""
        cookie = self.cookie(self.session())
        first = self.allowed([BROWSER, cookie])
        self.clock.now = NOW + 29
        self.assertIs(self.allowed([BROWSER, cookie]), first)
        self.clock.now = NOW + 31
        self.assertIsNot(self.allowed([BROWSER, cookie]), first)

    def test_tokens_due_for_refresh(self) -> None:
        """A remembered decision ends when the session's tokens are due for refresh."""
        alice = replace(self.session(), refresh_token="refresh", token_expires_at=NOW + 100)
        self.store.put(alice)
        cookie = self.cookie(alice)
        self.identity.clients.clients["default"] = SimpleNamespace()  # type: ignore[assignment]
        refreshed: list[Session] = []

        async def refresh(session: Session) -> Session:
            refreshed.append(session)
            return session
        self.patch(self.identity.flow, "refresh", refresh)
        self.allowed([BROWSER, cookie])
        self.clock.now = NOW + 39
        self.allowed([BROWSER, cookie])
        self.assertEqual(refreshed, [])
        self.clock.now = NOW + 41  # 60 s before the tokens expire
        decision = self.identity.decider.authorize(request(headers=[BROWSER, cookie]),
                                                   self.route)
        self.assertIsInstance(self.successResultOf(decision), Allow)  # type: ignore[arg-type]
        self.assertEqual(refreshed, [alice])

    def test_directory_change(self) -> None:
        """New directory data (groups) is seen on the next request."""
        directory = Directory()
        identity = Identity(None, self.snapshot, self.store, self.signer, self.clock,
                            directory=directory)
        cookie = self.cookie(self.session())
        first = identity.decider.authorize(request(headers=[BROWSER, cookie]), self.route)
        again = request(headers=[BROWSER, cookie])
        self.assertIs(identity.decider.authorize(again, self.route), first)
        directory.version, directory.groups = 2, ("admins",)
        self.assertIsNot(identity.decider.authorize(again, self.route), first)

    def test_long_cookie_headers_are_not_kept(self) -> None:
        """Cookie headers over 4 KiB are read each time and kept in no cache: a client
        cannot fill memory with junk headers of up to 64 KiB."""
        alice = self.session()
        name, value = self.cookie(alice)
        for i in range(5):
            padded = value + b"; junk=" + b"%d" % i * 5000
            self.allowed([BROWSER, (name, padded)])
        self.assertEqual(len(self.identity.sessions._cookie_tokens), 0)
        self.assertEqual(len(self.identity.decider._allowed), 0)
        self.allowed([BROWSER, (name, value)])
        self.assertEqual(len(self.identity.sessions._cookie_tokens), 1)
        self.assertEqual(len(self.identity.decider._allowed), 1)

    def test_only_opened_cookies_are_kept_and_only_so_many(self) -> None:
        """Cookie headers whose session cookie does not open (none, forged, junk) are
        kept in no cache, and valid ones only up to a count: keeping junk is free for a
        client and was ~1.3 GB at worst."""
        name, value = self.cookie(self.session())
        for junk in (b"other=1", b"_gateway=forged", b"_gateway=" + value[-40:]):
            self.assertEqual(self.authorize(headers=[BROWSER, (name, junk)]).status, 302)
        self.assertEqual(len(self.identity.sessions._cookie_tokens), 0)
        self.identity.sessions._cookie_tokens.limit = 3
        self.identity.decider._allowed.limit = 3
        for i in range(5):
            self.allowed([BROWSER, (name, value + b"; n=%d" % i)])
        self.assertEqual(len(self.identity.sessions._cookie_tokens), 3)
        self.assertEqual(len(self.identity.decider._allowed), 3)
