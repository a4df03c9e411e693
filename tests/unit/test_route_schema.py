"""The route fields as a table: a field is declared once, on ``Route``, and read by its
kind; the loader, the reference pages and the example read the same table."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

from twisted.trial.unittest import SynchronousTestCase

from gateway.config import route_parts, route_policy, route_steps, ssh
from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.route_schema import FieldKind, route_field, schema_of
from gateway.config.route_steps import STEPS, RouteInput, fields_by_kind
from gateway.config.routes import ROUTE_FIELDS, ROUTE_SCHEMA, Route, parse_policy

# where the fields a step fills (``parse=None``) are read
STEP_MODULES = (route_steps, route_parts, route_policy, ssh)


@dataclass(frozen=True, slots=True)
class _Probe:
    """A route class with one new field, as a helper adding one would write it."""

    pass_something: bool = route_field(False, FieldKind.BOOL, "Pass something upstream.")
    limit: float = route_field(1.0, FieldKind.DURATION, "How long.", key="limit_after")


def _read(item: dict[str, object], problems: Problems) -> dict[str, object]:
    route = RouteInput(item, "policy[0]", problems, Reader("/"), 30.0)
    fields_by_kind(route, schema_of(_Probe))
    return route.values


class RouteSchemaTests(SynchronousTestCase):
    def test_a_new_field_is_one_line(self) -> None:
        """A declared field is read by its kind's parser with no step of its own, under
        the name it is written with, its problems at its key path."""
        problems = Problems()
        self.assertEqual(_read({"pass_something": "yes", "limit_after": "2m"}, problems),
                         {"pass_something": True, "limit": 120.0})
        self.assertEqual(problems.errors, [])
        self.assertEqual(_read({"pass_something": "maybe"}, problems), {})
        self.assertEqual([p.path for p in problems.errors], ["policy[0].pass_something"])
        info = schema_of(_Probe)["limit_after"]
        self.assertEqual((info.attr, info.kind, info.default, info.doc),
                         ("limit", FieldKind.DURATION, 1.0, "How long."))

    def test_every_field_is_read(self) -> None:
        """Every route field is read by its kind or named by a step; every declared
        ``Route`` attribute is in the table under its written name."""
        declared = {f.name for f in fields(Route) if "kind" in f.metadata}
        self.assertEqual(declared, {i.attr for i in ROUTE_SCHEMA.values() if i.attr})
        text = "".join(inspect.getsource(m) for m in STEP_MODULES)
        unread = [key for key, info in ROUTE_SCHEMA.items()
                  if info.parse is None and f'"{key}"' not in text]
        self.assertEqual(unread, [])
        self.assertEqual(list(ROUTE_FIELDS), list(ROUTE_SCHEMA))
        self.assertIn(fields_by_kind, STEPS)

    def test_defaults_are_the_routes(self) -> None:
        """A route that sets only ``from`` and ``to`` has every field's default (the
        timeout: the global default, or none for a TCP route)."""
        problems = Problems()
        (route, tcp) = parse_policy([{"from": "https://a.example", "to": "http://127.0.0.1"},
                                     {"from": "tcp+https://db.example:5432",
                                      "to": "tcp://127.0.0.1:5432"}],
                                    Reader("/"), problems, 12.0)
        self.assertEqual(problems.errors, [])
        for info in ROUTE_SCHEMA.values():
            if info.attr and info.key not in ("from", "to", "timeout"):
                self.assertEqual(getattr(route, info.attr), info.default, info.key)
        self.assertEqual((route.timeout, tcp.timeout), (12.0, 0.0))
