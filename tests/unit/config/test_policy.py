"""Policy routes: the reference's rules and the original product's test cases."""

from __future__ import annotations

import base64
import tempfile
from typing import Any

import trustme
from twisted.trial.unittest import SynchronousTestCase

from .helpers import IDENTITY, base_config, errors_of, load, write


def route_errors(**route: Any) -> list[str]:
    return errors_of(base_config(policy=[route], **IDENTITY))


def one_route(**route: Any) -> Any:
    return load(base_config(policy=[route], **IDENTITY)).routes[0]


TO = "http://127.0.0.1:9000"


class FromAndToTests(SynchronousTestCase):
    def test_valid_route(self) -> None:
        """A plain https from/to pair is valid (case 1)."""
        route = one_route(**{"from": "https://httpbin.corp.example",
                             "to": "https://httpbin.corp.notatld"})
        self.assertEqual((route.scheme, route.host, route.port), ("https", "httpbin.corp.example",
                                                                  None))
        self.assertEqual(route.to[0].host, "httpbin.corp.notatld")
        self.assertEqual(route.to[0].port, 443)

    def test_from_without_host_or_scheme(self) -> None:
        """A `from` lacking host or scheme is invalid (cases 3, 4)."""
        self.assertEqual(route_errors(**{"from": "https://", "to": TO}), [
            "policy[0].from: config: policy bad source url https:// url does not contain a "
            "valid hostname"])
        self.assertEqual(route_errors(**{"from": "httpbin.corp.example", "to": TO}), [
            "policy[0].from: config: policy bad source url httpbin.corp.example url does not "
            "contain a valid scheme"])

    def test_from_with_path(self) -> None:
        """A `from` with a path gives the reference's exact message (case 6)."""
        url = "https://httpbin.corp.example/some/path"
        self.assertEqual(route_errors(**{"from": url, "to": TO}), [
            f"policy[0].from: config: policy source url ({url}) contains a path, but it should "
            "be set using the path field instead"])
        self.assertEqual(len(load(base_config(policy=[{"from": "https://a.example/", "to": TO,
                         "allow_public_unauthenticated_access": True}])).routes), 1)

    def test_from_scheme_and_extras(self) -> None:
        """Only https, http and tcp+https sources; no query, fragment or credentials."""
        self.assertIn("scheme must be https", route_errors(**{"from": "ftp://a.example",
                                                              "to": TO})[0])
        self.assertIn("no query, fragment or credentials",
                      route_errors(**{"from": "https://u:p@a.example", "to": TO})[0])

    def test_to_errors(self) -> None:
        """`to` needs a scheme and a host name (cases 2, 5)."""
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": "https:///"}),
                         ["policy[0].to: https:///: endpoint hostname must be specified"])
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": "b.example"}),
                         ["policy[0].to: b.example: url scheme must be provided"])
        self.assertIn("unsupported scheme 'ftp'",
                      route_errors(**{"from": "https://a.example", "to": "ftp://b"})[0])
        self.assertIn("url list is empty", route_errors(**{"from": "https://a.example",
                                                           "to": []})[0])

    def test_weights(self) -> None:
        """Weights follow `,<n>`; all or none; never zero (cases 14-18)."""
        route = one_route(**{"from": "https://a.example", "to": [
            "https://srv-1.int.corp.com,1", "https://srv-2.int.corp.com,2",
            "http://10.0.1.1:8080,3", "http://localhost:8000,4"]})
        self.assertEqual([u.weight for u in route.to], [1, 2, 3, 4])
        self.assertEqual(route.to[2].url, "http://10.0.1.1:8080")
        self.assertEqual([u.weight for u in one_route(**{"from": "https://a.example",
                         "to": ["https://a", "https://b"]}).to], [None, None])
        self.assertEqual(route_errors(**{"from": "https://a.example",
                                         "to": ["https://a,1", "https://b"]}), [
            "policy[0].to: either no weights should be provided, or all endpoints must have "
            "non-zero weight specified"])
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": "http://a,0"}),
                         ["policy[0].to: http://a,0: zero load balancing weight not permitted"])
        v6 = one_route(**{"from": "https://a.example", "to": "http://[::FFFF:129.144.52.38]:8080,1"})
        self.assertEqual((v6.to[0].url, v6.to[0].weight), ("http://[::FFFF:129.144.52.38]:8080", 1))

    def test_to_string_or_list(self) -> None:
        """`to` may be a single string or a list (case 19)."""
        self.assertEqual(len(one_route(**{"from": "https://a.example", "to": "http://b"}).to), 1)
        self.assertEqual(len(one_route(**{"from": "https://a.example",
                                          "to": ["http://a", "http://b", "http://c"]}).to), 3)

    def test_tcp_pairing(self) -> None:
        """tcp+https routes need tcp:// upstreams with ports, and the reverse."""
        route = one_route(**{"from": "tcp+https://redis.example.com:6379",
                             "to": "tcp://127.0.0.1:6379"})
        self.assertTrue(route.tcp)
        self.assertIn("a tcp+https route must use a tcp:// upstream",
                      route_errors(**{"from": "tcp+https://r.example:6379", "to": TO})[0])
        self.assertIn("a tcp:// upstream needs a tcp+https:// route",
                      route_errors(**{"from": "https://r.example", "to": "tcp://a:1"})[0])
        self.assertIn("needs the port", route_errors(**{"from": "tcp+https://r.example",
                                                        "to": "tcp://a:1"})[0])
        self.assertIn("tcp:// upstream needs a port",
                      route_errors(**{"from": "tcp+https://r.example:1", "to": "tcp://a"})[0])

    def test_to_or_redirect(self) -> None:
        """Exactly one of `to` and `redirect` (case 13)."""
        self.assertEqual(route_errors(**{"from": "https://a.example"}),
                         ["policy[0]: policy should have either `to` or `redirect` defined"])
        self.assertIn("not both", route_errors(**{"from": "https://a.example", "to": TO,
                                                  "redirect": {"https_redirect": True}})[0])


class RuleTests(SynchronousTestCase):
    def test_public_with_allow_lists(self) -> None:
        """Public and any-user routes cannot carry allow-lists (cases 7, 8)."""
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": TO,
                                         "allow_public_unauthenticated_access": True,
                                         "allowed_users": ["test@domain.example"]}),
                         ["policy[0]: config: policy route marked as public but contains "
                          "whitelists"])
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": TO,
                                         "allow_any_authenticated_user": True,
                                         "allowed_domains": ["example.com"]}),
                         ["policy[0]: config: policy route marked accessible for any "
                          "authenticated user but contains whitelists"])

    def test_rewrite_exclusivity(self) -> None:
        """prefix_rewrite excludes regex_rewrite_pattern (case 12); host options exclude
        each other and preserve_host_header (rule 2)."""
        self.assertIn("policy[0]: config: only prefix_rewrite or regex_rewrite_pattern can be "
                      "specified, but not both",
                      route_errors(**{"from": "https://a.example", "to": TO, "prefix_rewrite": "/",
                                      "regex_rewrite_pattern": "^/(.*)$",
                                      "regex_rewrite_substitution": "/x/\\1"}))
        for extra in ({"host_rewrite": "b", "host_rewrite_header": "X-Host"},
                      {"host_rewrite": "b", "preserve_host_header": True},
                      {"host_rewrite_header": "X", "host_path_regex_rewrite_pattern": "^/(.+)$",
                       "host_path_regex_rewrite_substitution": "\\1"}):
            errors = route_errors(**{"from": "https://a.example", "to": TO, **extra})
            self.assertTrue(any("mutually exclusive" in e for e in errors), extra)

    def test_regex_pairs_and_compilation(self) -> None:
        """Patterns need substitutions and must be valid RE2 (lookarounds are not)."""
        self.assertIn("policy[0].regex_rewrite_substitution: is required when "
                      "regex_rewrite_pattern is set",
                      route_errors(**{"from": "https://a.example", "to": TO,
                                      "regex_rewrite_pattern": "^/a"}))
        errors = route_errors(**{"from": "https://a.example", "to": TO, "regex": "(?=x)y"})
        self.assertTrue(errors[0].startswith("policy[0].regex: invalid RE2 regular expression"))
        route = one_route(**{"from": "https://a.example", "to": TO, "regex": "/admin/.*"})
        self.assertIsNotNone(route.path_regex.fullmatch("/admin/x"))

    def test_matchers(self) -> None:
        """path and prefix start with '/'; only one matcher per route."""
        self.assertIn("policy[0].prefix: must start with '/', got 'admin'",
                      route_errors(**{"from": "https://a.example", "to": TO, "prefix": "admin"}))
        self.assertIn("set only one of path, prefix and regex",
                      route_errors(**{"from": "https://a.example", "to": TO, "prefix": "/a",
                                      "path": "/b"})[0])

    def test_matcher_with_parameters_refused(self) -> None:
        """Issue 39: requests are routed on their path without ';' parameters, so a path
        or prefix holding one (or %3B) could never match: refused, naming the key."""
        for key, value in (("prefix", "/app;v=1/"), ("path", "/login;x"), ("path", "/a%3bb")):
            errors = route_errors(**{"from": "https://a.example", "to": TO, key: value})
            self.assertIn(f"policy[0].{key}: {value!r} can never match: requests are routed "
                          "on their path without ';' parameters", errors)

    def test_redirect_fields(self) -> None:
        """Every redirect field parses; response_code defaults to 301; bad codes refused."""
        route = one_route(**{"from": "https://a.example", "redirect": {
            "https_redirect": True, "host_redirect": "b.example", "port_redirect": 8443,
            "path_redirect": "/p", "strip_query": True}})
        assert route.redirect is not None
        self.assertEqual((route.redirect.response_code, route.redirect.port_redirect,
                          route.redirect.strip_query), (301, 8443, True))
        self.assertIn("policy[0].redirect.response_code: must be one of 301, 302, 303, 307, "
                      "308, got 200", route_errors(**{"from": "https://a.example",
                                                      "redirect": {"response_code": 200}}))

    def test_claims_and_lists(self) -> None:
        """allowed_idp_claims: scalars become one-element lists; nested maps refused."""
        route = one_route(**{"from": "https://a.example", "to": TO, "allowed_idp_claims": {
            "family_name": "Doe", "groups": ["a", "b"]}, "allowed_users": "a@x,b@x"})
        self.assertEqual(dict(route.allowed_idp_claims), {"family_name": ("Doe",),
                                                          "groups": ("a", "b")})
        self.assertEqual(route.allowed_users, ("a@x", "b@x"))
        self.assertIn("values must be scalars",
                      route_errors(**{"from": "https://a.example", "to": TO,
                                      "allowed_idp_claims": {"a": {"b": 1}}})[0])

    def test_timeout_default_and_limit(self) -> None:
        """Route timeout defaults to default_upstream_timeout and cannot exceed timeout_write."""
        self.assertEqual(one_route(**{"from": "https://a.example", "to": TO}).timeout, 30.0)
        snap = load(base_config(default_upstream_timeout="45s",
                                policy=[{"from": "https://a.example", "to": TO, **{
                                    "allow_public_unauthenticated_access": True}}]))
        self.assertEqual(snap.routes[0].timeout, 45.0)
        errors = errors_of(base_config(timeout_write="10s", policy=[{
            "from": "https://a.example", "to": TO, "timeout": "1m",
            "allow_public_unauthenticated_access": True}]))
        self.assertEqual(errors, ["policy[0].timeout: 60s exceeds timeout_write (10s); a route "
                                  "timeout cannot exceed the global timeouts"])

    def test_lb_and_health(self) -> None:
        """lb_policy enum, its config objects, health checks (one kind each), outliers."""
        route = one_route(**{"from": "https://a.example", "to": ["http://a", "http://b"],
                             "lb_policy": "ring_hash", "ring_hash_lb_config": {
                                 "minimum_ring_size": 64},
                             "health_checks": [{"interval": "5s", "http_health_check": {
                                 "path": "/health"}}, {"tcp_health_check": {}}],
                             "outlier_detection": {"consecutive_5xx": 3}})
        self.assertEqual(route.lb_policy, "RING_HASH")
        self.assertEqual(route.ring_hash_lb_config.minimum_ring_size, 64)
        self.assertEqual([(h.kind, h.interval) for h in route.health_checks],
                         [("http", 5.0), ("tcp", 10.0)])
        self.assertEqual(route.outlier_detection.consecutive_5xx, 3)
        self.assertIn("is not one of ROUND_ROBIN", route_errors(**{
            "from": "https://a.example", "to": TO, "lb_policy": "FASTEST"})[0])
        self.assertIn("only applies with lb_policy: MAGLEV", route_errors(**{
            "from": "https://a.example", "to": TO, "maglev_lb_config": {"table_size": 7}})[0])
        self.assertIn("exactly one of http_health_check", route_errors(**{
            "from": "https://a.example", "to": TO, "health_checks": [{
                "http_health_check": {}, "tcp_health_check": {}}]})[0])
        self.assertIn("must be a prime number", route_errors(**{
            "from": "https://a.example", "to": TO, "lb_policy": "MAGLEV",
            "maglev_lb_config": {"table_size": 100}})[0])

    def test_unknown_route_field_warns(self) -> None:
        """A typo in a route field is a warning naming it and suggesting the right one."""
        snap = load(base_config(policy=[{"from": "https://a.example", "to": TO,
                                         "allow_public_unauthenticated_access": True,
                                         "prefx": "/a"}]))
        self.assertIn("policy[0].prefx: unknown route field (ignored); did you mean 'prefix'?",
                      [str(w) for w in snap.warnings])

    def test_every_error_reported_at_once(self) -> None:
        """Problems in several routes and settings are all reported together."""
        errors = errors_of(base_config(services="blue", policy=[
            {"from": "https://", "to": TO}, {"from": "https://a.example/x", "to": TO}]))
        self.assertEqual(len(errors), 3)


class TlsMaterialTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.ca = trustme.CA()
        self.cert = self.ca.issue_cert("client.example")
        self.dir = tempfile.mkdtemp()
        self.cert_pem = b"".join(b.bytes() for b in self.cert.cert_chain_pems)
        self.key_pem = self.cert.private_key_pem.bytes()

    def test_client_cert_pair(self) -> None:
        """tls_client_cert and key load inline or from files; one alone is an error (case 9)."""
        route = one_route(**{"from": "https://a.example", "to": TO,
                             "tls_client_cert": base64.b64encode(self.cert_pem).decode(),
                             "tls_client_key": base64.b64encode(self.key_pem).decode()})
        self.assertEqual(route.tls_client_cert, self.cert_pem)
        self.assertEqual(route_errors(**{"from": "https://a.example", "to": TO,
                                         "tls_client_key": "eA=="}),
                         ["policy[0]: config: client certificate key and cert both must be "
                          "non-empty"])

    def test_custom_ca(self) -> None:
        """A bad inline CA or a missing CA file is an error naming the key (case 10)."""
        errors = route_errors(**{"from": "https://a.example", "to": TO, "tls_custom_ca": "!"})
        self.assertTrue(errors[0].startswith("policy[0].tls_custom_ca: config: couldn't decode "
                                             "tls_custom_ca: cryptutil: invalid base64"))
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "tls_custom_ca_file": "/nonexistent/missing.pem"})
        self.assertIn("couldn't load certificate file", errors[0])
        path = write(self.dir, "ca.pem", self.ca.cert_pem.bytes())
        route = load(base_config(policy=[{"from": "https://a.example", "to": TO,
                                          "tls_custom_ca_file": "ca.pem",
                                          "allow_public_unauthenticated_access": True}]),
                     directory=self.dir).routes[0]
        self.assertEqual(route.tls_custom_ca, self.ca.cert_pem.bytes())
        self.assertTrue(path.endswith("ca.pem"))

    def test_not_pem(self) -> None:
        """Material that decodes but is not PEM of the right kind is refused."""
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "tls_downstream_client_ca": base64.b64encode(b"nope").decode()})
        self.assertIn("not a valid PEM certificate", errors[0])

    def test_orchestrator_token_forms(self) -> None:
        """Both orchestrator token forms at once is an error (case 11)."""
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "orchestrator_service_account_token": "t",
                                 "orchestrator_service_account_token_file": "f"})
        self.assertEqual(errors, ["policy[0]: config: specified both "
                                  "`orchestrator_service_account_token_file` and "
                                  "`orchestrator_service_account_token`"])


class PreserveRequestHeadersTests(SynchronousTestCase):
    """``preserve_request_headers`` (issue 28, beyond the reference) lifts the removal of
    path- and method-override headers, and nothing else."""

    def test_names_kept_in_lower_case_once(self) -> None:
        route = one_route(**{"from": "https://a.example", "to": TO,
                             "allow_public_unauthenticated_access": True,
                             "preserve_request_headers": ["X-HTTP-Method-Override",
                                                          "x-http-method-override",
                                                          "X-Original-URL"]})
        self.assertEqual(route.preserve_request_headers,
                         ("x-http-method-override", "x-original-url"))

    def test_other_headers_refused_with_the_list(self) -> None:
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "allow_public_unauthenticated_access": True,
                                 "preserve_request_headers": ["X-Gateway-Jwt-Assertion"]})
        self.assertEqual(errors, [
            "policy[0].preserve_request_headers: 'X-Gateway-Jwt-Assertion' is not a path- "
            "or method-override header; only these can be preserved: x-original-url, "
            "x-rewrite-url, x-original-uri, x-http-method-override, x-http-method, "
            "x-method-override"])

    def test_preserved_and_removed_is_a_contradiction(self) -> None:
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "allow_public_unauthenticated_access": True,
                                 "remove_request_headers": ["X-HTTP-Method"],
                                 "preserve_request_headers": ["x-http-method"]})
        self.assertEqual(errors, ["policy[0].preserve_request_headers: 'x-http-method' is "
                                  "also in remove_request_headers; choose one"])

    def test_not_a_list(self) -> None:
        errors = route_errors(**{"from": "https://a.example", "to": TO,
                                 "allow_public_unauthenticated_access": True,
                                 "preserve_request_headers": {"a": 1}})
        self.assertEqual(len(errors), 1)
        self.assertTrue(errors[0].startswith("policy[0].preserve_request_headers: "), errors)
