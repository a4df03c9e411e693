"""The pure pieces of the MCP authorization server: PKCE S256 (plain and missing
refused), the authorization request's two stages (page before the redirect URI is
checked, redirect after), resource identifiers and the route a ``resource`` names,
the metadata documents the MCP text requires, the challenge header, token shapes and
records."""

from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import parse_qs, urlsplit

from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp_oauth import authorize_request as ar
from gateway.mcp_oauth import metadata, pkce, resources, tokens

from .config.helpers import IDENTITY, base_config, load

VERIFIER = "verifier-of-the-test-client." + "x" * 20
# BASE64URL(SHA256(VERIFIER)) without padding, made apart from the code under test
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()
                                     ).rstrip(b"=").decode()


def snapshot_routes() -> tuple:  # type: ignore[type-arg]
    policy = [
        {"from": "https://mcp.example.com", "prefix": "/tickets", "to": "http://127.0.0.1:9",
         "mcp": {}, "allow_any_authenticated_user": True},
        {"from": "https://mcp.example.com", "path": "/wiki/mcp/", "to": "http://127.0.0.1:9",
         "mcp": {}, "allow_any_authenticated_user": True},
        {"from": "https://mcp.example.com", "to": "http://127.0.0.1:9",
         "allow_any_authenticated_user": True},
        {"from": "https://root.example.com:8443", "to": "http://127.0.0.1:9", "mcp": {},
         "allow_any_authenticated_user": True},
    ]
    return load(base_config(**IDENTITY, policy=policy)).routes


class PkceTests(SynchronousTestCase):
    def test_s256(self) -> None:
        self.assertEqual(pkce.s256(VERIFIER), CHALLENGE)
        self.assertTrue(pkce.verified(VERIFIER, CHALLENGE))

    def test_wrong_or_malformed_verifier(self) -> None:
        self.assertFalse(pkce.verified(VERIFIER[:-1] + "T", CHALLENGE))
        self.assertFalse(pkce.verified("short", pkce.s256("short")))
        self.assertFalse(pkce.verified(CHALLENGE, CHALLENGE))  # plain: verifier == challenge
        bad = VERIFIER[:-1] + "!"
        self.assertFalse(pkce.verified(bad, pkce.s256(bad)))

    def test_plain_and_missing_refused(self) -> None:
        self.assertEqual(pkce.challenge_problem(CHALLENGE, "S256"), "")
        self.assertIn("plain is refused", pkce.challenge_problem(CHALLENGE, ""))
        self.assertIn("not supported", pkce.challenge_problem(CHALLENGE, "plain"))
        self.assertIn("required", pkce.challenge_problem("", "S256"))
        self.assertIn("43 base64url", pkce.challenge_problem("x" * 42, "S256"))
        self.assertIn("not supported", pkce.challenge_problem(CHALLENGE, "s256"))


def params(**extra: str) -> dict[str, str]:
    base = {"client_id": "https://client.example/c.json",
            "redirect_uri": "http://127.0.0.1:7777/cb", "response_type": "code",
            "code_challenge": CHALLENGE, "code_challenge_method": "S256",
            "resource": "https://MCP.example.com/tickets/", "state": "s1"}
    base.update(extra)
    return {k: v for k, v in base.items() if v != "-"}


class AuthorizeRequestTests(SynchronousTestCase):
    def test_client_stage_pages(self) -> None:
        self.assertIsNone(ar.client_stage(params(), ()))
        self.assertEqual(ar.client_stage(params(client_id="-"), ()).reason,  # type: ignore[union-attr]
                         "mcp-authorize-no-client")
        self.assertEqual(ar.client_stage(params(redirect_uri="-"), ()).reason,  # type: ignore[union-attr]
                         "mcp-authorize-no-redirect-uri")
        self.assertEqual(ar.client_stage(params(), ("redirect_uri",)).reason,  # type: ignore[union-attr]
                         "mcp-authorize-duplicate")

    def test_duplicates_found(self) -> None:
        got, twice = ar.request_params(b"client_id=a&resource=x&resource=y&extra=1&extra=2")
        self.assertEqual(twice, ("resource",))
        self.assertEqual(got["client_id"], "a")

    def test_request_stage(self) -> None:
        ask = ar.request_stage(params(scope="mcp offline_access other"), ())
        assert isinstance(ask, ar.AuthorizeAsk)
        self.assertEqual(ask.resource, "https://mcp.example.com/tickets")
        self.assertEqual(ask.scope, "mcp offline_access")
        self.assertEqual(ar.request_stage(params(scope="-"), ()).scope, "mcp")  # type: ignore[union-attr]

    def test_request_stage_refusals(self) -> None:
        cases = {
            "response_type": (params(response_type="token"), "unsupported_response_type"),
            "no challenge": (params(code_challenge="-"), "invalid_request"),
            "plain": (params(code_challenge_method="plain"), "invalid_request"),
            "no method": (params(code_challenge_method="-"), "invalid_request"),
            "no resource": (params(resource="-"), "invalid_target"),
            "fragment": (params(resource="https://mcp.example.com/t#x"), "invalid_target"),
            "relative": (params(resource="mcp.example.com"), "invalid_target"),
            "long state": (params(state="s" * 1025), "invalid_request"),
        }
        for name, (given, error) in cases.items():
            got = ar.request_stage(given, ())
            self.assertIsInstance(got, ar.RedirectError, name)
            self.assertEqual(got[0], error, name)
        twice = ar.request_stage(params(), ("state",))
        self.assertEqual(twice, ar.RedirectError("invalid_request",
                                                 "state given more than once"))

    def test_responses_carry_state_and_iss(self) -> None:
        ask = ar.request_stage(params(redirect_uri="https://c.example/cb?keep=1"), ())
        assert isinstance(ask, ar.AuthorizeAsk)
        url = ar.code_response(ask, "gwmcp_ac_x", "https://mcp.example.com")
        got = parse_qs(urlsplit(url).query)
        self.assertEqual(got, {"keep": ["1"], "code": ["gwmcp_ac_x"], "state": ["s1"],
                               "iss": ["https://mcp.example.com"]})
        err = ar.error_response("http://127.0.0.1:1/cb", ar.RedirectError("access_denied",
                                "no"), "", "https://i")
        self.assertEqual(parse_qs(urlsplit(err).query),
                         {"error": ["access_denied"], "error_description": ["no"],
                          "iss": ["https://i"]})


class ResourceTests(SynchronousTestCase):
    def test_identifiers(self) -> None:
        tickets, wiki, _plain, root = snapshot_routes()
        host = "mcp.example.com"
        self.assertEqual(resources.resource_of(tickets, "https", host),
                         "https://mcp.example.com/tickets")
        self.assertEqual(resources.resource_of(wiki, "https", host),
                         "https://mcp.example.com/wiki/mcp")
        self.assertEqual(resources.metadata_url(tickets, "https", host),
                         "https://mcp.example.com/.well-known/oauth-protected-resource/tickets")
        self.assertEqual(resources.resource_of(root, "https", "root.example.com:8443"),
                         "https://root.example.com:8443")

    def test_route_named(self) -> None:
        tickets, wiki, plain, root = snapshot_routes()
        routes = (tickets, wiki, plain, root)
        host = "mcp.example.com"
        self.assertIs(resources.route_named(routes, "https", host,
                                            "HTTPS://MCP.EXAMPLE.COM/tickets/"), tickets)
        self.assertIs(resources.route_named(routes, "https", host,
                                            "https://mcp.example.com/wiki/mcp"), wiki)
        # a URL under a route's path names that route (the MCP endpoint itself)
        self.assertIs(resources.route_named(routes, "https", host,
                                            "https://mcp.example.com/tickets/x"), tickets)
        self.assertTrue(resources.within("https://H/t/mcp", "https://h/t"))
        self.assertFalse(resources.within("https://h/tx", "https://h/t"))
        # the non-MCP route on / is no resource; another host's route is not this one's
        for other in ("https://mcp.example.com", "https://mcp.example.com/ticketsx",
                      "https://root.example.com:8443", "http://mcp.example.com/tickets",
                      "https://mcp.example.com/tickets?x=1", ""):
            self.assertIsNone(resources.route_named(routes, "https", host, other), other)
        self.assertIs(resources.route_named(routes, "https", "root.example.com:8443",
                                            "https://root.example.com:8443/"), root)

    def test_metadata_path(self) -> None:
        tickets, wiki, plain, root = snapshot_routes()
        routes = (tickets, wiki, plain, root)
        host = "mcp.example.com"
        prm = resources.PRM_PATH
        self.assertIs(resources.route_of_metadata_path(routes, host, prm + "/tickets"),
                      tickets)
        self.assertIs(resources.route_of_metadata_path(routes, host, prm + "/wiki/mcp"), wiki)
        self.assertIsNone(resources.route_of_metadata_path(routes, host, prm))
        self.assertIsNone(resources.route_of_metadata_path(routes, host, prm + "/nope"))
        self.assertIs(resources.route_of_metadata_path(routes, "root.example.com:8443", prm),
                      root)


class MetadataTests(SynchronousTestCase):
    def test_protected_resource(self) -> None:
        doc = metadata.protected_resource("https://h/t", "https://h")
        self.assertEqual(doc, {"resource": "https://h/t", "authorization_servers": ["https://h"],
                               "scopes_supported": ["mcp"],
                               "bearer_methods_supported": ["header"]})

    def test_authorization_server(self) -> None:
        doc = metadata.authorization_server("https://h", registration=False)
        self.assertEqual(doc["issuer"], "https://h")
        self.assertEqual(doc["authorization_endpoint"], "https://h/.gateway/mcp/authorize")
        self.assertEqual(doc["token_endpoint"], "https://h/.gateway/mcp/token")
        self.assertEqual(doc["revocation_endpoint"], "https://h/.gateway/mcp/revoke")
        self.assertEqual(doc["code_challenge_methods_supported"], ["S256"])
        self.assertEqual(doc["response_types_supported"], ["code"])
        self.assertEqual(doc["grant_types_supported"], ["authorization_code", "refresh_token"])
        self.assertEqual(doc["token_endpoint_auth_methods_supported"], ["none"])
        self.assertIs(doc["client_id_metadata_document_supported"], True)
        self.assertIs(doc["authorization_response_iss_parameter_supported"], True)
        self.assertNotIn("registration_endpoint", doc)
        on = metadata.authorization_server("https://h", registration=True)
        self.assertEqual(on["registration_endpoint"], "https://h/.gateway/mcp/register")
        self.assertEqual(json.loads(metadata.as_json(on)), on)

    def test_challenge(self) -> None:
        self.assertEqual(metadata.challenge("https://h/.well-known/x"),
                         b'Bearer resource_metadata="https://h/.well-known/x", scope="mcp"')
        bad = metadata.challenge("https://h/m", error="invalid_token",
                                 description='say "no"')
        self.assertEqual(bad, b'Bearer resource_metadata="https://h/m", scope="mcp", '
                              b'error="invalid_token", error_description="say no"')


class TokenTests(SynchronousTestCase):
    def test_shape_and_hash(self) -> None:
        token = tokens.new_token(tokens.ACCESS_PREFIX)
        self.assertTrue(tokens.shaped(token, tokens.ACCESS_PREFIX))
        self.assertFalse(tokens.shaped(token, tokens.REFRESH_PREFIX))
        self.assertFalse(tokens.shaped(token + "x", tokens.ACCESS_PREFIX))
        self.assertEqual(len(token) - len(tokens.ACCESS_PREFIX), 43)  # 256 bits
        self.assertNotEqual(token, tokens.new_token(tokens.ACCESS_PREFIX))
        self.assertEqual(len(tokens.token_hash(token)), 64)
        self.assertNotIn(token[9:], tokens.token_hash(token))

    def test_records_round_trip(self) -> None:
        grant = tokens.Grant("g", "c", "https://h", "mcp", "sid", "default", "u", 1.0, 2.0,
                             "h")
        self.assertEqual(tokens.from_json(tokens.Grant, tokens.to_json(grant)), grant)
        consent = tokens.Consent("c", "Client", ("https://h/a",), 5.0, ("g1",))
        self.assertEqual(tokens.consents_from_json(tokens.consents_to_json({"c": consent})),
                         {"c": consent})
        self.assertIsNone(tokens.from_json(tokens.Grant, b"[]"))
        self.assertIsNone(tokens.from_json(tokens.Grant, b'{"id": "g"}'))
        self.assertIsNone(tokens.from_json(tokens.Grant, b"not json"))
