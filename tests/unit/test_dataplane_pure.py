"""Pure data-plane rules: header handling, redirect locations and the compiled plan."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.snapshot import Snapshot
from gateway.dataplane.routing.plan import Plan, build_plan
from gateway.dataplane.routing.redirect import redirect_location
from gateway.tls.client import TLSClientConfig
from gateway.wire.headers import (
    connection_tokens,
    forwarded_for,
    rewrite_prefix,
    trusted_hop,
    underscore_twin,
)

from .config.helpers import IDENTITY, PUBLIC_ROUTE, base_config, load


def snapshot(*policy: dict[str, Any], **options: Any) -> Snapshot:
    return load(base_config(policy=list(policy), **IDENTITY, **options))


def public(**spec: Any) -> dict[str, Any]:
    return {**PUBLIC_ROUTE, **spec}


class ConnectionTokensTests(SynchronousTestCase):
    def test_tokens(self) -> None:
        """Every Connection value counts; tokens are trimmed, lower-cased, empties dropped."""
        self.assertEqual(connection_tokens([b"keep-alive, X-Foo ,, x-bar", b"Upgrade"]),
                         frozenset({b"keep-alive", b"x-foo", b"x-bar", b"upgrade"}))
        self.assertEqual(connection_tokens([b" Close "]), frozenset({b"close"}))
        self.assertEqual(connection_tokens([]), frozenset())
        long_value = b"x-" + b"a" * 100 + b", TE"  # past the cached length
        self.assertEqual(connection_tokens([long_value]),
                         frozenset({b"x-" + b"a" * 100, b"te"}))


class UnderscoreTwinTests(SynchronousTestCase):
    """Issue 12: a client header that reads as one the gateway sets once ``_`` is read as
    ``-`` (CGI/WSGI/PHP fold both) is reserved."""

    def test_reserved(self) -> None:
        removed = frozenset({b"x-secret", b"x-route", b"x-email"})
        extra = frozenset({b"authorization"})
        for name in (b"x_gateway_jwt_assertion", b"x-gateway_claim-email",
                     b"x_gateway_anything", b"x_forwarded_for", b"x_forwarded_proto",
                     b"x_forwarded_host", b"content_length", b"transfer_encoding",
                     b"x_secret", b"x_route", b"x_email", b"proxy_authorization"):
            self.assertTrue(underscore_twin(name, removed, extra), name)

    def test_not_reserved(self) -> None:
        for name in (b"x_custom", b"x_gateway", b"my_header", b"x_forwarded",
                     b"x_gatewayjwt"):
            self.assertFalse(underscore_twin(name, frozenset(), frozenset()), name)

    def test_setting(self) -> None:
        """headers_with_underscores_action: allow by default; a bad value names the key."""
        self.assertEqual(snapshot(public()).options.headers_with_underscores_action, "allow")
        self.assertEqual(snapshot(public(), headers_with_underscores_action="reject")
                         .options.headers_with_underscores_action, "reject")
        with self.assertRaises(Exception) as caught:
            snapshot(public(), headers_with_underscores_action="ignore")
        self.assertIn("headers_with_underscores_action", str(caught.exception))


class ForwardedForTests(SynchronousTestCase):
    def test_table(self) -> None:
        """The peer is appended unless skipped; N trusted hops pick the Nth from the right."""
        chain = b"203.0.113.1, 198.51.100.2"
        cases: list[tuple[tuple[bytes | None, str, int, bool], tuple[bytes | None, str]]] = [
            ((None, "192.0.2.7", 0, False), (b"192.0.2.7", "192.0.2.7")),
            ((b"", "192.0.2.7", 0, False), (b"192.0.2.7", "192.0.2.7")),
            ((b"203.0.113.1", "192.0.2.7", 0, False),
             (b"203.0.113.1, 192.0.2.7", "192.0.2.7")),
            ((chain, "192.0.2.7", 0, False), (chain + b", 192.0.2.7", "192.0.2.7")),
            ((chain, "192.0.2.7", 1, False), (chain + b", 192.0.2.7", "198.51.100.2")),
            ((chain, "192.0.2.7", 2, False), (chain + b", 192.0.2.7", "203.0.113.1")),
            ((chain, "192.0.2.7", 3, False), (chain + b", 192.0.2.7", "192.0.2.7")),
            ((None, "192.0.2.7", 1, False), (b"192.0.2.7", "192.0.2.7")),
            ((chain, "192.0.2.7", 0, True), (chain, "192.0.2.7")),
            ((chain, "192.0.2.7", 1, True), (chain, "198.51.100.2")),
            ((None, "192.0.2.7", 0, True), (None, "192.0.2.7")),
            ((b" 203.0.113.1 ,, 198.51.100.2 ,", "192.0.2.7", 1, True),
             (b" 203.0.113.1 ,, 198.51.100.2 ,", "198.51.100.2")),
        ]
        for arguments, expected in cases:
            self.assertEqual(forwarded_for(*arguments), expected, arguments)

    def test_trusted_hop_is_none_when_the_chain_is_short(self) -> None:
        """Decisions need to know there is no client address (the peer is a proxy):
        ``trusted_hop`` says so where ``forwarded_for`` falls back to the peer."""
        chain = b"203.0.113.1, 198.51.100.2"
        self.assertEqual(trusted_hop(chain, 2), "203.0.113.1")
        self.assertIsNone(trusted_hop(chain, 3))
        self.assertIsNone(trusted_hop(None, 1))
        self.assertIsNone(trusted_hop(b" , ", 1))


class RewritePrefixTests(SynchronousTestCase):
    def test_table(self) -> None:
        """Only a leading prefix is replaced, once."""
        cases = {
            (b"http://internal/x", b"http://internal/", b"https://app/"): b"https://app/x",
            (b"http://internal/", b"http://internal/", b"/"): b"/",
            (b"http://other/x", b"http://internal/", b"https://app/"): b"http://other/x",
            (b"x http://internal/", b"http://internal/", b"/"): b"x http://internal/",
            (b"aaa", b"a", b"b"): b"baa",
        }
        for (value, prefix, replacement), expected in cases.items():
            self.assertEqual(rewrite_prefix(value, prefix, replacement), expected, value)


class RedirectLocationTests(SynchronousTestCase):
    def location(self, redirect: dict[str, Any], scheme: str, host: str,
                 request_path: str = "/p", route: dict[str, Any] | None = None) -> str:
        spec = {"from": "https://old.example.com", "redirect": redirect, **(route or {})}
        return redirect_location(snapshot(spec).routes[0], scheme, host, request_path, "?q=1")

    def test_table(self) -> None:
        """Each redirect field changes its part of the URL; the rest comes from the request."""
        cases: list[tuple[dict[str, Any], str, str, str]] = [
            ({"https_redirect": True}, "http", "old.example.com:8080",
             "https://old.example.com/p?q=1"),
            ({"https_redirect": True}, "http", "old.example.com",
             "https://old.example.com/p?q=1"),
            ({"https_redirect": True}, "https", "old.example.com:8443",
             "https://old.example.com:8443/p?q=1"),
            ({"https_redirect": True, "port_redirect": 8443}, "http", "old.example.com:8080",
             "https://old.example.com:8443/p?q=1"),
            ({"scheme_redirect": "http"}, "https", "old.example.com:8443",
             "http://old.example.com/p?q=1"),
            ({"scheme_redirect": "https"}, "https", "old.example.com:8443",
             "https://old.example.com:8443/p?q=1"),
            ({"host_redirect": "new.example.com"}, "https", "old.example.com:8443",
             "https://new.example.com/p?q=1"),
            ({"host_redirect": "new.example.com:9443"}, "https", "old.example.com",
             "https://new.example.com:9443/p?q=1"),
            ({"host_redirect": "new.example.com:443"}, "https", "old.example.com",
             "https://new.example.com/p?q=1"),
            ({"port_redirect": 8443}, "https", "old.example.com",
             "https://old.example.com:8443/p?q=1"),
            ({"port_redirect": 443}, "https", "old.example.com:8443",
             "https://old.example.com/p?q=1"),
            ({"port_redirect": 80}, "http", "old.example.com:8080",
             "http://old.example.com/p?q=1"),
            ({"path_redirect": "/elsewhere"}, "https", "old.example.com",
             "https://old.example.com/elsewhere?q=1"),
            ({"strip_query": True}, "https", "old.example.com", "https://old.example.com/p"),
            ({"path_redirect": "/x", "strip_query": True, "host_redirect": "n.example.com"},
             "https", "old.example.com", "https://n.example.com/x"),
            ({"https_redirect": True}, "http", "[::1]:8080", "https://[::1]/p?q=1"),
            ({"port_redirect": 8443}, "https", "[2001:db8::1]", "https://[2001:db8::1]:8443/p?q=1"),
            ({"path_redirect": "/x"}, "https", "[2001:db8::1]:9443",
             "https://[2001:db8::1]:9443/x?q=1"),
        ]
        for redirect, scheme, host, expected in cases:
            self.assertEqual(self.location(redirect, scheme, host), expected, (redirect, host))

    def test_response_code_not_in_location(self) -> None:
        """``response_code`` changes the status only, never the Location."""
        for code in (301, 302, 303, 307, 308):
            self.assertEqual(
                self.location({"host_redirect": "new.example.com", "response_code": code},
                              "https", "old.example.com"),
                "https://new.example.com/p?q=1",
            )
        route = snapshot({"from": "https://old.example.com",
                          "redirect": {"https_redirect": True, "response_code": 308}}).routes[0]
        assert route.redirect is not None
        self.assertEqual(route.redirect.response_code, 308)

    def test_prefix_rewrite(self) -> None:
        """prefix_rewrite replaces the matched prefix of a prefix (or path) route."""
        cases = [
            ({"prefix": "/old"}, "/new", "/old/x", "https://old.example.com/new/x?q=1"),
            ({"prefix": "/old/"}, "/", "/old/x/y", "https://old.example.com/x/y?q=1"),
            ({"prefix": "/old"}, "/new", "/old", "https://old.example.com/new?q=1"),
            ({"path": "/exact"}, "/other", "/exact", "https://old.example.com/other?q=1"),
            ({}, "/base", "/x", "https://old.example.com/basex?q=1"),
        ]
        for route, rewrite, path, expected in cases:
            self.assertEqual(
                self.location({"prefix_rewrite": rewrite}, "https", "old.example.com", path,
                              route),
                expected, (route, path),
            )


OVERRIDES = frozenset({b"x-original-url", b"x-rewrite-url", b"x-original-uri",
                       b"x-http-method-override", b"x-http-method", b"x-method-override"})


class BuildPlanTests(SynchronousTestCase):
    def test_host_keys(self) -> None:
        """Routes are indexed by each Host value they answer (default port with or without)."""
        plan = build_plan(snapshot(
            public(**{"from": "https://app.example.com"}),
            public(**{"from": "http://plain.example.com", "to": "http://10.0.0.9"}),
            public(**{"from": "https://port.example.com:8443"}),
        ))
        self.assertEqual(set(plan.by_host), {
            "app.example.com", "app.example.com:443", "plain.example.com",
            "plain.example.com:80", "port.example.com:8443",
        })
        self.assertEqual([p.route.index for p in plan.routes], [0, 1, 2])

    def test_route_order_per_host(self) -> None:
        """Per host, route plans keep the order of the policy list."""
        plan = build_plan(snapshot(
            public(prefix="/a"), public(**{"from": "https://other.example.com"}),
            public(prefix="/b"), public(),
        ))
        for key in ("app.example.com", "app.example.com:443"):
            self.assertEqual([p.route.index for p in plan.by_host[key]], [0, 2, 3])
        self.assertEqual([p.route.index for p in plan.by_host["other.example.com"]], [1])

    def test_response_headers_merged(self) -> None:
        """Global response headers apply to every route; a route's value wins per name."""
        plan = build_plan(snapshot(
            public(set_response_headers={"X-B": "route", "X-C": "route"}), public(prefix="/x"),
            set_response_headers={"X-A": "global", "X-B": "global"},
        ))
        first, second = plan.routes
        self.assertEqual(dict(first.response_headers),
                         {b"X-A": b"global", b"X-B": b"route", b"X-C": b"route"})
        self.assertEqual(first.response_header_names, frozenset(
            {b"x-a", b"x-b", b"x-c", b"x-request-id"}))
        self.assertEqual(dict(second.response_headers), {b"X-A": b"global", b"X-B": b"global"})
        self.assertEqual(dict(plan.response_headers), {b"X-A": b"global", b"X-B": b"global"})

    def test_default_response_headers(self) -> None:
        """Without a setting, the security headers of the reference are added."""
        plan = build_plan(snapshot(public()))
        self.assertEqual(dict(plan.response_headers), {
            b"X-Content-Type-Options": b"nosniff",
            b"X-Frame-Options": b"SAMEORIGIN",
            b"X-XSS-Protection": b"1; mode=block",
            b"Strict-Transport-Security": b"max-age=31536000; includeSubDomains; preload",
        })

    def test_response_headers_disabled(self) -> None:
        """``disable: true`` removes the global headers; route headers still apply."""
        plan = build_plan(snapshot(public(set_response_headers={"X-Route": "1"}),
                                   set_response_headers={"disable": True}))
        self.assertEqual(plan.response_headers, ())
        self.assertEqual(plan.routes[0].response_headers, ((b"X-Route", b"1"),))
        self.assertEqual(plan.routes[0].response_header_names,
                         frozenset({b"x-route", b"x-request-id"}))

    def test_route_header_wins_whatever_its_case(self) -> None:
        """A route header replaces the global one of the same name in any letter case."""
        plan = build_plan(snapshot(public(set_response_headers={"x-frame-options": "DENY"})))
        values = [v for n, v in plan.routes[0].response_headers
                  if n.lower() == b"x-frame-options"]
        self.assertEqual(values, [b"DENY"])

    def test_request_drop(self) -> None:
        """Removed names and names the route sets are dropped from the client's request."""
        plan = build_plan(snapshot(public(remove_request_headers=["X-Secret", "Cookie"],
                                          set_request_headers={"X-Extra": "1", "X-Two": "2"})))
        route = plan.routes[0]
        self.assertEqual(route.request_drop,
                         frozenset({b"x-secret", b"cookie", b"x-extra", b"x-two",
                                    b"x-request-id"}) | OVERRIDES)
        self.assertEqual(route.request_headers, ((b"X-Extra", b"1"), (b"X-Two", b"2")))

    def test_override_headers_dropped_unless_preserved(self) -> None:
        """Path- and method-override headers are dropped on every route (issue 28); a
        route keeps the ones it names, in any spelling."""
        plan = build_plan(snapshot(
            public(),
            public(**{"from": "https://legacy.example.com",
                      "preserve_request_headers": ["X-HTTP-Method-Override"]})))
        plain, legacy = plan.routes
        self.assertLessEqual(OVERRIDES, plain.request_drop)
        self.assertNotIn(b"x-http-method-override", legacy.request_drop)
        self.assertLessEqual(OVERRIDES - {b"x-http-method-override"}, legacy.request_drop)

    def test_tls_only_for_https_upstreams(self) -> None:
        """A TLS client config exists only when a route has an https upstream."""
        plan = build_plan(snapshot(
            public(),
            public(**{"from": "https://tls.example.com", "to": "https://10.0.0.2:8443",
                      "tls_server_name": "up.internal", "tls_skip_verify": True}),
            public(**{"from": "https://mixed.example.com",
                      "to": ["http://10.0.0.3", "https://10.0.0.4"]}),
        ))
        plain, tls, mixed = plan.routes
        self.assertIsNone(plain.tls)
        self.assertEqual(tls.tls, TLSClientConfig("up.internal", True, None, None, None))
        self.assertEqual(mixed.tls, TLSClientConfig("", False, None, None, None))

    def test_public_and_timeout(self) -> None:
        """The plan carries whether a route is public and its upstream timeout."""
        plan = build_plan(snapshot(public(timeout="7s"),
                                   {"from": "https://private.example.com", "to": "http://a"},
                                   default_upstream_timeout="11s"))
        self.assertEqual([(p.public, p.timeout) for p in plan.routes], [(True, 7.0), (False, 11.0)])

    def test_same_upstreams_share_state(self) -> None:
        """Two routes to the same upstreams share host state and balancer in one plan."""
        plan = build_plan(snapshot(public(prefix="/a"), public(prefix="/b"),
                                   public(**{"to": "http://10.0.0.5"})))
        a, b, c = plan.routes
        self.assertIs(a.hosts[0], b.hosts[0])
        self.assertIs(a.balancer, b.balancer)
        self.assertIsNot(a.hosts[0], c.hosts[0])

    def test_state_reused_across_rebuild(self) -> None:
        """Host state outlives a rebuild that leaves a route's upstreams unchanged."""
        first = build_plan(snapshot(public(), public(**{"from": "https://b.example.com",
                                                        "to": "http://10.0.0.5"})))
        first.routes[0].hosts[0].healthy = False
        second = build_plan(snapshot(public(set_response_headers={"X-New": "1"}),
                                     public(**{"from": "https://b.example.com",
                                               "to": "http://10.0.0.6"})),
                            previous=first)
        self.assertIs(second.routes[0].hosts[0], first.routes[0].hosts[0])
        self.assertIs(second.routes[0].balancer, first.routes[0].balancer)
        self.assertFalse(second.routes[0].hosts[0].healthy)
        self.assertIsNot(second.routes[1].hosts[0], first.routes[1].hosts[0])
        self.assertEqual(second.routes[1].hosts[0].upstream.host, "10.0.0.6")

    def test_state_replaced_when_to_changes(self) -> None:
        """Changing ``to`` (or the balancing policy) gives fresh host state."""
        first = build_plan(snapshot(public()))
        first.routes[0].hosts[0].healthy = False
        changed_to = build_plan(snapshot(public(to=["http://127.0.0.1:9000",
                                                    "http://127.0.0.1:9001"])), previous=first)
        self.assertIsNot(changed_to.routes[0].hosts[0], first.routes[0].hosts[0])
        self.assertTrue(changed_to.routes[0].hosts[0].healthy)
        changed_lb = build_plan(snapshot(public(lb_policy="RANDOM")), previous=first)
        self.assertIsNot(changed_lb.routes[0].hosts[0], first.routes[0].hosts[0])

    def test_redirect_route_has_no_hosts(self) -> None:
        """A redirect route has no upstream hosts and no balancer."""
        plan = build_plan(snapshot({"from": "https://old.example.com",
                                    "redirect": {"https_redirect": True}}))
        self.assertEqual((plan.routes[0].hosts, plan.routes[0].balancer), ((), None))


class LookupTests(SynchronousTestCase):
    def plan(self) -> Plan:
        return build_plan(snapshot(public(prefix="/api"), public(path="/exact")))

    def test_unknown_host(self) -> None:
        """A host no route names: no plan, and the host is reported unknown."""
        self.assertEqual(self.plan().lookup("nope.example.com", "/api"), (None, False))
        self.assertEqual(self.plan().lookup("app.example.com:8443", "/api"), (None, False))

    def test_known_host_without_matching_path(self) -> None:
        """A known host whose routes match no path: no plan, but the host is known."""
        self.assertEqual(self.plan().lookup("app.example.com", "/other"), (None, True))

    def test_match(self) -> None:
        """The first route matching the path answers; Host is compared normalised."""
        plan = self.plan()
        for host in ("app.example.com", "app.example.com:443", "APP.Example.com.",
                     "app.example.com.:443"):
            found, known = plan.lookup(host, "/api/x")
            assert found is not None
            self.assertEqual((found.route.index, known), (0, True), host)
        found, _ = plan.lookup("app.example.com", "/exact")
        assert found is not None
        self.assertEqual(found.route.index, 1)


def request_head(route: dict[str, Any], headers: list[tuple[bytes, bytes]], *,
                 underscores_drop: bool = False, path: str = "/",
                 path_parameters: str = "") -> list[bytes]:
    """The upstream request head's lines for a GET with ``headers`` on ``route``."""
    from types import SimpleNamespace

    from gateway.dataplane.exchange.head import ConnectionFacts, request_head
    from gateway.dataplane.exchange.request_head import upstream_request_head
    from gateway.wire.headers import connection_tokens
    plan = build_plan(snapshot(route)).routes[0]
    core = SimpleNamespace(cookie_name="_gateway", underscores_drop=underscores_drop,
                           xff_trusted_hops=0, skip_xff_append=False, scheme_bytes=b"https")
    head = request_head(b"GET", path.encode(), b"1.1", headers, "from.example.com", path,
                        path_parameters, connection_tokens=connection_tokens(
                            [v for n, v in headers if n.lower() == b"connection"]))
    exchange = SimpleNamespace(
        plan=plan, host_state=plan.hosts[0], core=core, head=head, allow=None, trace=None,
        host="from.example.com", path=path, facts=ConnectionFacts("127.0.0.9"), rid=b"rid")
    return upstream_request_head(exchange).split(b"\r\n")  # type: ignore[arg-type]


class RequestHeadTableTests(SynchronousTestCase):
    """The upstream request head looks each header name up in one table per route; the
    table keeps the precedence the checks had when they were written out in turn."""

    def test_generic_and_special_headers(self) -> None:
        lines = request_head(public(), [
            (b"Host", b"from.example.com"), (b"Accept", b"*/*"), (b"TE", b"trailers"),
            (b"Cookie", b"a=1; _gateway=secret"), (b"X-Gateway-Jwt-Assertion", b"forged"),
            (b"Authorization", b"Gateway token"), (b"X-Request-Id", b"theirs"),
            (b"X-Forwarded-Proto", b"http")])
        self.assertEqual(lines[0], b"GET / HTTP/1.1")
        self.assertIn(b"Accept: */*", lines)
        self.assertIn(b"Cookie: a=1", lines)
        self.assertIn(b"x-forwarded-proto: https", lines)
        self.assertIn(b"host: 127.0.0.1:9000", [line.lower() for line in lines])
        for gone in (b"TE", b"X-Gateway", b"Authorization", b"theirs", b"secret"):
            self.assertFalse([line for line in lines if gone in line], gone)

    def test_last_segment_parameters_follow_the_rewritten_path(self) -> None:
        """Issue 39: ``/secure/doc;jsessionid=1`` is routed as ``/secure/doc``; the
        upstream gets the rewritten path with the parameters after it."""
        route = public(prefix="/secure/", prefix_rewrite="/app/")
        lines = request_head(route, [], path="/secure/doc", path_parameters=";jsessionid=1")
        self.assertEqual(lines[0], b"GET /app/doc;jsessionid=1 HTTP/1.1")
        plain = request_head(route, [], path="/secure/doc")
        self.assertEqual(plain[0], b"GET /app/doc HTTP/1.1")

    def test_host_source_loses_to_removal_and_to_forwarded_host(self) -> None:
        """``host_rewrite_header`` naming a removed header or X-Forwarded-Host does not
        set Host (the removal, and X-Forwarded-Host's own rule, come first)."""
        removed = request_head(public(host_rewrite_header="X-Target",
                                      remove_request_headers=["X-Target"]),
                               [(b"X-Target", b"t.example.com")])
        self.assertIn(b"host: 127.0.0.1:9000", removed)
        self.assertNotIn(b"X-Target: t.example.com", removed)
        forwarded = request_head(public(host_rewrite_header="X-Forwarded-Host"),
                                 [(b"X-Forwarded-Host", b"t.example.com")])
        self.assertIn(b"host: 127.0.0.1:9000", forwarded)
        plain = request_head(public(host_rewrite_header="X-Target"),
                             [(b"X-Target", b"t.example.com")])
        self.assertIn(b"host: t.example.com", plain)
        self.assertIn(b"X-Target: t.example.com", plain)

    def test_host_source_with_underscore_follows_the_underscore_rules(self) -> None:
        route = public(host_rewrite_header="X_Target")
        kept = request_head(route, [(b"X_Target", b"t.example.com")])
        self.assertIn(b"host: t.example.com", kept)
        dropped = request_head(route, [(b"X_Target", b"t.example.com")],
                               underscores_drop=True)
        self.assertIn(b"host: 127.0.0.1:9000", dropped)
        self.assertNotIn(b"X_Target: t.example.com", dropped)

    def test_connection_names_any_header(self) -> None:
        """A header the client names in Connection is hop-by-hop, also a special one."""
        lines = request_head(public(), [(b"Connection", b"cookie, x-forwarded-for, x-a"),
                                        (b"Cookie", b"a=1"), (b"X-A", b"1"),
                                        (b"X-Forwarded-For", b"10.0.0.1")])
        self.assertFalse([line for line in lines if line.startswith((b"Cookie", b"X-A"))])
        self.assertIn(b"x-forwarded-for: 127.0.0.9", lines)


class NameInfoTests(SynchronousTestCase):
    def test_names_are_learnt_within_bounds(self) -> None:
        """A header name's lower case and verdict are kept for the next request, but
        only short names and only up to a count: junk names cannot grow memory."""
        from gateway.wire import headers
        self.patch(headers, "NAME_INFO", {})
        self.assertEqual(headers.learn_name(b"X-Gateway-Jwt"), (b"x-gateway-jwt", False))
        self.assertEqual(headers.learn_name(b"X_Thing"), (b"x_thing", False))
        self.assertEqual(headers.learn_name(b"Accept"), (b"accept", True))
        self.assertEqual(set(headers.NAME_INFO), {b"X-Gateway-Jwt", b"X_Thing", b"Accept"})
        headers.learn_name(b"X-" + b"a" * 100)
        self.assertEqual(len(headers.NAME_INFO), 3)
        for i in range(3000):
            headers.learn_name(b"x-%d" % i)
        self.assertEqual(len(headers.NAME_INFO), 2048)


class UpstreamHeadPurityTests(SynchronousTestCase):
    """``upstream_request_head`` reads the exchange and its plan and writes neither: the
    route's header table and header block are made with the plan, the request id with
    the exchange (it wrote all three on a request's way through)."""

    def test_the_header_table_and_block_are_made_with_the_plan(self) -> None:
        from gateway.dataplane.routing.header_table import HOST, HOST_SOURCE, SKIP
        plan = build_plan(snapshot(public(set_request_headers={"X-A": "1"},
                                          host_rewrite_header="X-Up"))).routes[0]
        self.assertEqual(plan.request_headers_block, b"X-A: 1\r\n")
        self.assertEqual((plan.request_actions[b"host"], plan.request_actions[b"x-up"],
                          plan.request_actions[b"x-request-id"], plan.request_actions[b"x-a"]),
                         (HOST, HOST_SOURCE, SKIP, SKIP))

    def test_nothing_is_written(self) -> None:
        from types import SimpleNamespace

        from gateway.dataplane.exchange.head import ConnectionFacts, request_head
        from gateway.dataplane.exchange.request_head import upstream_request_head
        plan = build_plan(snapshot(public(set_request_headers={"X-A": "1"}))).routes[0]
        core = SimpleNamespace(cookie_name="_gateway", underscores_drop=False,
                               xff_trusted_hops=0, skip_xff_append=False,
                               scheme_bytes=b"https")
        head = request_head(b"GET", b"/", b"1.1", [(b"Host", b"from.example.com"),
                                                    (b"X-Request-Id", b"client-id")],
                            "from.example.com", "/")
        exchange = SimpleNamespace(
            plan=plan, host_state=plan.hosts[0], core=core, head=head, allow=None,
            trace=None, host="from.example.com", path="/",
            facts=ConnectionFacts("127.0.0.9"), rid=b"the-exchanges-id")
        exchange_before = dict(vars(exchange))
        plan_before = {name: getattr(plan, name) for name in plan.__slots__}
        first = upstream_request_head(exchange)  # type: ignore[arg-type]
        self.assertEqual(upstream_request_head(exchange), first)  # type: ignore[arg-type]
        self.assertEqual(vars(exchange), exchange_before)
        for name, value in plan_before.items():
            self.assertIs(getattr(plan, name), value, name)
        self.assertIn(b"\r\nx-request-id: the-exchanges-id\r\n", first)
        self.assertNotIn(b"client-id", first)

    def test_the_http1_head_carries_the_first_request_id(self) -> None:
        from gateway.dataplane.codecs.http1_head import read_head
        head = read_head(b"GET", b"/", [(b"Host", b"a.example.com"),
                                        (b"X-Request-Id", b"one"), (b"x-request-id", b"two")])
        self.assertEqual(head.request_id, b"one")
        self.assertEqual(read_head(b"GET", b"/", [(b"Host", b"a.example.com")]).request_id,
                         b"")
