"""The reference pages that are generated from the code's own schema: every global
setting (``gateway.config.settings.SETTINGS``), every route and redirect field
(``ROUTE_SCHEMA``, ``REDIRECT_FIELDS``) and every policy criterion (``CRITERIA``).

It lives beside the documentation, not in the ``gateway`` package: only the Sphinx
build and the tests read it, never the daemon or the CLI, so the Debian package's
virtualenv does not carry it. It reads the schema (``gateway.config``, the lowest tier of
``tests/unit/test_layering.py``) and nothing else of the gateway.

A page asks for a table with a line of its own, ``<!-- generated: NAME -->``; the
``source-read`` hook below replaces the line with the Markdown made here, so the built
pages always show the schema of the code they were built with. Where the schema has no
description (the criteria have none), the text comes from ``docs/reference/
descriptions.yaml``, keyed by name; ``tests/docs/test_reference.py`` fails on a
missing or stale entry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.config.route_parts import REDIRECT_FIELDS
from gateway.config.routes import ROUTE_SCHEMA
from gateway.config.settings import SETTINGS, Kind, SettingInfo
from gateway.policy.criteria import CRITERIA

DOCS = Path(__file__).resolve().parents[1]
DESCRIPTIONS = DOCS / "reference" / "descriptions.yaml"
SETTINGS_SOURCE = Path(__file__).resolve().parents[2] / "gateway" / "config" / "settings.py"

MARKER = re.compile(r"^<!-- generated: (?P<name>[a-z_]+) -->$", re.M)
GROUP = re.compile(r"^ {4}# --- (?P<title>[^-(]+?)\s*(?:\(|-{3,}|$)")
FIELD = re.compile(r"^ {4}(?P<key>[a-z0-9_]+): .*= _s\(")

# The policy criteria take a name after "/" (claim/NAME): shown that way.
SUB_SUFFIX = "/NAME"


def descriptions() -> dict[str, dict[str, Any]]:
    """The hand-written table: {"settings"|"route_fields"|"criteria": {name: entry}}."""
    loaded = yaml.safe_load(DESCRIPTIONS.read_text(encoding="utf-8")) or {}
    return {section: dict(loaded.get(section) or {})
            for section in ("settings", "route_fields", "criteria")}


def setting_groups() -> dict[str, str]:
    """Setting key -> the group comment it is declared under in settings.py
    (``# --- tracing ---``), in declaration order."""
    group = "shared settings"
    out: dict[str, str] = {}
    for line in SETTINGS_SOURCE.read_text(encoding="utf-8").splitlines():
        if (heading := GROUP.match(line)) is not None:
            group = heading["title"].strip()
        elif (field := FIELD.match(line)) is not None:
            out[field["key"]] = group
    return out


def go_duration(seconds: float) -> str:
    """Seconds in Go's duration syntax, as operators write them: 50400 -> 14h."""
    if seconds == 0:
        return "0s"
    if seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def render_default(info: SettingInfo) -> str:
    """How the default is written in a configuration file; "unset" when there is none."""
    value = info.default
    if value is None or value == "" or (isinstance(value, tuple | Mapping) and not value):
        return "unset"
    if info.kind is Kind.DURATION:
        return f"`{go_duration(value)}`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    if isinstance(value, Mapping):
        return ", ".join(f"`{k}: {v}`" for k, v in value.items())
    return f"`{value}`"


def plain_text(text: str) -> str:
    """Schema text as Markdown: shown as written (``',<weight>'`` is no HTML tag, ``*`` no
    emphasis), except for its `code` spans."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else re.sub(r"([<*\[\]])", r"\\\1", part)
                   for part in parts)


def setting_text(info: SettingInfo, table: Mapping[str, Any]) -> str:
    return plain_text(info.doc.strip()) or str(table.get(info.key, "")).strip()


def settings_markdown(table: Mapping[str, Any] | None = None, *, labels: bool = True) -> str:
    """One section per setting, under the group it is declared in (``labels``: with the
    ``setting-KEY`` targets other pages link to; the man page has none of its own)."""
    table = descriptions()["settings"] if table is None else table
    groups = setting_groups()
    lines: list[str] = []
    current = None
    for key, info in SETTINGS.items():
        group = groups.get(key, "shared settings")
        if group != current:
            current = group
            lines += [f"## {group[0].upper()}{group[1:]}", ""]
        facts = [f"Type: {info.kind.value}", f"Default: {render_default(info)}",
                 "File only" if info.env is None else f"Environment: `{info.env}`"]
        if info.choices:
            facts.insert(1, "One of: " + ", ".join(f"`{c}`" for c in info.choices))
        if info.secret:
            facts.append("Secret (never logged)")
        if info.bootstrap:
            facts.append("Bootstrap-only (restart to change)")
        if info.extension:
            facts.append("{doc}`beyond the reference </explanation/compatibility>`" if labels
                         else "beyond the reference")
        label = [f"(setting-{key})="] if labels else []
        lines += [*label, f"### `{key}`", "", setting_text(info, table), "",
                  " · ".join(facts), ""]
    return "\n".join(lines)


def route_fields_markdown(table: Mapping[str, Any] | None = None, *,
                          labels: bool = True) -> str:
    table = descriptions()["route_fields"] if table is None else table
    lines = ["## Route fields", ""]
    for key, info in ROUTE_SCHEMA.items():
        text = plain_text(info.doc.strip()) or str(table.get(key, "")).strip()
        label = [f"(field-{key})="] if labels else []
        lines += [*label, f"### `{key}`", "", text, ""]
    lines += ["## Redirect fields", "",
              "The fields of a route's `redirect` mapping (a route with `redirect` answers "
              "with it instead of proxying).", ""]
    for key, doc in REDIRECT_FIELDS.items():
        text = plain_text(doc.strip()) or str(table.get(f"redirect.{key}", "")).strip()
        label = [f"(field-redirect-{key})="] if labels else []
        lines += [*label, f"### `redirect.{key}`", "", text, ""]
    return "\n".join(lines)


def criterion_title(name: str) -> str:
    return name + SUB_SUFFIX if CRITERIA[name].sub else name


def criteria_markdown(table: Mapping[str, Any] | None = None) -> str:
    table = descriptions()["criteria"] if table is None else table
    lines: list[str] = []
    for name, spec in CRITERIA.items():
        entry = table.get(name) or {}
        reads = ", ".join(sorted(spec.reads)) or "the identity only"
        lines += [f"(criterion-{name})=", f"### `{criterion_title(name)}`", "",
                  str(entry.get("matches", "")).strip(), "",
                  f"Example: `{entry.get('example', '')}` · Reads: {reads} · "
                  f"Refusal kind: `{spec.kind}`", ""]
    return "\n".join(lines)


def extensions_markdown() -> str:
    """The settings the reference does not have (``extension=True``), as a list."""
    keys = [key for key, info in SETTINGS.items() if info.extension]
    return "\n".join(f"- {{ref}}`{key} <setting-{key}>`" for key in keys) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_markdown,
    "route_fields": route_fields_markdown,
    "criteria": criteria_markdown,
    "extensions": extensions_markdown,
    "settings_man": lambda: settings_markdown(labels=False),
    "route_fields_man": lambda: route_fields_markdown(labels=False),
}


def expand(text: str) -> str:
    """The page's text with every ``<!-- generated: NAME -->`` line replaced."""
    def one(match: re.Match[str]) -> str:
        return GENERATORS[match["name"]]()
    return MARKER.sub(one, text)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    if MARKER.search(source[0]):
        source[0] = expand(source[0])


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
