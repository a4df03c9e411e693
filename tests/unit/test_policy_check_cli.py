"""``gateway policy check``, run in-process against configurations written to temporary
directories: every criterion family, ``--at`` over date windows, weekdays and a
``time_of_day`` window wrapping midnight in Europe/Berlin (frozen instants, both sides
of each bound, winter and summer time), the ``--json`` shape, exit statuses, routes with
the allow fields, public, redirect and tcp+https routes, a bad configuration, client
certificates; and the command's verdict against the Decider's on the same requests."""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.hook import Allow, Reply, RequestInfo
from gateway.cli import main
from gateway.config import load_snapshot

from .config.helpers import IDENTITY, base_config, write
from .test_identity import JSON, NOW, IdentityCase

GROUPS_FROM_CLAIM = "groups-from-the-id-token"  # not a directory: the groups claim


def route(host: str, policy: Any = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"from": f"https://{host}", "to": "http://127.0.0.1:9", **fields}
    if policy is not None:
        out["policy"] = policy
    return out


def allow(*criteria: Any, op: str = "or") -> dict[str, Any]:
    return {"allow": {op: list(criteria)}}


def deny(*criteria: Any, op: str = "or") -> dict[str, Any]:
    return {"deny": {op: list(criteria)}}


SIGNED_IN = {"authenticated_user": True}
CRITERIA_ROUTES = [
    route("accept.test", [allow({"accept": True})]),
    route("reject.test", [allow({"reject": True}), deny({"reject": True})]),
    route("signed.test", [allow(SIGNED_IN)]),
    route("user.test", [allow({"user": {"in": ["alice-id", "u-7"]}})]),
    route("email.test", [allow({"email": {"is": "Alice@Example.com"}})]),
    route("domain.test", [allow({"domain": {"is": "example.com"}})]),
    route("groups.test", [allow({"groups": {"has": "engineering"}})]),
    route("claim.test", [allow({"claim/org.unit": "research"})]),
    route("method.test", [allow(SIGNED_IN), deny({"http_method": {"in": ["DELETE", "PUT"]}})]),
    route("path.test", [allow(SIGNED_IN), deny({"http_path": {"starts_with": "/admin/"}})]),
    route("network.test", [allow({"source_ip": ["203.0.113.0/24", "2001:db8::/32"]})]),
    route("cors.test", [allow({"cors_preflight": True})]),
    route("own.test", [allow({"gateway_routes": True})]),
    route("nested.test", [allow(SIGNED_IN, {"nor": [{"user": "bob-id"},
                                                    {"domain": "example.org"}]}, op="and")]),
    route("date.test", [allow(SIGNED_IN, {"date": {"after": "2024-03-01T00:00:00Z",
                                                   "before": "2024-04-01T00:00:00+02:00"}},
                              op="and")]),
    route("weekday.test", [allow(SIGNED_IN, {"day_of_week": "mon-fri"}, op="and")]),
    route("hours.test", [allow(SIGNED_IN), deny({"time_of_day": {
        "after": "22:00", "before": "06:00", "timezone": "Europe/Berlin"}})]),
    route("prefixed.test", [allow({"accept": True})], prefix="/api/"),
    route("legacy.test", allowed_users=["alice@example.com", "u-7"],
          allowed_domains=["corp.example"]),
    route("public.test", allow_public_unauthenticated_access=True),
    {"from": "https://old.test", "redirect": {"host_redirect": "new.test"}},
    {"from": "tcp+https://db.test:5432", "to": "tcp://127.0.0.1:5432",
     "policy": [allow({"email": {"ends_with": "@example.com"}},
                      {"http_method": "CONNECT"}, op="and")]},
    route("mixed.test", [deny({"http_method": "POST"})], allowed_domains=["example.com"]),
    route("provider.test", [allow({"provider": "partners"})]),
]


class CliCase(SynchronousTestCase):
    def config(self, routes: list[dict[str, Any]], **extra: Any) -> str:
        directory = tempfile.mkdtemp(prefix="gw-policy-check-")
        self.addCleanup(shutil.rmtree, directory, True)
        settings = base_config(**{**IDENTITY, "policy": routes, **extra})
        return write(directory, "config.yaml", yaml.safe_dump(settings))

    def run_cli(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        self.patch(sys, "stdout", out)
        self.patch(sys, "stderr", err)
        code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def check(self, path: str, url: str, *args: str) -> tuple[int, str, str]:
        return self.run_cli("policy", "check", "--config", path, "--url", url, *args)

    def check_json(self, path: str, url: str, *args: str) -> tuple[int, dict[str, Any]]:
        code, out, err = self.check(path, url, "--json", *args)
        self.assertIn(code, (0, 1), err)
        doc = json.loads(out)  # the whole output is one object
        assert isinstance(doc, dict)
        return code, doc


class CriteriaTests(CliCase):
    """Each criterion family decides through the command, with the rule that decided."""

    def setUp(self) -> None:
        self.path = self.config(CRITERIA_ROUTES, idp_service_account=GROUPS_FROM_CLAIM)

    def expect(self, host: str, args: list[str], code: int, *texts: str,
               url: str = "") -> str:
        got, out, err = self.check(self.path, url or f"https://{host}/", *args)
        self.assertEqual(got, code, out + err)
        for text in texts:
            self.assertIn(text, out)
        return out

    def test_accept_and_reject(self) -> None:
        self.expect("accept.test", [], 0, "decision: allowed by allow[0].or[0] accept: "
                    "matched (policy-allow-matched)", "who: not signed in")
        out = self.expect("reject.test", ["--user", "u"], 1,
                          "decision: denied by allow[0].or[0] reject: not matched "
                          "(policy-no-allow-matched)",
                          "the person sees: This route is closed.")
        self.assertIn("      deny[0].or[0] reject: miss", out)
        self.expect("reject.test", [], 1, "the person sees: sign-in required")

    def test_authenticated_user(self) -> None:
        self.expect("signed.test", [], 1, "the person sees: sign-in required")
        self.expect("signed.test", ["--user", "u"], 0,
                    "allowed by allow[0].or[0] authenticated_user: matched")

    def test_user(self) -> None:
        self.expect("user.test", ["--user", "u-7"], 0, "user in [alice-id, u-7]: matched")
        self.expect("user.test", ["--user", "bob-id"], 1,
                    "Your account is not allowed on this route")

    def test_email_and_domain_ignore_case(self) -> None:
        self.expect("email.test", ["--email", "ALICE@example.COM"], 0,
                    "email is alice@example.com: matched")
        self.expect("domain.test", ["--email", "bob@Example.com"], 0,
                    "domain is example.com: matched")
        self.expect("domain.test", ["--email", "bob@example.org"], 1,
                    "Your e-mail domain is not allowed on this route.")

    def test_groups(self) -> None:
        self.expect("groups.test", ["--user", "u", "--groups", "ops, engineering"], 0,
                    "groups has engineering: matched", "groups ops, engineering")
        self.expect("groups.test", ["--user", "u", "--groups", "ops"], 1,
                    "Your group is not allowed on this route")

    def test_groups_need_group_data(self) -> None:
        path = self.config(CRITERIA_ROUTES)  # no idp_service_account
        code, out, _ = self.check(path, "https://groups.test/", "--user", "u", "--groups",
                                  "engineering")
        self.assertEqual(code, 1)
        self.assertIn("groups engineering (not used)", out)
        self.assertIn("note: groups are not used: idp_service_account is not configured", out)

    def test_claims_nest_with_dots(self) -> None:
        self.expect("claim.test", ["--user", "u", "--claim", "org.unit=sales",
                                   "--claim", "org.unit=research"], 0,
                    "claim/org.unit has research: matched", "claims org.unit=sales,research")
        self.expect("claim.test", ["--user", "u", "--claim", "unit=research"], 1,
                    "Your account's attributes do not allow you on this route")

    def test_http_method(self) -> None:
        for method in ("DELETE", "delete"):  # a lower-case delete is refused as DELETE
            self.expect("method.test", ["--user", "u", "--method", method], 1,
                        "denied by deny[0].or[0] http_method in [DELETE, PUT]: matched",
                        "This kind of request is not allowed on this route")
        self.expect("method.test", ["--user", "u", "--method", "POST"], 0,
                    "request: POST https://method.test/")

    def test_http_path_is_the_normalised_path(self) -> None:
        self.expect("path.test", ["--user", "u"], 1, "(path /admin/x)",
                    "deny[0].or[0] http_path starts_with /admin/: matched",
                    url="https://path.test/public/%2e%2e//admin/x?q=1")
        self.expect("path.test", ["--user", "u"], 0, "http_path starts_with /admin/: miss",
                    url="https://path.test/administration")

    def test_http_path_has_no_parameters(self) -> None:
        """Issue 39: the path is decided without its ';' parameters, as Tomcat reads it;
        with path_with_parameters_action: reject, inner ones are a 400."""
        self.expect("path.test", ["--user", "u"], 1, "(path /admin/x)",
                    "deny[0].or[0] http_path starts_with /admin/: matched",
                    url="https://path.test/admin;x/x;jsessionid=1")
        path = self.config(CRITERIA_ROUTES, path_with_parameters_action="reject")
        code, out, err = self.check(path, "https://path.test/admin;x/x", "--user", "u")
        self.assertNotEqual(code, 0)
        self.assertIn("refuses this request target with 400", out + err)

    def test_source_ip(self) -> None:
        for address in ("203.0.113.9", "2001:db8::1"):
            self.expect("network.test", ["--ip", address], 0, "source_ip: matched",
                        f"from {address} at")
        self.expect("network.test", ["--user", "u", "--ip", "198.51.100.1"], 1,
                    "Your network is not allowed on this route")
        self.expect("network.test", ["--user", "u", "--ip", "203.0.113.9, 10.0.0.1"], 1,
                    "is not an IP address: it matches no source_ip")
        self.expect("network.test", ["--user", "u"], 1,
                    "note: no --ip: the client address is unknown and matches no source_ip")

    def test_cors_preflight_needs_preflight_headers(self) -> None:
        """An OPTIONS without a browser's preflight headers is no preflight."""
        self.expect("cors.test", ["--user", "u", "--method", "OPTIONS"], 1,
                    "allow[0].or[0] cors_preflight: miss")

    def test_gateway_routes(self) -> None:
        """A route's own URL is none of the gateway's endpoints; those are no route's."""
        self.expect("own.test", ["--user", "u"], 1, "allow[0].or[0] gateway_routes: miss")
        code, _, err = self.check(self.path, "https://own.test/.gateway/", "--user", "u")
        self.assertEqual(code, 2)
        self.assertIn("/.gateway/ is the gateway's own", err)

    def test_nor_nesting_and_not_evaluated(self) -> None:
        out = self.expect("nested.test", ["--user", "bob-id", "--email", "bob@example.org"], 1,
                          "allow[0].and[1].nor[0] user is bob-id: hit")
        self.assertIn("allow[0].and[1].nor[1] domain is example.org: hit", out)
        out = self.expect("nested.test", ["--user", "carol-id"], 0)
        self.assertIn("allow[0].and[1].nor[1] domain is example.org: not evaluated", out)


class ProviderTests(CliCase):
    """``--provider ID``: the identity provider the person signed in through."""

    def setUp(self) -> None:
        self.path = self.config(CRITERIA_ROUTES, identity_providers=[
            {"id": "partners", "issuer": "https://partners.example", "client_id": "gw",
             "client_secret": "s"}])

    def test_provider_decides(self) -> None:
        code, out, _ = self.check(self.path, "https://provider.test/", "--user", "u",
                                  "--provider", "partners")
        self.assertEqual(code, 0, out)
        self.assertIn("provider is partners: matched", out)
        self.assertIn("who: user u, provider partners", out)
        code, out, _ = self.check(self.path, "https://provider.test/", "--user", "u",
                                  "--provider", "default")
        self.assertEqual(code, 1, out)
        self.assertIn("provider is partners: not matched", out)

    def test_default_is_the_first_interactive_provider(self) -> None:
        """The idp_* settings' implicit provider, listed first."""
        code, doc = self.check_json(self.path, "https://provider.test/", "--user", "u")
        self.assertEqual((code, doc["identity"]["provider"]), (1, "default"))

    def test_an_unknown_id_is_noted(self) -> None:
        code, out, _ = self.check(self.path, "https://provider.test/", "--user", "u",
                                  "--provider", "nope")
        self.assertEqual(code, 1, out)
        self.assertIn("--provider nope: no identity provider of the configuration has this "
                      "id", out)

    def test_nobody_signed_in_is_asked_to_sign_in(self) -> None:
        code, out, _ = self.check(self.path, "https://provider.test/")
        self.assertEqual(code, 1, out)
        self.assertIn("unknown", out)


class TimeTests(CliCase):
    """``--at``: frozen instants on both sides of each bound."""

    def setUp(self) -> None:
        self.path = self.config(CRITERIA_ROUTES)

    def at(self, host: str, instant: str) -> tuple[int, str]:
        code, out, err = self.check(self.path, f"https://{host}/", "--user", "u", "--at",
                                    instant)
        self.assertIn(code, (0, 1), err)
        return code, out

    def assertCodes(self, host: str, cases: dict[str, int], words: str) -> None:
        for instant, expected in cases.items():
            code, out = self.at(host, instant)
            self.assertEqual(code, expected, f"{host} at {instant}:\n{out}")
            if code:
                self.assertIn(words, out)

    def test_date_window(self) -> None:
        # before: 2024-04-01T00:00:00+02:00 is 2024-03-31T22:00:00Z; windows are half-open
        self.assertCodes("date.test", {
            "2024-02-29T23:59:59Z": 1, "2024-03-01T00:00:00Z": 0, "2024-03-15T12:00:00Z": 0,
            "2024-03-31T21:59:59.5Z": 0, "2024-03-31T22:00:00Z": 1,
            "2024-04-01T00:00:00+02:00": 1, "2024-04-01t01:59:59+04:00": 0,
        }, "This route is not open at this date")

    def test_weekday(self) -> None:
        # 2024-05-03 is a Friday; the days are UTC's unless a timezone is given
        self.assertCodes("weekday.test", {
            "2024-05-03T23:59:59Z": 0, "2024-05-04T00:00:00Z": 1, "2024-05-05T12:00:00Z": 1,
            "2024-05-06T00:00:00Z": 0, "2024-05-04T01:00:00+02:00": 0,
            "2024-05-03T20:00:00-05:00": 1,
        }, "This route is closed on this day of the week")

    def test_time_of_day_wraps_midnight_in_berlin(self) -> None:
        """22:00-06:00 Berlin time: 21:00-05:00 UTC in winter, 20:00-04:00 in summer."""
        self.assertCodes("hours.test", {
            "2024-01-15T20:59:59Z": 0, "2024-01-15T21:00:00Z": 1,
            "2024-01-15T23:30:00Z": 1, "2024-01-16T04:59:59Z": 1,
            "2024-01-16T05:00:00Z": 0, "2024-07-15T19:59:59Z": 0,
            "2024-07-15T20:00:00Z": 1, "2024-07-16T03:59:59Z": 1,
            "2024-07-16T04:00:00Z": 0, "2024-07-15T23:30:00+02:00": 1,
            "2024-07-15T12:00:00+02:00": 0,
        }, "This route is closed at this time of day")
        _, out = self.at("hours.test", "2024-01-15T23:30:00+01:00")
        self.assertIn("at 2024-01-15T22:30:00Z", out)
        self.assertIn("deny[0].or[0] time_of_day after 22:00 before 06:00 Europe/Berlin: hit",
                      out)

    def test_now_by_default(self) -> None:
        before = time.time()
        _, doc = self.check_json(self.path, "https://accept.test/")
        at = dt.datetime.fromisoformat(doc["request"]["at"]).timestamp()
        self.assertLessEqual(before - 1, at)
        self.assertLessEqual(at, time.time())

    def test_bad_instants(self) -> None:
        for instant in ("2024-01-15T21:00:00", "2024-01-15", "yesterday",
                        "2024-02-30T00:00:00Z"):
            code, out, err = self.check(self.path, "https://hours.test/", "--at", instant)
            self.assertEqual((code, out), (2, ""), instant)
            self.assertIn(f"gateway policy check: --at {instant}", err)


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children", ()):
        yield from walk(child)


class JsonTests(CliCase):
    def test_shape(self) -> None:
        path = self.config(CRITERIA_ROUTES, idp_service_account=GROUPS_FROM_CLAIM)
        code, doc = self.check_json(path, "https://method.test/x?y=1", "--user", "u",
                                    "--email", "u@example.com", "--groups", "eng",
                                    "--claim", "org.unit=r", "--method", "PUT",
                                    "--ip", "192.0.2.1", "--at", "2024-01-15T21:00:00Z")
        self.assertEqual(code, 1)
        self.assertEqual(set(doc), {"url", "route", "request", "identity",
                                    "client_certificate", "decision", "trace", "notes"})
        self.assertEqual(doc["url"], "https://method.test/x?y=1")
        self.assertEqual(doc["route"]["index"], 8)
        self.assertEqual(doc["route"]["from"], "https://method.test")
        self.assertTrue(doc["route"]["policy"])
        self.assertEqual(doc["request"], {
            "method": "PUT", "host": "method.test", "path": "/x", "query": "?y=1",
            "client_ip": "192.0.2.1", "at": "2024-01-15T21:00:00Z"})
        identity = doc["identity"]
        self.assertEqual((identity["signed_in"], identity["user_id"], identity["email"],
                          identity["email_used"], identity["groups"]),
                         (True, "u", "u@example.com", True, ["eng"]))
        self.assertEqual(identity["claims"]["org.unit"], ["r"])
        self.assertIsNone(doc["client_certificate"])
        decision = doc["decision"]
        self.assertEqual(decision, {
            "public": False, "redirect": False, "allowed": False, "rule": "deny[0].or[0]",
            "criterion": "http_method in [DELETE, PUT]", "outcome": "matched",
            "kind": "method", "code": "policy-deny-matched",
            "text": "deny[0].or[0] http_method in [DELETE, PUT]: matched",
            "sign_in_required": False,
            "message": "This kind of request is not allowed on this route."})
        trace = doc["trace"]
        self.assertEqual(trace["rule"], "deny[0].or[0]")
        self.assertEqual([rule["path"] for rule in trace["rules"]], ["allow[0]", "deny[0]"])
        self.assertEqual([rule["state"] for rule in trace["rules"]], ["hit", "hit"])
        nodes = [n for rule in trace["rules"] for n in walk(rule)]
        self.assertEqual({n["state"] for n in nodes}, {"hit"})
        self.assertIn({"path": "deny[0].or[0]", "state": "hit",
                       "criterion": "http_method in [DELETE, PUT]"}, nodes)

    def test_not_evaluated_and_sign_in(self) -> None:
        path = self.config([route("a.test", [allow({"user": "x"}, {"accept": True},
                                                   {"user": "y"}),
                                             deny({"accept": True})])])
        code, doc = self.check_json(path, "https://a.test/")
        self.assertEqual(code, 1)
        self.assertTrue(doc["decision"]["sign_in_required"])
        self.assertEqual(doc["decision"]["message"], "sign-in required")
        self.assertEqual(doc["identity"], {"signed_in": False})
        states = [(n["path"], n["state"]) for n in walk(doc["trace"]["rules"][0])]
        # a criterion about the person is unknown for nobody signed in, not a miss
        self.assertEqual(states, [("allow[0]", "hit"), ("allow[0].or", "hit"),
                                  ("allow[0].or[0]", "unknown: not signed in"),
                                  ("allow[0].or[1]", "hit"),
                                  ("allow[0].or[2]", "not evaluated")])


class RoutesTests(CliCase):
    def setUp(self) -> None:
        self.path = self.config(CRITERIA_ROUTES)

    def test_allow_fields(self) -> None:
        code, out, _ = self.check(self.path, "https://legacy.test/", "--email",
                                  "alice@example.com")
        self.assertEqual(code, 0)
        self.assertIn('  allowed_users is the rule {"allow": {"or": [{"email": {"in": '
                      '["alice@example.com", "u-7"]}}, {"user": {"in": ["alice@example.com",'
                      ' "u-7"]}}]}}', out)
        self.assertIn("decision: allowed by allowed_users.or[0] email in "
                      "[alice@example.com, u-7]: matched", out)
        code, out, _ = self.check(self.path, "https://legacy.test/", "--user", "u-7")
        self.assertEqual(code, 0)
        self.assertIn("allowed_users.or[1] user in [alice@example.com, u-7]: matched", out)
        code, out, _ = self.check(self.path, "https://legacy.test/", "--user", "b",
                                  "--email", "bob@corp.example")
        self.assertEqual(code, 0)
        self.assertIn("allowed_domains.or[0] domain in [corp.example]: matched", out)
        code, out, _ = self.check(self.path, "https://legacy.test/", "--user", "b",
                                  "--email", "bob@example.org")
        self.assertEqual(code, 1)
        self.assertIn("the person sees: You are signed in as bob@example.org, but this "
                      "route does not allow you in.", out)
        code, out, _ = self.check(self.path, "https://legacy.test/")
        self.assertEqual(code, 1)
        self.assertIn("the person sees: sign-in required", out)

    def test_allow_fields_beside_a_policy(self) -> None:
        """The field is one more allow rule; the policy's deny rules hold for it too."""
        code, out, _ = self.check(self.path, "https://mixed.test/", "--user", "u", "--email",
                                  "u@example.com")
        self.assertEqual(code, 0)
        self.assertIn('  allowed_domains is the rule {"allow": {"or": [{"domain": {"in": '
                      '["example.com"]}}]}}', out)
        self.assertIn("decision: allowed by allowed_domains.or[0] domain in [example.com]: "
                      "matched", out)
        code, out, _ = self.check(self.path, "https://mixed.test/", "--user", "u", "--email",
                                  "u@example.com", "--method", "POST")
        self.assertEqual(code, 1)
        self.assertIn("decision: denied by deny[0].or[0] http_method is POST: matched", out)
        self.assertIn("  allowed_domains: hit", out)

    def test_refused_addresses_are_not_used(self) -> None:
        code, out, _ = self.check(self.path, "https://legacy.test/", "--user", "m",
                                  "--email", "mallory@evil.example@corp.example")
        self.assertEqual(code, 1)
        self.assertIn("e-mail mallory@evil.example@corp.example (not used: your provider "
                      "sent an e-mail address that is not one valid address)", out)
        self.assertIn("the person sees: This route needs your e-mail address, and your "
                      "provider sent an e-mail address that is not one valid address "
                      "(mallory@evil.example@corp.example).", out)
        code, doc = self.check_json(self.path, "https://legacy.test/", "--user", "b",
                                    "--email", "bob@corp.example",
                                    "--claim", "email_verified=false")
        self.assertEqual(code, 1)
        self.assertEqual((doc["identity"]["email_used"], doc["identity"]["email_refused"]),
                         (False, "email-unverified"))
        self.assertIn("your provider has not verified this address",
                      doc["decision"]["message"])
        # idp_allow_unverified_email uses it anyway
        path = self.config(CRITERIA_ROUTES, idp_allow_unverified_email=True)
        code, _, _ = self.check(path, "https://legacy.test/", "--user", "b", "--email",
                                "bob@corp.example", "--claim", "email_verified=false")
        self.assertEqual(code, 0)

    def test_public_route(self) -> None:
        code, out, _ = self.check(self.path, "https://public.test/anything")
        self.assertEqual(code, 0)
        self.assertIn("decision: public: no decision", out)
        self.assertNotIn("trace:", out)
        code, doc = self.check_json(self.path, "https://public.test/")
        self.assertEqual((code, doc["decision"]["public"], doc["trace"]), (0, True, None))

    def test_redirect_route(self) -> None:
        code, out, _ = self.check(self.path, "https://old.test/x")
        self.assertEqual(code, 0)
        self.assertIn("decision: redirect: no decision", out)

    def test_tcp_route(self) -> None:
        code, out, _ = self.check(self.path, "tcp+https://DB.test:5432", "--email",
                                  "a@example.com")
        self.assertEqual(code, 0, out)
        self.assertIn("route: policy[21] tcp+https://db.test:5432", out)
        self.assertIn("request: CONNECT tcp+https://DB.test:5432 from", out)
        self.assertIn("allow[0].and[1] http_method is CONNECT: hit", out)
        code, doc = self.check_json(self.path, "tcp+https://db.test:5432/", "--email",
                                    "a@example.org")
        self.assertEqual(code, 1)
        self.assertEqual((doc["request"]["method"], doc["request"]["path"],
                          doc["route"]["tcp"]), ("CONNECT", "", True))

    def test_tcp_mistakes(self) -> None:
        for url, args, words in (
                ("tcp+https://db.test:5432", ["--method", "GET"], "CONNECT only"),
                ("tcp+https://db.test:5433", [], "no tcp+https route's host:port"),
                ("tcp+https://accept.test:443", [], "not a TCP route"),
                ("tcp+https://db.test", [], "tcp+https://HOST:PORT"),
                ("tcp+https://db.test:5432/x", [], "no path"),
                ("https://db.test:5432/", [], "is a TCP route, reached with CONNECT only: "
                                              "check --url tcp+https://db.test:5432"),
                ("https://accept.test/", ["--method", "CONNECT"], "for TCP routes")):
            code, out, err = self.check(self.path, url, *args)
            self.assertEqual((code, out), (2, ""), url)
            self.assertIn(words, err)


class ExitStatusTests(CliCase):
    def setUp(self) -> None:
        self.path = self.config(CRITERIA_ROUTES)

    def assertNotChecked(self, argv: list[str], words: str) -> None:
        code, out, err = self.run_cli("policy", "check", *argv)
        self.assertEqual((code, out), (2, ""), err)
        self.assertIn(words, err)

    def test_no_route(self) -> None:
        config = ["--config", self.path, "--url"]
        self.assertNotChecked([*config, "https://unknown.test/"],
                              "no route serves https://unknown.test/: no route has the host "
                              "unknown.test")
        self.assertNotChecked([*config, "https://prefixed.test/web/"],
                              "the routes of prefixed.test match no path /web/")
        self.assertNotChecked([*config, "https://accept.test/ping"], "health check")
        self.assertNotChecked([*config, "http://accept.test:8443/"], "no route has the host")
        code, _, _ = self.check(self.path, "https://prefixed.test/api/v1")
        self.assertEqual(code, 0)
        code, _, _ = self.check(self.path, "https://ACCEPT.test.:443/")
        self.assertEqual(code, 0)

    def test_bad_arguments(self) -> None:
        config = ["--config", self.path, "--url"]
        self.assertNotChecked([*config, "ftp://accept.test/"], "expected an http://")
        self.assertNotChecked([*config, "https://u@accept.test/"], "no valid host")
        self.assertNotChecked([*config, "https://accept.test/a%2fb"], "refuses this request")
        self.assertNotChecked([*config, "https://accept.test/", "--method", "GE T"],
                              "not an HTTP method")
        self.assertNotChecked([*config, "https://accept.test/", "--claim", "novalue"],
                              "--claim novalue: write NAME=VALUE")
        self.assertNotChecked([*config, "https://accept.test/", "--claim", "a=1", "--claim",
                               "a.b=2"], "a is a value")
        self.assertNotChecked([*config, "https://accept.test/", "--claim", "email=x"],
                              "with --email")
        self.assertNotChecked([*config, "https://accept.test/", "--client-cert",
                               self.path], "no PEM certificate")
        self.assertNotChecked([*config, "https://accept.test/", "--client-cert",
                               self.path + ".missing"], "--client-cert")
        self.assertRaises(SystemExit, self.run_cli, "policy", "check", "--config", self.path)

    def test_missing_and_bad_configuration(self) -> None:
        self.assertNotChecked(["--config", self.path + ".nope", "--url", "https://a.test/"],
                              "no such file")
        bad = self.config([route("a.test", [deny({"source_ip": ["203.0.113.0/33"]})]),
                           route("b.test", [allow({"colour": "blue"})])])
        code, out, err = self.run_cli("policy", "check", "--config", bad, "--url",
                                      "https://a.test/")
        self.assertEqual((code, out), (2, ""))
        self.assertIn(f"invalid configuration in {bad} (2 problems):", err)
        self.assertIn("  policy[0].policy[0].deny.or[0].source_ip", err)
        self.assertIn("  policy[1].policy[0].allow.or[0].colour", err)

    def test_policy_without_subcommand(self) -> None:
        code, _, err = self.run_cli("policy")
        self.assertEqual(code, 2)
        self.assertIn("check", err)


def certificate(subject: str, issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]
                | None = None, emails: tuple[str, ...] = ()
                ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA (no ``issuer``) or a client certificate it issues, with e-mail SANs."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    signer, issuer_name = (key, name) if issuer is None else (issuer[0], issuer[1].subject)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True))
    if emails:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.RFC822Name(e) for e in emails] + [x509.DNSName("client.example.com")]),
            critical=False)
    return key, builder.sign(signer, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class ClientCertificateTests(CliCase):
    def setUp(self) -> None:
        ca = certificate("test CA")
        _, self.client = certificate("alice", ca, ("alice@example.com",))
        _, self.stranger = certificate("mallory", certificate("other CA"),
                                       ("alice@example.com",))
        directory = tempfile.mkdtemp(prefix="gw-policy-check-")
        self.addCleanup(shutil.rmtree, directory, True)
        ca_file = write(directory, "ca.pem", pem(ca[1]))
        self.cert_file = write(directory, "alice.pem", pem(self.client))
        self.stranger_file = write(directory, "mallory.pem", pem(self.stranger))
        fingerprint = self.client.fingerprint(hashes.SHA256()).hex()
        by_san = [allow({"client_certificate": {"san_email": {"is": "alice@example.com"}}})]
        self.path = self.config([
            route("mtls.test", by_san, tls_downstream_client_ca_file=ca_file),
            route("plain.test", by_san),
            route("pinned.test", [allow({"client_certificate": {"fingerprint": fingerprint}})],
                  tls_downstream_client_ca_file=ca_file),
        ])

    def test_a_verified_certificate_is_used(self) -> None:
        code, out, _ = self.check(self.path, "https://mtls.test/", "--client-cert",
                                  self.cert_file)
        self.assertEqual(code, 0, out)
        self.assertIn("allowed by allow[0].or[0] client_certificate san_email: matched", out)
        self.assertIn("note: the client certificate is verified against the route's client "
                      "CA: the daemon uses it", out)
        code, doc = self.check_json(self.path, "https://pinned.test/", "--client-cert",
                                    self.cert_file)
        self.assertEqual(code, 0)
        cert = doc["client_certificate"]
        self.assertEqual(cert["fingerprint"], self.client.fingerprint(hashes.SHA256()).hex())
        self.assertEqual((cert["san_email"], cert["san_dns"], cert["used"], cert["verified"]),
                         (["alice@example.com"], ["client.example.com"], True, True))

    def test_without_a_client_ca_the_daemon_does_not_consider_it(self) -> None:
        code, out, _ = self.check(self.path, "https://plain.test/", "--client-cert",
                                  self.cert_file)
        self.assertEqual(code, 1)
        self.assertIn("note: the client certificate is not considered: this route has no "
                      "client CA", out)
        self.assertIn("client_certificate san_email: miss", out)
        _, doc = self.check_json(self.path, "https://plain.test/", "--client-cert",
                                 self.cert_file)
        self.assertFalse(doc["client_certificate"]["used"])

    def test_the_route_requires_a_verified_certificate(self) -> None:
        code, out, _ = self.check(self.path, "https://mtls.test/", "--client-cert",
                                  self.stranger_file)
        self.assertIn("the route's client CA refuses the client certificate", out)
        self.assertIn("the daemon answers 495 before any decision", out)
        self.assertEqual(code, 1)  # refused (495) whatever the policy says, as the daemon
        code, out, _ = self.check(self.path, "https://mtls.test/")
        self.assertEqual(code, 1)
        self.assertIn("this route requires a client certificate verified against its CA", out)
        code, out, _ = self.check(self.path, "https://pinned.test/", "--client-cert",
                                  self.stranger_file)
        self.assertEqual(code, 1)
        self.assertIn("client_certificate fingerprint: miss", out)


POLICY_ROUTES = [
    route("app.test", [
        allow({"email": {"is": "alice@example.com"}}, {"groups": {"has": "staff"}}),
        allow({"domain": "example.org"}, {"http_path": {"starts_with": "/public/"}}, op="and"),
        deny({"http_method": {"in": ["DELETE"]}}, {"source_ip": ["198.51.100.0/24"]}),
        deny({"time_of_day": {"after": "22:00", "before": "22:10"}}),
    ], pass_identity_headers=True),
    route("late.test", [allow(SIGNED_IN), deny({"time_of_day": {
        "after": "23:10", "before": "23:20", "timezone": "Europe/Berlin"}})]),
    route("legacy.test", allowed_users=["alice@example.com"], allowed_domains=["example.org"]),
]
ALICE: dict[str, Any] = {"sub": "alice-id", "email": "alice@example.com", "groups": ["staff"]}
CAROL: dict[str, Any] = {"sub": "carol-id", "email": "carol@example.org"}
DAVE: dict[str, Any] = {"sub": "dave-id", "email": "dave@example.net", "groups": ["staff", "ops"],
        "org": {"unit": "research"}}
MALLORY: dict[str, Any] = {"sub": "mallory-id", "email": "mallory@evil.example@example.org"}
UNVERIFIED: dict[str, Any] = {"sub": "erin-id", "email": "erin@example.org",
                              "email_verified": False}


def cli_args(claims: dict[str, Any] | None) -> list[str]:
    """The command's arguments for someone signed in with these claims."""
    if claims is None:
        return []
    args = ["--user", claims["sub"], "--email", claims["email"]]
    if "groups" in claims:
        args += ["--groups", ",".join(claims["groups"])]
    flat = {"org.unit": claims["org"]["unit"]} if "org" in claims else {}
    if "email_verified" in claims:
        flat["email_verified"] = str(claims["email_verified"]).lower()
    for name, value in flat.items():
        args += ["--claim", f"{name}={value}"]
    return args


class DeciderAgreementTests(IdentityCase, CliCase):
    """The command's verdict, rule and sentence are the Decider's on the same requests."""

    def setUp(self) -> None:
        super().setUp()
        from gateway.authenticate.identity import Identity

        self.config_path = self.config(POLICY_ROUTES, idp_service_account=GROUPS_FROM_CLAIM,
                                       authenticate_service_url="https://auth.test")
        self.snapshot = load_snapshot(self.config_path, {})
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        self.identity.clients.clients.pop("default", None)

    def decide(self, host: str, claims: dict[str, Any] | None, method: str, path: str,
               ip: str) -> Allow | Reply:
        headers = [JSON]
        if claims is not None:
            headers.append(self.cookie(self.session(claims)))
        [route_] = [r for r in self.snapshot.routes if r.host == host]
        decision = self.identity.decider.authorize(
            RequestInfo(method.encode(), "https", host, path, b"", headers, ip), route_)
        assert isinstance(decision, (Allow, Reply)), decision
        return decision

    def test_agreement(self) -> None:
        at = dt.datetime.fromtimestamp(NOW, dt.UTC).isoformat()  # 2023-11-14 22:13:20 UTC
        rows: list[tuple[str, dict[str, Any] | None, str, str, str]] = [
            ("app.test", ALICE, "GET", "/", "192.0.2.1"),
            ("app.test", ALICE, "DELETE", "/", "192.0.2.1"),
            ("app.test", ALICE, "GET", "/", "198.51.100.7"),
            ("app.test", DAVE, "GET", "/x", "192.0.2.1"),
            ("app.test", CAROL, "GET", "/public/a", "192.0.2.1"),
            ("app.test", CAROL, "GET", "/private", "192.0.2.1"),
            ("app.test", MALLORY, "GET", "/public/a", "192.0.2.1"),
            ("app.test", None, "GET", "/", "192.0.2.1"),
            ("late.test", CAROL, "GET", "/", "192.0.2.1"),  # 23:13:20 in Berlin: closed
            ("legacy.test", ALICE, "GET", "/", "192.0.2.1"),
            ("legacy.test", CAROL, "POST", "/", "192.0.2.1"),
            ("legacy.test", DAVE, "GET", "/", "192.0.2.1"),
            ("legacy.test", MALLORY, "GET", "/", "192.0.2.1"),
            ("legacy.test", UNVERIFIED, "GET", "/", "192.0.2.1"),
            ("legacy.test", None, "GET", "/", "192.0.2.1"),
        ]
        outcomes = set()
        for host, claims, method, path, ip in rows:
            where = f"{host} {method} {path} {ip} {claims and claims['sub']}"
            decision = self.decide(host, claims, method, path, ip)
            code, doc = self.check_json(self.config_path, f"https://{host}{path}", "--method",
                                        method, "--ip", ip, "--at", at, *cli_args(claims))
            verdict = doc["decision"]
            self.assertEqual(code, 0 if isinstance(decision, Allow) else 1, where)
            if isinstance(decision, Allow):
                outcomes.add("allowed")
                if host != "legacy.test":  # evaluate's reasons there; the same verdict
                    self.assertEqual(decision.reason, f"{verdict['code']} {verdict['text']}",
                                     where)
            elif decision.status in (302, 401):
                outcomes.add("sign in")
                self.assertTrue(verdict["sign_in_required"], where)
            else:
                outcomes.add("refused")
                self.assertEqual(decision.status, 403, where)
                self.assertEqual(json.loads(decision.body)["error"], verdict["message"], where)
                if host != "legacy.test":
                    self.assertIn(f"{verdict['code']} {verdict['text']}", decision.reason,
                                  where)
        self.assertEqual(outcomes, {"allowed", "sign in", "refused"})
