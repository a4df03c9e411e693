"""The route fields as data: each ``Route`` attribute declares the field it is read
from, its kind, its default and its documentation (``route_field``), the way
``settings.py`` declares the global settings.

The loader (``routes.parse_policy``) coerces every field whose kind has a parser here;
fields read together with others (the TLS material, the upstreams, which need the
route's scheme) are filled by the route's own steps. The reference pages and
``conf/config.example.yaml``'s test read the same table (``routes.ROUTE_SCHEMA``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from gateway.config.errors import Problems
from gateway.config.route_parts import parse_claims, parse_header_rewrites, parse_redirect
from gateway.config.values import parse_bool, parse_duration, parse_list, parse_map

Coerce = Callable[[object, str, Problems], Any]
"""A field's parser: the raw value and its key path to the stored value, or ``UNSET``
after a problem it recorded (the attribute then keeps its default)."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


class FieldKind(StrEnum):
    """How a route field is written (the words the reference pages show)."""

    URL = "url"
    UPSTREAMS = "upstream URL list"
    REDIRECT = "redirect object"
    PATH = "path"
    REGEX = "RE2 expression"
    STR = "string"
    BOOL = "bool"
    LIST = "list of string"
    CLAIMS = "claim map"
    POLICY = "policy rules"
    DURATION = "duration"
    HEADERS = "header map"
    HEADER_REWRITES = "header rewrite list"
    BASE64 = "base64"
    FILE = "file location"
    ENUM = "enum"
    OBJECT = "object"
    OBJECTS = "list of objects"
    SSH = "ssh"


def _string(value: object, where: str, problems: Problems) -> Any:
    if isinstance(value, Mapping | list | tuple):
        problems.error(where, f"must be a string, got {value!r}")
        return UNSET
    return str(value)


def text(value: object, where: str, problems: Problems) -> Any:
    """Any scalar as its text, without complaint (file names, ``prefix_rewrite``)."""
    return str(value)


def _path(value: object, where: str, problems: Problems) -> Any:
    """``path`` and ``prefix``; a bad one is kept (the route fails) so that later checks
    see it set."""
    path = _string(value, where, problems)
    if path is UNSET or not path:
        return path
    if not path.startswith("/"):
        problems.error(where, f"must start with '/', got {path!r}")
    elif ";" in path or "%3b" in path.lower():
        # routes see the path without its ";" parameters (path_with_parameters_action)
        problems.error(where, f"{path!r} can never match: requests are routed on their "
                              "path without ';' parameters")
    return path


def _raising(parse: Callable[[object], Any]) -> Coerce:
    """A parser raising ValueError, its message recorded at the key path."""
    def coerce(value: object, where: str, problems: Problems) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            problems.error(where, str(exc))
            return UNSET
    return coerce


COERCERS: dict[FieldKind, Coerce] = {
    FieldKind.PATH: _path,
    FieldKind.REGEX: _string,
    FieldKind.STR: _string,
    FieldKind.FILE: text,
    FieldKind.BOOL: _raising(parse_bool),
    FieldKind.LIST: _raising(parse_list),
    FieldKind.DURATION: _raising(lambda value: parse_duration(str(value))),
    FieldKind.HEADERS: _raising(lambda value: MappingProxyType(parse_map(value, ":"))),
    FieldKind.CLAIMS: parse_claims,
    FieldKind.HEADER_REWRITES: parse_header_rewrites,
    FieldKind.REDIRECT: parse_redirect,
}
"""The parser of each kind that needs nothing but the value; the other kinds' fields
are filled by a step of the route (``parse=None``)."""


def route_meta(kind: FieldKind, doc: str, *, key: str = "",
               parse: Coerce | _Unset | None = UNSET, compiled: str = "") -> dict[str, Any]:
    """The schema of a route field, as a dataclass field's metadata: read from route
    field ``key`` (default: the attribute's name); ``parse`` overrides the kind's
    parser, ``None``: a step of the route fills it; ``compiled``: the attribute that
    holds the RE2 pattern compiled."""
    return {"key": key, "kind": kind, "doc": doc, "compiled": compiled,
            "parse": COERCERS.get(kind) if isinstance(parse, _Unset) else parse}


def route_field(default: Any, kind: FieldKind, doc: str, *, key: str = "",
                parse: Coerce | _Unset | None = UNSET, compiled: str = "") -> Any:
    """Declare a ``Route`` attribute that is a route field, with its default
    (``route_meta`` for the rest)."""
    meta = route_meta(kind, doc, key=key, parse=parse, compiled=compiled)
    if isinstance(default, dict):
        frozen = MappingProxyType(dict(default))
        return field(default_factory=lambda: frozen, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class RouteFieldInfo:
    """Schema entry of one route field."""

    key: str  # as written in a route
    attr: str  # the ``Route`` (or ``SshRoute``) attribute it fills; "" for none
    kind: FieldKind
    doc: str
    default: Any
    parse: Coerce | None
    compiled: str = ""


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def schema_of(cls: type) -> dict[str, RouteFieldInfo]:
    """The route fields ``cls`` declares with ``route_field``, in declaration order."""
    out: dict[str, RouteFieldInfo] = {}
    for f in fields(cls):
        meta = f.metadata
        if "kind" not in meta:
            continue  # derived: compiled, or filled from other fields
        key = meta["key"] or f.name
        out[key] = RouteFieldInfo(key, f.name, meta["kind"], meta["doc"], _default(f),
                                  meta["parse"], meta["compiled"])
    return out
