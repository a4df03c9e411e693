"""A route's ``mcp`` object (``gateway/config/mcp.py``): read with its key paths."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.mcp import McpRoute
from gateway.config.routes import Route, parse_policy

from .config.helpers import IDENTITY, base_config, errors_of, load


def _route(**fields: object) -> tuple[Route | None, Problems]:
    problems = Problems()
    routes = parse_policy([{"from": "https://mcp.example", "to": "http://127.0.0.1:8000",
                            **fields}], Reader("/"), problems, 30.0)
    return (routes[0] if routes else None), problems  # a route with errors is dropped


class McpRouteTests(SynchronousTestCase):
    def test_absent_is_not_an_mcp_route(self) -> None:
        route, problems = _route()
        assert route is not None
        self.assertEqual((route.mcp, problems.errors), (None, []))

    def test_empty_object_takes_the_defaults(self) -> None:
        route, problems = _route(mcp={})
        assert route is not None
        self.assertEqual(problems.errors, [])
        self.assertEqual(route.mcp, McpRoute(max_request_bytes=16 * 1024 * 1024))

    def test_limit_is_read(self) -> None:
        route, _ = _route(mcp={"max_request_bytes": 2048})
        assert route is not None
        self.assertEqual(route.mcp, McpRoute(max_request_bytes=2048))

    def test_the_response_limit_is_read(self) -> None:
        route, problems = _route(mcp={"max_response_bytes": 4096})
        assert route is not None
        self.assertEqual(problems.errors, [])
        self.assertEqual(route.mcp, McpRoute(max_response_bytes=4096))
        _, problems = _route(mcp={"max_response_bytes": 1})
        self.assertIn("policy[0].mcp.max_response_bytes", str(problems.errors[0]))

    def test_bad_values_name_their_key(self) -> None:
        for value, where in (("yes", "policy[0].mcp"),
                             ({"max_request_bytes": "big"}, "policy[0].mcp.max_request_bytes"),
                             ({"max_request_bytes": 10}, "policy[0].mcp.max_request_bytes"),
                             ({"tools": []}, "policy[0].mcp.tools")):
            _, problems = _route(mcp=value)
            self.assertIn(where, " ".join(str(e) for e in problems.errors), value)


class McpResourcesTests(SynchronousTestCase):
    """Two MCP routes of one host may not share a resource identifier: a token is bound
    to its identifier, so one issued for either would be taken by the other (a security
    review: ``path: /mcp`` beside ``prefix: /mcp/``; a regex route beside ``/``)."""

    def errors(self, *routes: dict[str, object]) -> list[str]:
        policy = [{"to": "http://127.0.0.1:8000", "allow_any_authenticated_user": True,
                   "mcp": {}, **r} for r in routes]
        return [e for e in errors_of(base_config(policy=policy, **IDENTITY))
                if ".mcp" in e]

    def test_equal_identifiers_are_refused(self) -> None:
        for pair in (({"from": "https://h.example", "path": "/mcp"},
                      {"from": "https://h.example", "prefix": "/mcp/"}),
                     ({"from": "https://h.example"},
                      {"from": "https://h.example", "regex": "/a.*"})):
            with self.subTest(pair=pair):
                (problem,) = self.errors(*pair)
                self.assertIn("policy[1].mcp", problem)
                self.assertIn("policy[0] is the same MCP resource", problem)

    def test_distinct_identifiers_load(self) -> None:
        policy = [{"to": "http://127.0.0.1:8000", "allow_any_authenticated_user": True,
                   "mcp": {}, **r} for r in (
                       {"from": "https://h.example", "prefix": "/a/"},
                       {"from": "https://h.example", "prefix": "/b/"},
                       {"from": "https://other.example", "prefix": "/a/"},
                       {"from": "https://h.example:8443", "prefix": "/a/"})]
        self.assertEqual(len(load(base_config(policy=policy, **IDENTITY)).routes), 4)
