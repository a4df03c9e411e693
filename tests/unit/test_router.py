"""Route selection and upstream path mapping (the original's routing cases)."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.routes import Route
from gateway.dataplane.routing.router import (
    match_route,
    normalise_host,
    route_host_keys,
    upstream_path,
)

from .config.helpers import IDENTITY, base_config, load


def routes(*specs: dict[str, Any]) -> tuple[Route, ...]:
    policy = [{"to": "http://upstream.internal", **spec} for spec in specs]
    return load(base_config(policy=policy, **IDENTITY)).routes


class HostTests(SynchronousTestCase):
    def test_host_keys(self) -> None:
        """Default ports match with or without the port; explicit ports only with it (39)."""
        cases = {
            "http://example.com": ("example.com", "example.com:80"),
            "https://example.com": ("example.com", "example.com:443"),
            "https://example.com:1234": ("example.com:1234",),
            "tcp+https://h:6379": ("h:6379",),
        }
        for url, keys in cases.items():
            to = "tcp://a:1" if url.startswith("tcp") else "http://a"
            self.assertEqual(route_host_keys(routes({"from": url, "to": to})[0]), keys)

    def test_normalise(self) -> None:
        """Host headers are compared case-insensitively, without a trailing dot."""
        self.assertEqual(normalise_host("Example.COM."), "example.com")
        self.assertEqual(normalise_host("Example.com.:443"), "example.com:443")
        self.assertEqual(normalise_host("[::1]"), "[::1]")


class MatchTests(SynchronousTestCase):
    def test_matching_rules(self) -> None:
        """prefix, path and regex match as the original's route tests expect (48)."""
        r = routes({"from": "https://example.com", "prefix": "/admin"},
                   {"from": "https://example.com", "path": "/"},
                   {"from": "https://example.com", "regex": "/re/.*"})
        self.assertIs(match_route(r, "example.com", "/admin/somepath"), r[0])
        self.assertIs(match_route(r, "example.com", "/"), r[1])
        self.assertIs(match_route(r, "example.com", "/re/x"), r[2])
        self.assertIsNone(match_route(r, "example.com", "/other"))
        self.assertIsNone(match_route(r, "example.org", "/admin/x"))
        only_path = routes({"from": "https://example.com", "path": "/admin"})
        self.assertIsNone(match_route(only_path, "example.com", "/admin/somepath"))
        regex = routes({"from": "https://example.com", "regex": "[xyz]"})
        self.assertIsNone(match_route(regex, "example.com", "/"))

    def test_order_wins(self) -> None:
        """Routes are checked in listed order: an earlier specific route shadows (49)."""
        r = routes({"from": "https://example.com", "prefix": "/by-user",
                    "allowed_users": ["bob@example.com"]},
                   {"from": "https://example.com", "allow_public_unauthenticated_access": True})
        chosen = match_route(r, "example.com", "/by-user")
        assert chosen is not None
        self.assertFalse(chosen.allow_public_unauthenticated_access)


class PathTests(SynchronousTestCase):
    def check(self, spec: dict[str, Any], request: str, expected: str) -> None:
        route = routes({"from": "https://example.com", **spec})[0]
        self.assertEqual(upstream_path(route, route.to[0], request), expected)

    def test_trailing_slash_rule(self) -> None:
        """`to` path without slash is glued on; with a slash it separates (rule 3, case 44)."""
        self.check({"to": "https://foo.example.com/bar"}, "/x", "/barx")
        self.check({"to": "https://b/anything/"}, "/foo", "/anything/foo")
        self.check({"to": "https://b/"}, "/", "/")
        self.check({"to": "https://b"}, "/foo", "/foo")

    def test_prefix_rewrite(self) -> None:
        """prefix_rewrite replaces the matched prefix (rule 4, case 45)."""
        self.check({"prefix": "/admin", "prefix_rewrite": "/"}, "/admin", "/")
        self.check({"prefix": "/admin", "prefix_rewrite": "/"}, "/admin/x", "//x")
        self.check({"to": "https://foo.example.com/bar", "prefix_rewrite": "/foo"}, "/x",
                   "/foox")

    def test_regex_rewrite(self) -> None:
        """regex_rewrite_pattern with a \\2/\\1 substitution (case 46)."""
        self.check({"regex_rewrite_pattern": "^/service/([^/]+)(/.*)$",
                    "regex_rewrite_substitution": "\\2/instance/\\1"},
                   "/service/abc/x", "/x/instance/abc")
