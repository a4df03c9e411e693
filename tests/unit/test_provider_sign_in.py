"""Several interactive identity providers, in process: which providers a route's sign-in
offers (sealed in its link), the chooser and ``?provider=``, a session of a provider the
route does not accept (no one here: let in only as anyone, else a page offering the
accepted ones), the state naming the provider, and the RFC 9207 ``iss`` check."""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.internet.defer import ensureDeferred

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.oidc import Provider
from gateway.authenticate.targets import CSRF_COOKIE, PROVIDER_COOKIE, SIGN_IN
from gateway.authorize.hook import Allow, Reply
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.ssh_records import start_sign_in
from gateway.sessions.model import Session

from .test_identity import (
    APP,
    AUTH,
    BROWSER,
    IdentityCase,
    location,
    query_of,
    request,
    snapshot,
)

PROVIDERS = [
    {"id": "corp", "name": "Corp account", "issuer": "https://corp.example",
     "client_id": "gw", "client_secret": "s1"},
    {"id": "partners", "name": "Partner account", "issuer": "https://partners.example",
     "client_id": "gw", "client_secret": "s2"},
]
JSON = (b"Accept", b"application/json")
SAME_ORIGIN = (b"sec-fetch-site", b"same-origin")


def routes() -> list[dict[str, Any]]:
    base = {"to": "http://127.0.0.1:9", "allow_any_authenticated_user": True}
    return [
        {"from": f"https://{APP}", **base},  # every interactive provider
        {"from": "https://corp.test", **base, "identity_providers": ["corp"]},
        {"from": "https://open.test", "to": "http://127.0.0.1:9",
         "identity_providers": ["corp"], "policy": [{"allow": {"or": [{"accept": True}]}}]},
    ]


class Fake(Provider):
    """A provider whose discovery document is known (no network)."""

    def __init__(self, issuer: str, iss_supported: bool = True) -> None:
        super().__init__(None, issuer, "gw", "s", ("openid",), {}, f"https://{AUTH}/cb")
        self._metadata = {"issuer": issuer, "authorization_endpoint": f"{issuer}/auth",
                          "token_endpoint": f"{issuer}/token", "jwks_uri": f"{issuer}/jwks",
                          "authorization_response_iss_parameter_supported": iss_supported}


class ProviderCase(IdentityCase):
    def setUp(self) -> None:
        super().setUp()
        self.snapshot = snapshot(identity_providers=PROVIDERS, policy=routes())
        self.identity = Identity(None, self.snapshot, self.store, self.signer, self.clock)
        for name in ("corp", "partners"):
            self.identity.clients.clients[name] = Fake(f"https://{name}.example")
        self.endpoints = Endpoints(self.identity)
        self.app, self.corp_only, self.open = self.snapshot.routes

    def of(self, provider: str) -> Session:
        return replace(self.session(), provider=provider)

    def decide(self, route: Any, *headers: tuple[bytes, bytes]) -> Any:
        return self.identity.decider.authorize(
            request(headers=list(headers) or [BROWSER]), route)

    def start(self, link: str, *headers: tuple[bytes, bytes]) -> Any:
        query = link.split("?", 1)[1]
        result = self.endpoints.internal(request(SIGN_IN, "?" + query, host=AUTH,
                                                 headers=[BROWSER, *headers]))
        return self.successResultOf(result) if not isinstance(result, Reply) else result


class AcceptedTests(ProviderCase):
    def test_accepted_per_route(self) -> None:
        """The implicit provider of the idp_* settings comes first, then the list."""
        self.assertEqual(self.identity.flow.accepted(self.app),
                         ("default", "corp", "partners"))
        self.assertEqual(self.identity.flow.accepted(self.corp_only), ("corp",))

    def test_the_sign_in_link_carries_the_routes_providers(self) -> None:
        link = location(self.decide(self.corp_only))
        payload = self.identity.shared.open("sign-in", query_of(link)["gateway_redirect"],
                                            self.clock.now)
        assert payload is not None
        self.assertEqual(payload["providers"], ["corp"])
        everyone = location(self.decide(self.app))
        payload = self.identity.shared.open("sign-in", query_of(everyone)["gateway_redirect"],
                                            self.clock.now)
        assert payload is not None
        self.assertNotIn("providers", payload)  # (all of them: the link stays short)


class OtherProviderTests(ProviderCase):
    def test_a_session_of_another_provider_gets_the_page(self) -> None:
        session = self.of("partners")
        self.store.put(session)
        decision = self.decide(self.corp_only, BROWSER, self.cookie(session))
        self.assertIsInstance(decision, Reply)
        self.assertEqual(decision.status, 403)
        self.assertEqual(decision.reason, "provider-not-accepted: partners")
        assert decision.caller is not None
        self.assertEqual(decision.caller.provider, "partners")
        body = decision.body.decode()
        self.assertIn("does not accept sign-ins through Partner account", body)
        self.assertIn("Sign in with Corp account", body)
        self.assertNotIn("Sign in with Partner account", body)
        self.assertIn("provider=corp", body)
        as_json = self.decide(self.corp_only, JSON, self.cookie(session))
        self.assertEqual((as_json.status, as_json.headers[0][1]),
                         (403, b"application/json"))

    def test_the_same_session_is_allowed_where_its_provider_is(self) -> None:
        session = self.of("partners")
        self.store.put(session)
        allowed = self.decide(self.app, BROWSER, self.cookie(session))
        self.assertIsInstance(allowed, Allow)
        assert allowed.caller is not None
        self.assertEqual(allowed.caller.provider, "partners")

    def test_where_anyone_may_pass_it_passes_as_no_one(self) -> None:
        session = self.of("partners")
        self.store.put(session)
        allowed = self.decide(self.open, BROWSER, self.cookie(session))
        self.assertIsInstance(allowed, Allow)
        self.assertIsNone(allowed.caller)  # nobody: neither a user nor a provider

    def test_a_provider_gone_from_the_configuration_is_not_accepted(self) -> None:
        session = self.of("left")
        self.store.put(session)
        decision = self.decide(self.app, BROWSER, self.cookie(session))
        self.assertEqual(decision.status, 403)


class StartTests(ProviderCase):
    def test_several_offered_is_the_chooser(self) -> None:
        page = self.start(location(self.decide(self.app)))
        self.assertEqual((page.status, page.reason), (200, "choose-provider"))
        body = page.body.decode()
        for name in ("Corp account", "Partner account", "default"):
            self.assertIn(name, body)
        self.assertNotIn(APP, body)  # nothing of the route

    def test_one_offered_goes_there(self) -> None:
        answer = self.start(location(self.decide(self.corp_only)))
        self.assertTrue(location(answer).startswith("https://corp.example/auth?"))
        self.assertFalse(any(v.startswith(PROVIDER_COOKIE.encode())
                             for k, v in answer.headers if k == b"set-cookie"))

    def remembered(self, answer: Reply) -> list[bytes]:
        return [v for k, v in answer.headers if k == b"set-cookie"
                and v.startswith(PROVIDER_COOKIE.encode() + b"=")]

    def test_asked_for_and_remembered(self) -> None:
        link = location(self.decide(self.app))
        page = self.start(link)
        picked = re.search(r'href="([^"]*provider=partners[^"]*)"', page.body.decode())
        assert picked is not None, page.body
        answer = self.start(html.unescape(picked.group(1)), SAME_ORIGIN)
        self.assertTrue(location(answer).startswith("https://partners.example/auth?"))
        (cookie,) = self.remembered(answer)
        self.assertTrue(cookie.startswith(PROVIDER_COOKIE.encode() + b"=partners"))
        self.assertIn(f"Max-Age={30 * 86400}".encode(), cookie)
        again = self.start(link, (b"cookie", f"{PROVIDER_COOKIE}=partners".encode()))
        self.assertTrue(location(again).startswith("https://partners.example/auth?"))
        # a remembered provider the route does not offer is not used
        corp = self.start(location(self.decide(self.corp_only)),
                          (b"cookie", f"{PROVIDER_COOKIE}=partners".encode()))
        self.assertTrue(location(corp).startswith("https://corp.example/auth?"))

    def test_only_a_pick_on_the_chooser_page_is_remembered(self) -> None:
        """Found in review (issue 42): any ``?provider=X`` sign-in (a GET link anyone
        can make, a route host's ``/.gateway/sign_in?provider=X`` included) set the
        remembered-provider cookie for 365 days, so a link fixed a victim's provider.
        Now only the chooser page's own links, followed from that page
        (``Sec-Fetch-Site: same-origin``), are remembered, for 30 days."""
        link = location(self.decide(self.app))
        for extra, headers in (("", ()), ("&chosen=1", ()),
                               ("&chosen=1", ((b"sec-fetch-site", b"cross-site"),)),
                               ("&chosen=1", ((b"sec-fetch-site", b"same-site"),)),
                               ("&chosen=1", ((b"sec-fetch-site", b"none"),)),
                               ("", (SAME_ORIGIN,))):
            answer = self.start(link + "&provider=partners" + extra, *headers)
            self.assertTrue(location(answer).startswith("https://partners.example/auth?"))
            self.assertEqual(self.remembered(answer), [], (extra, headers))
        via_route_host = self.endpoints.internal(request(
            SIGN_IN, "?provider=partners&uri=/", headers=[BROWSER]))
        assert isinstance(via_route_host, Reply)
        answer = self.start(location(via_route_host) + "&chosen=1",
                            (b"sec-fetch-site", b"cross-site"))
        self.assertEqual(self.remembered(answer), [])

    def test_a_provider_not_offered_is_refused(self) -> None:
        link = location(self.decide(self.corp_only))
        for asked in ("partners", "nope"):
            answer = self.start(link + f"&provider={asked}")
            self.assertEqual((answer.status, answer.reason), (400, "provider-not-offered"))

    def test_the_state_names_the_provider(self) -> None:
        answer = self.start(location(self.decide(self.app)) + "&provider=partners")
        state = query_of(location(answer))["state"]
        opened = self.identity.shared.open("state", state, self.clock.now)
        assert opened is not None
        self.assertEqual(opened["provider"], "partners")


class CallbackIssuerTests(ProviderCase):
    def callback(self, iss: str | None) -> Reply:
        state = self.identity.shared.seal("state", {
            "uri": "https://app.test/", "nonce": "n", "verifier": "v", "provider": "corp",
            "csrf": hashlib.sha256(b"c").hexdigest()}, self.clock.now + 60)
        params = {"code": "c", "state": state, **({"iss": iss} if iss is not None else {})}
        result = self.endpoints.internal(request(
            self.snapshot.options.authenticate_callback_path, "?" + urlencode(params),
            host=AUTH, headers=[BROWSER, (b"cookie", f"{CSRF_COOKIE}=c".encode())]))
        decision = self.successResultOf(result)
        assert isinstance(decision, Reply)
        return decision

    def test_another_providers_iss_is_refused_before_the_code_goes_anywhere(self) -> None:
        exchanged: list[str] = []
        self.patch(self.identity.clients.clients["corp"], "exchange",
                   lambda code, *a: exchanged.append(code))
        for iss in ("https://partners.example", None):
            refused = self.callback(iss)
            self.assertEqual((refused.status, refused.reason), (400, "issuer-mismatch"))
        self.assertEqual(exchanged, [])

    def test_iss_rules(self) -> None:
        corp = Fake("https://corp.example")
        self.assertEqual(corp.response_issuer_problem("https://corp.example"), "")
        self.assertEqual(corp.response_issuer_problem("https://corp.example/"), "")
        self.assertIn("not this provider's", corp.response_issuer_problem("https://x"))
        self.assertIn("no iss", corp.response_issuer_problem(None))
        quiet = Fake("https://corp.example", iss_supported=False)
        self.assertEqual(quiet.response_issuer_problem(None), "")
        self.assertIn("not this provider's", quiet.response_issuer_problem("https://x"))


class RouteHostLinkTests(ProviderCase):
    """``/.gateway/sign_in?provider=ID`` on a route host: a link that can be given to
    people, straight to that provider, back to a path of this host."""

    def link(self, query: str) -> Reply:
        decision = self.endpoints.internal(request(SIGN_IN, query, headers=[BROWSER]))
        assert isinstance(decision, Reply), decision
        return decision

    def test_straight_to_the_provider_and_back_here(self) -> None:
        first = self.link("?provider=partners&uri=/docs/?a=1")
        where = location(first)
        self.assertTrue(where.startswith(f"https://{AUTH}{SIGN_IN}?"), where)
        self.assertEqual(query_of(where)["provider"], "partners")
        payload = self.identity.shared.open(
            "sign-in", query_of(where)["gateway_redirect"], self.clock.now)
        assert payload is not None
        self.assertEqual(payload["uri"], f"https://{APP}/docs/?a=1")
        answer = self.start(where)
        self.assertTrue(location(answer).startswith("https://partners.example/auth?"))

    def test_only_a_provider_of_this_gateway_and_a_path_of_this_host(self) -> None:
        for query in ("?provider=nope", "?provider=", "?provider=corp&uri=//evil.test/",
                      "?provider=corp&uri=https://evil.test/", "?provider=corp&uri=/\\\\x"):
            refused = self.link(query)
            self.assertEqual((refused.status, refused.reason), (400, "bad-sign-in-link"),
                             query)


class SshSignInTests(ProviderCase):
    """An SSH sign-in (``/.gateway/ssh/TICKET``) offers the providers the ticket's
    ssh:// route accepts."""

    def test_the_routes_providers_are_offered(self) -> None:
        key = ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption()).decode()
        ssh_route = {"from": "ssh://db", "to": "ssh://127.0.0.1:2200",
                     "ssh_upstream_host_key_tofu": True, "allow_any_authenticated_user": True,
                     "identity_providers": ["partners"]}
        snap = snapshot(identity_providers=PROVIDERS, policy=[*routes(), ssh_route],
                        ssh_address="127.0.0.1:2222", ssh_host_keys=[key],
                        ssh_user_ca_key=key)
        identity = Identity(None, snap, self.store, self.signer, self.clock)
        records = MemoryRecordStore(self.clock)
        endpoints = Endpoints(identity, snap.routes, records)
        pending = self.successResultOf(ensureDeferred(start_sign_in(
            records, "SHA256:abc", "127.0.0.1:5000", "db", "root", self.clock())))

        def sign_in_at(ticket: str) -> dict[str, Any]:
            result = endpoints.internal(request(f"/.gateway/ssh/{ticket}", host=AUTH,
                                                headers=[BROWSER]))
            decision = self.successResultOf(result)
            payload = identity.shared.open(
                "sign-in", query_of(location(decision))["gateway_redirect"], self.clock.now)
            assert payload is not None
            return payload

        self.assertEqual(sign_in_at(pending.ticket)["providers"], ["partners"])
        self.assertNotIn("providers", sign_in_at("unknown-ticket"))  # (every one)
