"""The routes portal, ``/.gateway/routes``, without a network (issue 30): each person
sees exactly the routes the daemon's evaluator lets them open now (a GET of the route's
entry path, a CONNECT for a TCP route, from their address, for the session as decisions
see it); public routes marked; the ``gateway tcp`` command line; a note on routes whose
access depends on the request; the JSON; strangers sent to sign in or refused; markup
escaped; and the who-am-I page's link to it."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Reply
from gateway.config.snapshot import Snapshot
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.session_records import RecordSessionStore
from gateway.dataplane.routing.plan import build_plan
from gateway.sessions.model import Session

from .config.helpers import IDENTITY, base_config, load
from .test_identity import (
    APP,
    AUTH,
    BROWSER,
    JSON,
    NOW,
    Clock,
    cookie_header,
    header,
    location,
    query_of,
    request,
)

# NOW is 2023-11-14 22:13:20 UTC (a Tuesday)
ALICE = {"sub": "alice-id", "email": "alice@example.com", "name": "Alice",
         "groups": ["staff"]}
BOB = {"sub": "bob-id", "email": "bob@example.com", "groups": ["engineering"]}
EVIL = "<img src=x onerror=alert(1)>"
UP = "http://127.0.0.1:9"


def route(origin: str, **fields: Any) -> dict[str, Any]:
    return {"from": origin, "to": UP, **fields}


def allow(*criteria: dict[str, Any], op: str = "or") -> dict[str, Any]:
    return {"allow": {op: list(criteria)}}


def deny(*criteria: dict[str, Any]) -> dict[str, Any]:
    return {"deny": {"or": list(criteria)}}


SIGNED_IN = {"authenticated_user": True}
ROUTES = [
    # groups or a named person: Bob (engineering), not Alice
    route("https://wiki.test", name="wiki", policy=[allow(
        {"groups": {"has": "engineering"}}, {"email": {"is": "ceo@example.com"}})]),
    # an allow field: Alice (staff), not Bob
    route("https://staff.test", allowed_groups=["staff"]),
    route("https://all.test", allow_any_authenticated_user=True),
    route("https://www.test", allow_public_unauthenticated_access=True),
    route("tcp+https://db.test:5432", to="tcp://127.0.0.1:9",
          allowed_users=["alice@example.com"]),
    # open now (22:00-23:00 UTC), closed now (09:00-17:00)
    route("https://late.test", policy=[allow(
        SIGNED_IN, {"time_of_day": {"after": "22:00", "before": "23:00"}}, op="and")]),
    route("https://office.test", policy=[allow(
        SIGNED_IN, {"time_of_day": {"after": "09:00", "before": "17:00"}}, op="and")]),
    # path-dependent, with its own prefix: the GET is of /api
    route("https://api.test", prefix="/api", policy=[
        allow(SIGNED_IN), deny({"http_path": {"starts_with": "/api/admin"}})]),
    route("https://write.test", policy=[allow({"http_method": {"in": ["POST"]}})]),
    route("https://mine.test",
          policy=[allow(SIGNED_IN), deny({"email": {"is": "bob@example.com"}})]),
    # the client's address is 192.0.2.1
    route("https://near.test", policy=[allow({"source_ip": "192.0.2.0/24"})]),
    route("https://far.test", policy=[allow({"source_ip": "198.51.100.0/24"})]),
    # the same address as an earlier route: routing never reaches it
    route("https://wiki.test", allow_any_authenticated_user=True),
    {"from": "https://old.test", "redirect": {"host_redirect": "new.test"}},
    route("https://nobody.test", policy=[deny({"accept": True}), allow(SIGNED_IN)]),
    # a broader route first: its prefix "/" takes /public too, so routing never gives
    # the second one anything, and Alice, whom only the second lets in, is not sent there
    route("https://docs.test", allowed_groups=["engineering"]),
    route("https://docs.test", prefix="/public", allow_any_authenticated_user=True),
]
ALICE_SEES = ["https://staff.test/", "https://all.test/", "https://www.test/",
              "tcp+https://db.test:5432", "https://late.test/", "https://api.test/api",
              "https://mine.test/", "https://near.test/"]
BOB_SEES = ["https://wiki.test/", "https://all.test/", "https://www.test/",
            "https://late.test/", "https://api.test/api", "https://near.test/",
            "https://docs.test/"]


def snapshot(routes: list[dict[str, Any]] | None = None) -> Snapshot:
    config = {**IDENTITY, "authenticate_service_url": f"https://{AUTH}",
              "idp_service_account": "groups-from-claims",
              "policy": ROUTES if routes is None else routes}
    return load(base_config(**config))


class PortalCase(SynchronousTestCase):
    routes: list[dict[str, Any]] | None = None

    def setUp(self) -> None:
        self.clock = Clock()
        self.snapshot = snapshot(self.routes)
        records = MemoryRecordStore(self.clock)
        store = RecordSessionStore(records, ChangeFollower(None, records), complete=True)
        signer = AssertionSigner(None, "ES256", AUTH, clock=self.clock)
        self.identity = Identity(None, self.snapshot, store, signer, self.clock)
        self.identity.clients.clients.pop("default", None)
        self.endpoints = Endpoints(self.identity, self.snapshot.routes)

    def session(self, claims: dict[str, Any]) -> Session:
        return self.identity.new_session(dict(claims), "idtoken", "access", "", NOW + 3600)

    def portal(self, session: Session | None, accept: tuple[bytes, bytes] = JSON, *,
               host: str = APP, path: str = "/.gateway/routes", query: str = "") -> Reply:
        cookie = [cookie_header([v for _, v in self.identity.session_cookie(session)])] \
            if session is not None else []
        decision = self.endpoints.internal(
            request(path, query, host=host, headers=[accept, *cookie]))
        self.assertNotIsInstance(decision, Deferred)
        assert isinstance(decision, Reply), decision
        return decision

    def listed(self, claims: dict[str, Any]) -> list[str]:
        decision = self.portal(self.session(claims))
        self.assertEqual(decision.status, 200)
        return [r["url"] for r in json.loads(decision.body)["routes"]]

    def entry(self, url: str, claims: dict[str, Any] = ALICE) -> dict[str, Any]:
        doc = json.loads(self.portal(self.session(claims)).body)
        found: dict[str, Any] = next(r for r in doc["routes"] if r["url"] == url)
        return found


class WhoSeesWhatTests(PortalCase):
    def test_each_person_sees_exactly_their_routes(self) -> None:
        self.assertEqual(self.listed(ALICE), ALICE_SEES)
        self.assertEqual(self.listed(BOB), BOB_SEES)

    def test_decided_as_the_daemon_decides(self) -> None:
        """Every route of the snapshot that is neither public nor a redirect: listed for
        a person exactly when the daemon lets them in to its address now."""
        for claims, seen in ((ALICE, ALICE_SEES), (BOB, BOB_SEES)):
            person = self.session(claims)
            cookie = cookie_header([v for _, v in self.identity.session_cookie(person)])
            plan = build_plan(self.snapshot)
            for r in self.snapshot.routes:
                path = "" if r.tcp else (r.prefix or "/")
                if r.redirect is not None or r.allow_public_unauthenticated_access:
                    continue
                # the route the data plane gives this address to decides
                serving, _ = plan.lookup_tcp(f"{r.host}:{r.port}") if r.tcp else \
                    plan.lookup(r.host, path)
                assert serving is not None
                if serving.route is not r:
                    continue
                ask = request(path, host=r.host, method=b"CONNECT" if r.tcp else b"GET",
                              headers=[JSON, cookie])
                decision = self.identity.decider.authorize(ask, r)
                self.assertNotIsInstance(decision, Deferred)
                url = r.from_url + ("" if r.tcp else path)
                self.assertEqual(not isinstance(decision, Reply), url in seen,
                                 f"{claims['email']} on {url}: {decision}")

    def test_a_refused_e_mail_address_opens_nothing_it_names(self) -> None:
        """The session as decisions see it: an address the provider did not vouch for
        matches no e-mail rule (the named-user TCP route is Alice's)."""
        unproven = {**ALICE, "email_verified": False}
        self.assertNotIn("tcp+https://db.test:5432", self.listed(unproven))
        self.assertIn("https://staff.test/", self.listed(unproven))

    def test_a_route_of_other_providers_is_left_out(self) -> None:
        """A route whose ``identity_providers`` does not name the session's provider is
        not the person's to open (its page offers another provider's sign-in)."""
        config = {**IDENTITY, "authenticate_service_url": f"https://{AUTH}", "policy": [
            {"from": "https://mine.test", "to": "http://127.0.0.1:9",
             "allow_any_authenticated_user": True},
            {"from": "https://theirs.test", "to": "http://127.0.0.1:9",
             "allow_any_authenticated_user": True, "identity_providers": ["corp"]}],
            "identity_providers": [{"id": "corp", "issuer": "https://corp.example",
                                    "client_id": "gw", "client_secret": "s"}]}
        self.snapshot = load(base_config(**config))
        self.identity = Identity(None, self.snapshot, self.identity.store,
                                 self.identity.signer, self.clock)
        self.endpoints = Endpoints(self.identity, self.snapshot.routes)
        self.assertEqual(self.listed(ALICE), ["https://mine.test/"])  # (provider default)

    def test_a_route_a_broader_one_hides_is_left_out(self) -> None:
        """docs.test/public is the second docs.test route's entry, but the first one's
        prefix "/" takes it: the portal shows no link its own route would not decide,
        and the route that does decide refuses Alice."""
        self.assertNotIn("https://docs.test/public", self.listed(ALICE))
        serving, _ = build_plan(self.snapshot).lookup("docs.test", "/public")
        assert serving is not None
        self.assertEqual(serving.route.allowed_groups, ("engineering",))

    def test_same_on_the_authenticate_host(self) -> None:
        doc = json.loads(self.portal(self.session(ALICE), host=AUTH).body)
        self.assertEqual([r["url"] for r in doc["routes"]], ALICE_SEES)


class WhatIsShownTests(PortalCase):
    def test_public_routes_are_marked(self) -> None:
        www = self.entry("https://www.test/")
        self.assertTrue(www["public"])
        self.assertIsNone(www["checked"])
        self.assertFalse(self.entry("https://all.test/")["public"])

    def test_tcp_route_has_the_command_line(self) -> None:
        db = self.entry("tcp+https://db.test:5432")
        self.assertEqual((db["type"], db["destination"]), ("tcp", "db.test:5432"))
        # this page is on https://app.test: the destination's name leads to the gateway
        self.assertEqual(db["command"], "gateway tcp db.test:5432")
        self.assertEqual(db["checked"], {"method": "CONNECT", "path": ""})
        html = self.portal(self.session(ALICE), BROWSER).body.decode()
        self.assertIn("<code>gateway tcp db.test:5432</code>", html)

    def test_tcp_command_names_the_gateway_when_its_address_is_not_the_default(
            self) -> None:
        decision = self.endpoints.internal(request(
            "/.gateway/routes", host="app.test:8443", headers=[JSON, self.cookie(ALICE)]))
        assert isinstance(decision, Reply)
        db = next(r for r in json.loads(decision.body)["routes"] if r["type"] == "tcp")
        self.assertEqual(db["command"],
                         "gateway tcp --gateway-url https://app.test:8443 db.test:5432")

    def cookie(self, claims: dict[str, Any]) -> tuple[bytes, bytes]:
        return cookie_header([v for _, v in self.identity.session_cookie(
            self.session(claims))])

    def test_time_dependent_route_has_a_note(self) -> None:
        late = self.entry("https://late.test/")
        self.assertEqual(late["depends_on"], ["time_of_day"])
        self.assertEqual(late["checked"], {"method": "GET", "path": "/"})
        self.assertIn("depends on the time of day", late["note"])
        self.assertIn("A GET of / is allowed for you now (2023-11-14 22:13:20 UTC)",
                      late["note"])
        html = self.portal(self.session(ALICE), BROWSER).body.decode()
        self.assertIn("Access depends on the time of day.", html)
        # an hour later the same person no longer sees it, and sees the office route
        # only when it is open
        self.clock.now = NOW + 3600
        self.assertNotIn("https://late.test/", self.listed(ALICE))
        self.clock.now = NOW + 11 * 3600  # 09:13 the next day
        self.assertIn("https://office.test/", self.listed(ALICE))

    def test_notes_on_path_and_network(self) -> None:
        api = self.entry("https://api.test/api")
        self.assertEqual((api["depends_on"], api["checked"]),
                         (["path"], {"method": "GET", "path": "/api"}))
        self.assertIn("depends on the page you open (its path)", api["note"])
        self.assertEqual(self.entry("https://near.test/")["depends_on"], ["network"])
        # a policy that reads only who the person is: no note
        self.assertEqual(self.entry("https://staff.test/")["depends_on"], [])
        self.assertEqual(self.entry("https://staff.test/")["note"], "")

    def test_json_shape(self) -> None:
        decision = self.portal(self.session(ALICE))
        self.assertEqual(header(decision, b"content-type"), b"application/json")
        self.assertEqual(header(decision, b"cache-control"), b"no-store")
        doc = json.loads(decision.body)
        self.assertEqual(set(doc), {"signed_in_as", "checked_at", "checked_at_unix",
                                    "routes"})
        self.assertEqual((doc["signed_in_as"], doc["checked_at"], doc["checked_at_unix"]),
                         ("alice@example.com", "2023-11-14T22:13:20Z", int(NOW)))
        http = {"type", "url", "name", "public", "checked", "depends_on", "note"}
        for entry in doc["routes"]:
            extra = {"destination", "command"} if entry["type"] == "tcp" else set()
            self.assertEqual(set(entry), http | extra, entry)
        self.assertEqual(self.entry("https://wiki.test/", BOB)["name"], "wiki")

    def test_format_json_in_the_query(self) -> None:
        decision = self.portal(self.session(ALICE), BROWSER, query="?format=json")
        self.assertEqual(header(decision, b"content-type"), b"application/json")
        self.assertEqual([r["url"] for r in json.loads(decision.body)["routes"]], ALICE_SEES)

    def test_html_for_browsers(self) -> None:
        decision = self.portal(self.session(BOB), BROWSER)
        self.assertEqual(header(decision, b"content-type"), b"text/html; charset=utf-8")
        self.assertEqual(header(decision, b"x-frame-options"), b"DENY")
        html = decision.body.decode()
        self.assertIn("Your routes", html)
        self.assertIn('<a href="https://wiki.test/">https://wiki.test/</a>', html)
        self.assertIn("<span class=tag>public</span>", html)
        self.assertIn('href="/.gateway/"', html)  # back to who am I
        for hidden in ("staff.test", "db.test", "office.test", "write.test", "far.test",
                       "old.test", "nobody.test", "mine.test", "engineering"):
            self.assertNotIn(hidden, html)

    def test_trailing_slash(self) -> None:
        self.assertEqual(self.portal(self.session(ALICE), path="/.gateway/routes/").status,
                         200)


class StrangerTests(PortalCase):
    def test_browser_is_sent_to_sign_in_and_back(self) -> None:
        decision = self.portal(None, BROWSER)
        self.assertEqual(decision.status, 302)
        sealed = query_of(location(decision))["gateway_redirect"]
        payload = self.identity.shared.open("sign-in", sealed, NOW)
        assert payload is not None
        self.assertEqual(payload["uri"], f"https://{APP}/.gateway/routes")

    def test_api_client_gets_401(self) -> None:
        for accept, query in ((JSON, ""), ((b"Accept", b"*/*"), "?format=json")):
            decision = self.portal(None, accept, query=query)
            self.assertEqual(decision.status, 401)
            self.assertIsNone(header(decision, b"location"))
            self.assertNotIn(b"test/", decision.body)  # no route named

    def test_expired_session(self) -> None:
        alice = self.session(ALICE)
        self.clock.now = alice.expires_at + 1
        self.assertEqual(self.portal(alice).status, 401)


class EscapingTests(PortalCase):
    routes = [route("https://app.test", name=EVIL, prefix=f"/{EVIL}",
                    allow_any_authenticated_user=True),
              route("https://pub.test", name=EVIL, allow_public_unauthenticated_access=True)]

    def test_markup_in_names_paths_and_people_is_escaped(self) -> None:
        evil = self.session({"sub": f"id-{EVIL}", "email": f"{EVIL}@example.com",
                             "name": EVIL})
        html = self.portal(evil, BROWSER).body.decode()
        self.assertNotIn("<img", html)
        self.assertIn("&lt;img src=x onerror=alert(1)&gt;", html)
        self.assertIn('href="https://app.test/&lt;img src=x onerror=alert(1)&gt;"', html)
        doc = json.loads(self.portal(evil).body)
        self.assertEqual([r["name"] for r in doc["routes"]], [EVIL, EVIL])


class WithoutRoutesTests(PortalCase):
    routes = [route("https://app.test", allowed_users=["carol@example.com"])]

    def test_nothing_open(self) -> None:
        html = self.portal(self.session(ALICE), BROWSER).body.decode()
        self.assertIn("No route is open to you right now.", html)
        self.assertEqual(json.loads(self.portal(self.session(ALICE)).body)["routes"], [])


class WhoAmILinkTests(PortalCase):
    def test_who_am_i_links_to_the_portal(self) -> None:
        decision = self.endpoints.internal(request(
            "/.gateway/", host=APP, headers=[BROWSER, cookie_header(
                [v for _, v in self.identity.session_cookie(self.session(ALICE))])]))
        assert isinstance(decision, Reply)
        self.assertIn('<a class=button href="/.gateway/routes">Your routes</a>',
                      decision.body.decode())
