"""Forward authentication without sockets: which URL a forward-auth request asks about
(the documented order, nginx's unescaped ``$request_uri``, conflicting sources), the
checks every URL passes before it can become a redirect target, the route it belongs
to, the status mapping per endpoint, and the whole exchange through the HTTP/1.1 codec
on a memory reactor with the real identity layer."""

from __future__ import annotations

import base64
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import jwt
import trustme
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.holder import IdentityHolder
from gateway.authenticate.targets import SIGN_IN
from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.session_records import RecordSessionStore
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.exchange.access import loggable_query
from gateway.dataplane.forwardauth.answer import Mode, mode_of, outcome
from gateway.dataplane.forwardauth.target import (
    CheckedRequest,
    TargetError,
    find_target,
    parse_url,
    route_for,
    uri_param,
)
from gateway.dataplane.routing.plan import build_plan

from .config.helpers import IDENTITY, base_config, load

APP = "https://app.example.com"
FWD = "fwd.example.com"
AUTH = "auth.example.com"
Headers = list[tuple[bytes, bytes]]
ROUTES = [
    {"from": APP, "to": "http://127.0.0.1:9", "prefix": "/admin",
     "allowed_users": ["admin@example.com"], "pass_identity_headers": True},
    {"from": APP, "to": "http://127.0.0.1:9", "allowed_users": ["alice@example.com"],
     "pass_identity_headers": True},
    {"from": "https://open.example.com:8443", "to": "http://127.0.0.1:9",
     "allow_public_unauthenticated_access": True},
    {"from": "http://plain.example.com", "to": "http://127.0.0.1:9",
     "allow_any_authenticated_user": True},
    {"from": "tcp+https://db.example.com:5432", "to": "tcp://127.0.0.1:5432",
     "allow_any_authenticated_user": True},
    {"from": "https://gw-app.example.com", "to": "http://127.0.0.1:9",
     "allow_any_authenticated_user": True},
    {"from": "https://mtls.example.com", "to": "http://127.0.0.1:9",
     "allow_any_authenticated_user": True,
     "tls_downstream_client_ca": base64.b64encode(trustme.CA().cert_pem.bytes()).decode()},
]
SNAPSHOT = load(base_config(
    policy=ROUTES, **{**IDENTITY, "authenticate_service_url": f"https://{AUTH}"},
    forward_auth_url=f"https://{FWD}", jwt_claims_headers=["email"],
    shared_secret=base64.b64encode(b"s" * 32).decode(),
    cookie_secret=base64.b64encode(b"c" * 32).decode()))


def target(query: str = "", headers: Headers | None = None,
           method: bytes = b"GET") -> CheckedRequest:
    return find_target(query.encode("latin-1"), list(headers or []), method)


def forwarded(proto: str = "https", host: str = "app.example.com", uri: str = "/x?y=1",
              method: str | None = "GET") -> Headers:
    out = [(b"X-Forwarded-Proto", proto.encode()), (b"X-Forwarded-Host", host.encode()),
           (b"X-Forwarded-Uri", uri.encode())]
    if method is not None:
        out.append((b"X-Forwarded-Method", method.encode()))
    return out


class UriParamTests(SynchronousTestCase):
    def test_raw_value_runs_to_the_end(self) -> None:
        """nginx's unescaped $request_uri: the rest of the query is the URL's."""
        self.assertEqual(uri_param(b"?uri=https://a.example/p?x=1&y=2&uri=3"),
                         "https://a.example/p?x=1&y=2&uri=3")
        self.assertEqual(uri_param(b"a=1&uri=https://a.example/"), "https://a.example/")

    def test_encoded_value_is_one_parameter(self) -> None:
        encoded = quote("https://a.example/p?x=1&y=2", safe="")
        self.assertEqual(uri_param(f"?uri={encoded}&other=1".encode()),
                         "https://a.example/p?x=1&y=2")
        self.assertEqual(uri_param(b"?uri=HTTPS%3A%2F%2Fa.example%2F"), "HTTPS://a.example/")

    def test_absent(self) -> None:
        for query in (b"", b"?", b"?url=x", b"?uri", b"?xuri=1", b"?a=1&b=uri=2"):
            self.assertIsNone(uri_param(query), query)
        self.assertEqual(uri_param(b"?uri="), "")


class FindTargetTests(SynchronousTestCase):
    def test_each_source(self) -> None:
        """uri, X-Original-URL and X-Forwarded-* each give the same target."""
        by_uri = target("?uri=https://app.example.com/x?y=1")
        by_original = target(headers=[(b"X-Original-URL", b"https://app.example.com/x?y=1")])
        by_forwarded = target(headers=forwarded())
        for found, source in ((by_uri, "uri"), (by_original, "x-original-url"),
                              (by_forwarded, "x-forwarded")):
            self.assertEqual(found.source, source)
            self.assertEqual((found.scheme, found.host, found.path, found.query),
                             ("https", "app.example.com", "/x", b"?y=1"))
            self.assertEqual(found.url, "https://app.example.com/x?y=1")

    def test_path_parameters(self) -> None:
        """Issue 39: the path decided on is the one a servlet container behind the proxy
        serves, without ';' parameters, from every source; with reject_parameters,
        inner ones are a 400 naming the setting."""
        url = "https://app.example.com/private;x/admin%3Bv=1/x;jsessionid=1?q=;y"
        sources = [("?uri=" + url, []), ("", [(b"X-Original-URL", url.encode())]),
                   ("", forwarded(uri=url[len("https://app.example.com"):]))]
        for query, headers in sources:
            found = target(query, headers)
            self.assertEqual((found.path, found.query), ("/private/admin/x", b"?q=;y"))
            with self.assertRaises(TargetError) as caught:
                find_target(query.encode(), headers, b"GET", reject_parameters=True)
            self.assertEqual(caught.exception.status, 400)
            self.assertIn("path_with_parameters_action: reject", str(caught.exception))
        last = find_target(b"?uri=https://app.example.com/app;jsessionid=1", [], b"GET",
                           reject_parameters=True)
        self.assertEqual(last.path, "/app")

    def test_order(self) -> None:
        """uri first, then X-Original-URL, then X-Forwarded-*; agreeing sources are fine."""
        both = [(b"X-Original-URL", b"https://app.example.com/x?y=1"), *forwarded()]
        self.assertEqual(target("?uri=https://app.example.com/x?y=1", both).source, "uri")
        self.assertEqual(target("", both).source, "x-original-url")

    def test_conflicting_sources_refused(self) -> None:
        """A second complete source naming another resource came from the client: 400."""
        cases = [
            ("?uri=https://app.example.com/public",
             [(b"X-Original-URL", b"https://app.example.com/admin")]),
            ("?uri=https://app.example.com/public", forwarded(uri="/admin")),
            ("", [(b"X-Original-URL", b"https://app.example.com/public"),
                  *forwarded(uri="/admin")]),
            ("", [(b"X-Original-URL", b"https://app.example.com/x?y=1"),
                  *forwarded(host="other.example.com")]),
            ("?uri=https://app.example.com/x", forwarded(uri="/x?y=2")),
        ]
        for query, headers in cases:
            with self.assertRaises(TargetError, msg=(query, headers)) as caught:
                target(query, headers)
            self.assertEqual(caught.exception.status, 400)
            self.assertEqual(caught.exception.reason, "conflicting-urls")

    def test_agreement_ignores_scheme_and_default_port(self) -> None:
        """TLS may end before the proxy (http vs https); app.example.com:443 is
        app.example.com for https."""
        found = target("?uri=https://app.example.com:443/x?y=1",
                       forwarded(proto="https", host="app.example.com"))
        self.assertEqual(found.host, "app.example.com:443")
        target("?uri=http://app.example.com/x?y=1", forwarded(proto="https"))

    def test_incomplete_forwarded_is_no_source(self) -> None:
        """X-Forwarded-Proto alone (a load balancer's) neither counts nor conflicts."""
        found = target("?uri=https://app.example.com/a", [(b"X-Forwarded-Proto", b"http"),
                                                          (b"X-Forwarded-Host", b"evil")])
        self.assertEqual(found.path, "/a")
        with self.assertRaises(TargetError) as caught:
            target("", [(b"X-Forwarded-Host", b"app.example.com")])
        self.assertEqual((caught.exception.status, caught.exception.reason), (400, "no-url"))

    def test_method(self) -> None:
        """X-Forwarded-Method names the checked method; else the request's own."""
        self.assertEqual(target(headers=forwarded(method="post")).method, b"POST")
        self.assertEqual(target(headers=forwarded(method=None), method=b"HEAD").method, b"HEAD")
        # whether the proxy named it: a policy reading the method needs it named
        self.assertTrue(target(headers=forwarded(method="post")).method_named)
        self.assertFalse(target(headers=forwarded(method=None)).method_named)
        with self.assertRaises(TargetError):
            target(headers=forwarded(method="GET /x"))

    def test_path_normalised_as_the_data_plane_does(self) -> None:
        """The route is chosen on the path the upstream will serve."""
        for raw in ("/public/../admin", "/public/%2e%2e/admin", "//admin", "/./admin"):
            self.assertEqual(target(f"?uri=https://app.example.com{raw}").path, "/admin", raw)
            self.assertEqual(target(headers=forwarded(uri=raw)).path, "/admin", raw)
        for raw in ("/a%2fb", "/a%5cb", "/a%00"):
            with self.assertRaises(TargetError, msg=raw):
                target(f"?uri=https://app.example.com{raw}")

    def test_url_shapes(self) -> None:
        found = parse_url("HTTPS://App.Example.COM./", "uri", b"GET")
        self.assertEqual((found.scheme, found.host, found.path), ("https", "app.example.com", "/"))
        self.assertEqual(parse_url("https://app.example.com", "uri", b"GET").path, "/")
        self.assertEqual(parse_url("https://app.example.com?q=1", "uri", b"GET").query, b"?q=1")
        self.assertEqual(parse_url("https://app.example.com/#frag", "uri", b"GET").url,
                         "https://app.example.com/")
        self.assertEqual(parse_url("http://[::1]:8080/", "uri", b"GET").host, "[::1]:8080")

    def test_open_redirect_shapes_refused(self) -> None:
        """Relative, scheme-relative, backslash, userinfo, other schemes, bad ports and
        control characters never make a target, through any source."""
        bad = ["//evil.example/", "/\\evil.example/", "\\\\evil.example", "/x",
               "https://app.example.com@evil.example/", "https://evil.example\\@app.example.com/",
               "https://app.example.com:443@evil.example/", "javascript:alert(1)",
               "ftp://app.example.com/", "data:text/html,hi", "https:///evil.example/",
               "https:evil.example", "https://app.example.com:99999/", "https://:443/",
               "https://app.example.com/ x", "https://app.example.com/\tx",
               "https://app.example.com/\r\nLocation: https://evil.example/",
               " https://app.example.com/", "https://-app.example.com/", "https://a_b.example/"]
        for url in bad:
            with self.assertRaises(TargetError, msg=url) as caught:
                target("?uri=" + url)
            self.assertEqual(caught.exception.status, 400, url)
            if url != url.strip():
                continue  # header values are stripped, as HTTP says
            with self.assertRaises(TargetError, msg=url):
                target(headers=[(b"X-Original-URL", url.encode("latin-1"))])
        for host in ("app.example.com@evil.example", "evil.example/x", "app.example.com, evil",
                     "", "evil.example\\"):
            with self.assertRaises(TargetError, msg=host):
                target(headers=forwarded(host=host))
        for uri in ("evil", "\\evil", "/\\evil", "https://evil.example/"):
            with self.assertRaises(TargetError, msg=uri):
                target(headers=forwarded(uri=uri))
        # a path that starts with "//" is a path on the forwarded host, like any other
        self.assertEqual(target(headers=forwarded(uri="//evil.example/")).url,
                         "https://app.example.com/evil.example/")
        for proto in ("ftp", "javascript", "https,http", ""):
            with self.assertRaises(TargetError, msg=proto):
                target(headers=forwarded(proto=proto))

    def test_messages_do_not_repeat_the_url(self) -> None:
        """The answer says what is wrong without echoing what the client sent."""
        with self.assertRaises(TargetError) as caught:
            target("?uri=javascript:<script>")
        self.assertNotIn("script", str(caught.exception))


class RouteForTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.plan = build_plan(SNAPSHOT)

    def route(self, url: str) -> Any:
        found = route_for(self.plan, parse_url(url, "uri", b"GET"))
        return found.route.from_url + (found.route.prefix or "") if found else None

    def test_served(self) -> None:
        self.assertEqual(self.route("https://app.example.com/admin/x"),
                         "https://app.example.com/admin")
        self.assertEqual(self.route("https://app.example.com/x"), "https://app.example.com")
        self.assertEqual(self.route("https://APP.example.com:443/x"), "https://app.example.com")
        self.assertEqual(self.route("https://open.example.com:8443/"),
                         "https://open.example.com:8443")
        self.assertEqual(self.route("http://plain.example.com/"), "http://plain.example.com")

    def test_not_served(self) -> None:
        """Other hosts, look-alikes, other ports, another scheme, TCP routes: none."""
        for url in ("https://app.example.com.evil.net/", "https://evil.net/",
                    "https://xapp.example.com/", "https://app.example.com:8443/",
                    "http://app.example.com/", "https://open.example.com/",
                    "https://plain.example.com/", "https://db.example.com:5432/",
                    f"https://{FWD}/", f"https://{AUTH}/"):
            self.assertIsNone(self.route(url), url)

    def test_forward_auth_host(self) -> None:
        self.assertTrue(self.plan.is_forward_auth(FWD))
        self.assertTrue(self.plan.is_forward_auth(f"{FWD}:8443"))
        self.assertTrue(self.plan.is_forward_auth(f"{FWD}."))
        self.assertFalse(self.plan.is_forward_auth("app.example.com"))
        self.assertFalse(self.plan.is_forward_auth(f"x{FWD}"))
        self.assertFalse(build_plan(load(base_config())).is_forward_auth(FWD))


class AccessLogTests(SynchronousTestCase):
    def test_credentials_in_queries_are_not_logged(self) -> None:
        """The hand-off value and the provider's code never reach the access log, also
        inside a forward-auth question's uri."""
        self.assertEqual(loggable_query(b"?gateway_session=SEALED&x=1"),
                         "?gateway_session=[redacted]&x=1")
        self.assertEqual(loggable_query(b"?state=s&CODE=abc"), "?state=s&CODE=[redacted]")
        self.assertEqual(
            loggable_query(b"?uri=https://app.example.com/.gateway/callback?gateway_session=S"),
            "?uri=https://app.example.com/.gateway/callback?gateway_session=[redacted]")
        self.assertEqual(loggable_query(b"?zipcode=1&barcode=2"), "?zipcode=1&barcode=2")
        self.assertEqual(loggable_query(b""), "")


class ConfigTests(SynchronousTestCase):
    def test_route_on_the_forward_auth_host_is_flagged(self) -> None:
        """Every request to the forward-auth host is a question: a route there would
        never be used, and the config check says so."""
        snap = load(base_config(
            policy=[{"from": "https://FWD.example.com:8443", "to": "http://127.0.0.1:9",
                     "allow_any_authenticated_user": True}],
            **IDENTITY, forward_auth_url=f"https://{FWD}"))
        self.assertEqual([str(w) for w in snap.warnings], [
            f"policy[0].from: {FWD} is the forward_auth_url host, whose requests are "
            "forward-auth questions: this route is never used"])
        self.assertEqual(SNAPSHOT.warnings, ())


class AnswerTests(SynchronousTestCase):
    def test_modes(self) -> None:
        self.assertIs(mode_of("/verify", b"?uri=x"), Mode.VERIFY)
        self.assertIs(mode_of("/verify", b""), Mode.VERIFY)
        self.assertIs(mode_of("/", b"?uri=https://a/"), Mode.SIGN_IN)
        self.assertIs(mode_of("/", b""), Mode.CHECK)
        self.assertIs(mode_of("/auth", b"?uri=https://a/"), Mode.CHECK)

    def test_allowed_carries_identity_headers(self) -> None:
        allow = Allow(((b"x-gateway-jwt-assertion", b"jwt"), (b"X-Gateway-Claim-Email", b"a")))
        for mode in Mode:
            answer = outcome(mode, allow, [])
            assert answer is not None
            self.assertEqual(answer.status, 200)
            self.assertIn((b"x-gateway-jwt-assertion", b"jwt"), answer.headers)
            self.assertIn((b"X-Gateway-Claim-Email", b"a"), answer.headers)

    def test_unauthenticated(self) -> None:
        """/verify: always 401, never a redirect; elsewhere: the sign-in redirect (None
        asks the caller for a fresh one when the identity layer answered 401)."""
        redirect = Reply(302, b"", ((b"location", b"https://auth/x"),), reason="redirect")
        plain = Reply(401, b"sign in", reason="user-unauthenticated")
        for decision in (redirect, plain):
            answer = outcome(Mode.VERIFY, decision, [(b"Accept", b"text/html")])
            assert answer is not None
            self.assertEqual(answer.status, 401)
            self.assertNotIn(b"location", [n for n, _ in answer.headers])
        self.assertIs(outcome(Mode.CHECK, redirect, []), redirect)
        self.assertIsNone(outcome(Mode.CHECK, plain, []))

    def test_other_answers_pass_through(self) -> None:
        for status in (403, 495, 503):
            denied = Reply(status, b"no", reason="x")
            self.assertIs(outcome(Mode.VERIFY, denied, []), denied)
            self.assertIs(outcome(Mode.CHECK, denied, []), denied)


CLIENT = IPv4Address("TCP", "127.0.0.1", 50000)
BROWSER = b"text/html,application/xhtml+xml"


class WireTests(SynchronousTestCase):
    """Through the HTTP/1.1 codec with the real identity layer; no upstream exists, so
    ``reactor.tcpClients`` staying empty proves nothing was proxied."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        records = MemoryRecordStore(time.time)
        store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
        self.holder = IdentityHolder(self.reactor, SNAPSHOT,
                                     SimpleNamespace(sessions=store, directory=None, ends=None,
                                                     store=records))
        self.core = ProxyCore(self.reactor, build_plan(SNAPSHOT), tls=False,
                              authorizer=self.holder)

    def get(self, target: str, headers: Headers | None = None, host: str = FWD,
            method: str = "GET") -> tuple[int, dict[str, list[str]], bytes]:
        transport = StringTransport(peerAddress=CLIENT)
        conn = Http1Connection(self.core)
        conn.makeConnection(transport)
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k.decode()}: {v.decode('latin-1')}" for k, v in headers or []]
        conn.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, _, body = transport.value().partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        out: dict[str, list[str]] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            out.setdefault(name.lower(), []).append(value.strip())
        self.assertEqual(self.reactor.tcpClients, [])
        return int(status_line.split()[1]), out, body

    def cookie(self, email: str) -> tuple[bytes, bytes]:
        identity = self.holder.identity
        session = identity.new_session({"sub": email, "email": email}, "", "", "",
                                       identity.clock() + 3600)
        value = b"; ".join(v.split(b";")[0] for _, v in identity.session_cookie(session))
        return (b"Cookie", value)

    def sealed_target(self, location: str) -> str:
        self.assertTrue(location.startswith(f"https://{AUTH}{SIGN_IN}?"), location)
        sealed = parse_qs(urlsplit(location).query)["gateway_redirect"][0]
        payload = self.holder.identity.shared.open("sign-in", sealed,
                                                   self.holder.identity.clock())
        assert payload is not None
        return str(payload["uri"])

    def test_verify_unauthenticated_is_401(self) -> None:
        """nginx: 401 without a Location, for browsers and API clients alike."""
        for accept in (BROWSER, b"application/json", b"*/*"):
            status, headers, _ = self.get("/verify?uri=https://app.example.com/x",
                                          [(b"Accept", accept)])
            self.assertEqual(status, 401, accept)
            self.assertNotIn("location", headers)

    def test_check_unauthenticated_redirects_to_sign_in(self) -> None:
        """caddy/traefik: the redirect to sign-in, back to the original URL and query,
        whatever the Accept header says."""
        for accept in (BROWSER, b"application/json"):
            status, headers, _ = self.get("/", [(b"Accept", accept),
                                                *forwarded(uri="/x/y?q=1&r=%2F")])
            self.assertEqual(status, 302)
            self.assertEqual(self.sealed_target(headers["location"][0]),
                             "https://app.example.com/x/y?q=1&r=%2F")

    def test_sign_in_start(self) -> None:
        """/?uri= (nginx's sign-in target, unescaped $request_uri): the whole query."""
        status, headers, _ = self.get("/?uri=https://app.example.com/p?a=1&b=2")
        self.assertEqual(status, 302)
        self.assertEqual(self.sealed_target(headers["location"][0]),
                         "https://app.example.com/p?a=1&b=2")
        # signed in or not, it starts sign-in (the authenticate host hands the session over)
        status, headers, _ = self.get("/?uri=https://app.example.com/",
                                      [self.cookie("alice@example.com")])
        self.assertEqual(status, 302)

    def test_allowed_answers_identity_headers(self) -> None:
        """200 with a verifiable assertion for the route's host and the claim headers."""
        cookie = self.cookie("alice@example.com")
        for target, headers in (("/verify?uri=https://app.example.com/x", [cookie]),
                                ("/", [cookie, *forwarded()]),
                                ("/verify", [cookie, (b"X-Original-URL",
                                                      b"https://app.example.com/x")])):
            status, answer, body = self.get(target, headers)
            self.assertEqual(status, 200, target)
            self.assertEqual(body, b"OK\n")
            self.assertEqual(answer["x-gateway-claim-email"], ["alice@example.com"])
            token = answer["x-gateway-jwt-assertion"][0]
            key = jwt.PyJWK(self.holder.signer.public_jwk())
            claims = jwt.decode(token, key, algorithms=["ES256"],
                                audience="app.example.com", issuer=AUTH)
            self.assertEqual(claims["email"], "alice@example.com")

    def test_denied_is_403(self) -> None:
        cookie = self.cookie("bob@example.com")
        status, _, body = self.get("/verify?uri=https://app.example.com/x", [cookie])
        self.assertEqual(status, 403)
        self.assertIn(b"bob@example.com", body)
        alice = self.cookie("alice@example.com")
        status, _, _ = self.get("/", [alice, *forwarded(uri="/public/../admin/x")])
        self.assertEqual(status, 403)  # normalised to /admin: the admin route's rule

    def test_public_route(self) -> None:
        status, headers, _ = self.get("/verify?uri=https://open.example.com:8443/")
        self.assertEqual(status, 200)
        self.assertNotIn("x-gateway-jwt-assertion", headers)

    def test_no_route_is_404(self) -> None:
        for url in ("https://app.example.com.evil.net/", "https://evil.example/",
                    "http://app.example.com/"):
            for path in ("/verify?uri=", "/?uri="):
                status, headers, body = self.get(path + url)
                self.assertEqual(status, 404, url)
                self.assertIn(b"no route serves", body)
                self.assertNotIn("location", headers)

    def test_open_redirects_refused_on_every_endpoint(self) -> None:
        """No source makes the gateway redirect anywhere but the authenticate host."""
        attempts: list[tuple[str, Headers]] = []
        for url in ("//evil.example/", "/\\evil.example", "https://app.example.com.evil.net/",
                    "https://app.example.com@evil.example/", "javascript:alert(1)"):
            attempts += [(f"/?uri={url}", []), (f"/verify?uri={url}", []),
                         ("/", [(b"X-Original-URL", url.encode())])]
        for host, uri in (("evil.example", "/"), ("app.example.com@evil.example", "/"),
                          ("app.example.com", "//evil.example/"),
                          ("app.example.com.evil.net", "/")):
            attempts.append(("/", forwarded(host=host, uri=uri)))
        for path, headers in attempts:
            status, answer, _ = self.get(path, [(b"Accept", BROWSER), *headers])
            if status == 302:  # only ever to sign-in, and back to the route's own host
                back = urlsplit(self.sealed_target(answer["location"][0]))
                self.assertEqual(back.netloc, "app.example.com", (path, headers))
            else:
                self.assertIn(status, (400, 404), (path, headers))
                self.assertNotIn("location", answer, (path, headers))

    def test_gateway_paths_are_not_checked(self) -> None:
        """Checking /.gateway/callback instead of passing it on would loop: 404 says why."""
        status, headers, body = self.get("/", forwarded(uri="/.gateway/callback?x=1"))
        self.assertEqual(status, 404)
        self.assertIn(b"/.gateway/", body)
        self.assertNotIn("location", headers)

    def test_client_certificate(self) -> None:
        """A route that wants a client certificate: 495 when the forward-auth request's
        connection has none, before any session is looked at."""
        cookie = self.cookie("alice@example.com")
        for path, headers in (("/verify?uri=https://mtls.example.com/", [cookie]),
                              ("/", [cookie, *forwarded(host="mtls.example.com")])):
            status, _, _ = self.get(path, headers)
            self.assertEqual(status, 495, path)

    def test_decision_that_takes_time(self) -> None:
        """A decision that needs I/O (a session another process wrote) answers once it
        is made; a failed one answers 500, never 200."""
        real = self.holder.authorize
        pending: list[Deferred[Decision]] = []

        def later(request: RequestInfo, route: object) -> Deferred[Decision]:
            pending.append(Deferred())
            return pending[-1]

        self.holder.authorize = later  # type: ignore[method-assign]
        transport = StringTransport(peerAddress=CLIENT)
        conn = Http1Connection(self.core)
        conn.makeConnection(transport)
        cookie = self.cookie("alice@example.com")
        conn.dataReceived(b"GET /verify?uri=https://app.example.com/x HTTP/1.1\r\nHost: "
                          + FWD.encode() + b"\r\nCookie: " + cookie[1] + b"\r\n\r\n")
        self.assertEqual(transport.value(), b"")
        info = RequestInfo(b"GET", "https", "app.example.com", "/x", b"", [cookie], "")
        route = route_for(self.core.plan, parse_url("https://app.example.com/x", "uri", b"GET"))
        pending[0].callback(real(info, route.route))
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 200 "))
        transport.clear()
        conn.dataReceived(b"GET / HTTP/1.1\r\nHost: " + FWD.encode() + b"\r\n"
                          + b"".join(k + b": " + v + b"\r\n" for k, v in forwarded())
                          + b"\r\n")
        pending[1].errback(RuntimeError("storage down"))
        self.assertTrue(transport.value().startswith(b"HTTP/1.1 500 "))
        self.flushLoggedErrors(RuntimeError)

    def test_methods(self) -> None:
        status, headers, _ = self.get("/verify?uri=https://app.example.com/", method="POST")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], ["GET, HEAD"])

    def test_gateway_routes_side_by_side(self) -> None:
        """The gateway's own routes keep working: a browser is sent to sign in there."""
        status, headers, _ = self.get("/x", [(b"Accept", BROWSER)], host="gw-app.example.com")
        self.assertEqual(status, 302)
        self.assertEqual(self.sealed_target(headers["location"][0]),
                         "http://gw-app.example.com/x")
