"""A route's ``mcp`` object (``gateway/config/mcp.py``): read with its key paths."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.mcp import McpRoute
from gateway.config.routes import Route, parse_policy


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
